"""No NaN reaches the weights: a learner refuses an update whose scores or advantages (before its first optimizer
step), loss or gradient norm (before each step) are not finite with NonFiniteUpdateError, naming itself, the
iteration and the quantity, and changes nothing (cory_agents.learners.lm, cory_agents.distributed.optimizer_step);
every process of a run decides alike; a run ends in one line and its checkpoints before stay intact."""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import torch.multiprocessing as mp

from cory_agents.distributed.data_parallel import DataParallel
from cory_agents.distributed.optimizer_step import optimizer_steps
from cory_agents.training.checkpoint import list_checkpoints, load_checkpoint
from cory_agents.training.trainer import Trainer
from cory_env.errors import CoryError, NonFiniteUpdateError
from tests.support import ROOT
from tests.support.launches import free_port
from tests.support.nonfinite_worker import nonfinite_worker
from tests.support.runs import PROMPTS, cli, cli_env, toy_cli_args, toy_config
from tests.support.toy import fraction_good

#: (--algo, --learner, the learner tested): a PPO learner alone, and a GRPO learner of a CORY pair.
LEARNERS = [("ppo", "ppo", "pioneer"), ("cory", "grpo", "llm_1")]


def played(toy_model, tmp_path, algo: str, learner: str, **kw):
    """A trainer of the tiny model (batch 4, two minibatches; GRPO: groups of 2) and its first episode."""
    if learner == "grpo":
        kw["group_size"] = 2
    config = toy_config(
        toy_model, tmp_path, algo=algo, learner=learner, batch_size=4, mini_batch_size=2, ppo_epochs=1, **kw
    )
    trainer = Trainer(config, prompts=PROMPTS, reward_fn=fraction_good)
    return trainer, trainer.team_episode(trainer.rollout())


def snapshot(learner) -> dict:
    """Everything an optimizer step changes: the weights and the optimizer state, copied."""
    return copy.deepcopy(
        {"weights": dict(learner.model.named_parameters()), "optimizer": learner.optimizer.state_dict()}
    )


def assert_identical(now, before, where: str = "") -> None:
    """Bit for bit: every tensor, number and key of ``before`` (nested dicts and lists) in ``now``."""
    if isinstance(before, dict):
        assert now.keys() == before.keys(), where
        for key in before:
            assert_identical(now[key], before[key], f"{where}/{key}")
    elif isinstance(before, list | tuple):
        assert len(now) == len(before), where
        for i, (a, b) in enumerate(zip(now, before)):
            assert_identical(a, b, f"{where}[{i}]")
    elif torch.is_tensor(before):
        assert torch.equal(now.detach(), before.detach()), where
    else:
        assert now == before, where


@pytest.mark.parametrize("algo, learner_kind, name", LEARNERS)
def test_a_nan_score_stops_the_update_before_the_optimizer_steps(toy_model, tmp_path, algo, learner_kind, name):
    trainer, team = played(toy_model, tmp_path, algo, learner_kind)
    learner, episode = trainer.learners[name], team.episodes[name]
    learner.learn(episode)  # iteration 1: finite, it steps
    before = snapshot(learner)
    scores = episode.scores.copy()
    scores[1] = np.nan  # the reward checks refuse a NaN from a reward function: this one reaches the learner
    with pytest.raises(NonFiniteUpdateError) as raised:
        learner.learn(dataclasses.replace(episode, scores=scores))
    error = raised.value
    assert isinstance(error, CoryError) and error.exit_code == 1
    assert (error.learner, error.iteration, error.quantity) == (name, 2, "scores")
    message = str(error)
    assert "\n" not in message
    assert message.startswith(f"{name}'s update in iteration 2 was stopped before its first optimizer step"), message
    assert "its scores were not finite in float32 (NaN, or past ±3.4e38) on 1 of 4 conversations" in message
    assert "Check that the reward function returns finite numbers of a moderate size" in message
    # Nothing changed: no weight, no optimizer moment or step count; no gradient left; back in eval mode, to act.
    assert_identical(snapshot(learner), before)
    assert all(p.grad is None for p in learner.model.parameters())
    assert not learner.model.training and learner.updates == 1
    # A finite update afterwards steps as ever: every trainable weight moves, and it is iteration 2.
    learner.learn(episode)
    assert learner.updates == 2
    moved = [not torch.equal(p, before["weights"][n]) for n, p in learner.model.named_parameters() if p.requires_grad]
    assert moved and all(moved)


@pytest.mark.parametrize("max_grad_norm", [1.0, 0.0])
def test_an_infinite_gradient_norm_with_a_finite_loss_stops_the_update(toy_model, tmp_path, max_grad_norm):
    # Advantage weights of 1e20 (HAPPO's weight M on a conversation whose earlier answers became e^46 times
    # likelier): the losses stay finite, the gradients' norm overflows float32. With --max-grad-norm 0 nothing
    # clips, and the norm is computed for the check alone.
    trainer, team = played(toy_model, tmp_path, "ppo", "ppo", max_grad_norm=max_grad_norm)
    learner, episode = trainer.learners["pioneer"], team.episodes["pioneer"]
    before = snapshot(learner)
    with pytest.raises(NonFiniteUpdateError) as raised:
        learner.learn(episode, advantage_weights=torch.full((len(episode.scores),), 1e20))
    assert (raised.value.learner, raised.value.iteration, raised.value.quantity) == ("pioneer", 1, "gradient norm")
    hint = "a lower --max-grad-norm (now 1)" if max_grad_norm else "--max-grad-norm 1 (now off)"
    assert "its gradient norm was inf" in str(raised.value) and hint in str(raised.value)
    assert_identical(snapshot(learner), before)  # no step: the optimizer holds no state yet
    assert all(p.grad is None for p in learner.model.parameters()) and learner.updates == 0
    # The same update with weights of 1 steps.
    learner.learn(episode, advantage_weights=torch.ones(len(episode.scores)))
    assert learner.updates == 1 and not torch.equal(learner.model.v_head.weight, before["weights"]["v_head.weight"])


# Known defect, not yet understood: process 0 sometimes aborts after its work ("terminate called without an
# active exception"; 3 of about 21 runs on 2026-12-05, a barrier before destroying the group did not help), so
# this test stays out of CI's slow tests (Makefile: CI_SLOW) until that is found.
@pytest.mark.slow  # two spawned processes (make test-all)
def test_two_processes_take_the_same_decision(tmp_path):
    # Process 0's loss is NaN while its gradients are finite (a NaN term without a gradient); process 1's is
    # finite. Both must refuse the step (one stepping alone would leave the processes' weights apart), and both
    # must return rather than wait for the other in a collective.
    mp.start_processes(nonfinite_worker, args=(free_port(), str(tmp_path)), nprocs=2, start_method="spawn")
    results = [json.loads((tmp_path / f"{rank}.json").read_text()) for rank in range(2)]
    for clipping in ("fused", "clip_grad_norm_"):  # clipped in AdamW's fused kernel, or by clip_grad_norm_
        mine, theirs = (results[rank][clipping] for rank in range(2))
        for seen in (mine, theirs):
            assert seen["quantity"] == "loss", seen
            assert seen["unchanged"] and seen["no_optimizer_state"], seen
            assert seen["then_stepped"] and seen["in_sync"], seen  # a finite step afterwards, alike on both
        assert "loss was nan" in mine["message"]
        assert "loss was NaN or infinite on another process" in theirs["message"]


def deepspeed_path() -> str | None:
    """Where ``deepspeed`` is imported from (for the spawned processes), or None."""
    try:
        import deepspeed
    except Exception:  # noqa: BLE001 - not installed, or installed but broken: skip either way
        return None
    return str(Path(deepspeed.__file__).parent.parent)


@pytest.mark.slow
@pytest.mark.skipif(
    deepspeed_path() is None or shutil.which(os.environ.get("CXX", "c++")) is None,
    reason="DeepSpeed is not installed (optional: pip install deepspeed), or there is no C++ compiler for its CPU op",
)
def test_under_zero_two_processes_take_the_same_decision(tmp_path):
    # ZeRO-2: the losses are checked (and the decision reduced) before the engine's step; gradients that overflow
    # make the engine skip its step, which both processes then report.
    pythonpath = f"{ROOT}{os.pathsep}{deepspeed_path()}"
    mp.start_processes(
        _spawned_zero_worker, args=(free_port(), str(tmp_path), pythonpath), nprocs=2, start_method="spawn"
    )
    results = [json.loads((tmp_path / f"{rank}.json").read_text()) for rank in range(2)]
    for result in results:
        assert result["engine"] == "ZeROSteps", result
        assert [result[case]["quantity"] for case in ("nan_loss", "overflowing_gradients")] == ["loss", "gradient norm"]
        assert result["nan_loss"]["unchanged"] and result["overflowing_gradients"]["unchanged"], result
        assert result["then_stepped"] and result["in_sync"], result
    assert "loss was nan" in results[0]["nan_loss"]["message"]
    assert "loss was NaN or infinite on another process" in results[1]["nan_loss"]["message"]
    assert all("gradient norm was inf" in r["overflowing_gradients"]["message"] for r in results)


def _spawned_zero_worker(rank: int, port: int, results: str, pythonpath: str) -> None:
    sys.path[:0] = pythonpath.split(os.pathsep)  # the spawned interpreter finds the tests and deepspeed
    from tests.support.nonfinite_worker import zero_nonfinite_worker

    zero_nonfinite_worker(rank, port, results, pythonpath)


def test_a_run_whose_update_is_not_finite_ends_in_one_line_and_keeps_its_checkpoint(toy_model, tmp_path):
    # The reward check refuses NaN and infinite scores (cory_env.rewards.base), so the run's reward gives
    # 1e300 from its second call on: finite in float64, the check lets it through, and it overflows to inf in
    # the learner's float32 arithmetic. --algo ppo calls the reward once an iteration.
    out = tmp_path / "run"
    args = toy_cli_args(
        toy_model,
        out,
        "--algo",
        "ppo",
        "--iterations",
        "3",
        "--checkpoint-every",
        "1",
        "--reward",
        "tests.support.toy:overflowing_fraction_good",
    )
    env = cli_env() | {"TOY_REWARD_OVERFLOW_AFTER": "1"}
    result = subprocess.run(cli(*args), env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 1, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    last = result.stderr.rstrip("\n").splitlines()[-1]
    assert last.startswith("train_cory.py: error: pioneer's update in iteration 2 was stopped before its first"), last
    assert "its scores were not finite in float32 (NaN, or past ±3.4e38) on 4 of 4 conversations" in last, last
    # Iteration 1's checkpoint is there, whole, with finite weights; iteration 2 left nothing behind.
    assert [p.name for p in list_checkpoints(out)] == ["iter_000000.safetensors"]
    state = load_checkpoint(list_checkpoints(out)[0])
    assert state["iteration"] == 1 and state["learners"]["pioneer"]["updates"] == 1
    assert all(torch.isfinite(w).all() for w in state["learners"]["pioneer"]["model"].values())
    assert pd.read_csv(out / "metrics.csv")["iteration"].tolist() == [0]
    assert (out / "task_reward.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"  # the iterations before it, drawn
    # It resumes from there with a reward that stays finite, to the end.
    resumed = subprocess.run(
        cli(*args, "--resume", "true"),
        env=cli_env(),  # no TOY_REWARD_OVERFLOW_AFTER: the reward stays finite
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert pd.read_csv(out / "metrics.csv")["iteration"].tolist() == [0, 1, 2]


@pytest.mark.parametrize("fused", [True, False])  # clipped in AdamW's fused kernel, or by clip_grad_norm_
@pytest.mark.parametrize("max_grad_norm", [1.0, None])
def test_the_optimizer_steps_refuse_a_loss_or_a_gradient_norm_that_is_not_finite(fused, max_grad_norm):
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1, fused=fused)
    steps = optimizer_steps(model, optimizer, DataParallel(), max_grad_norm)
    before = copy.deepcopy(model.state_dict())
    x = torch.ones(4, 3)
    for loss, quantity, value in [
        (model(x).sum() + torch.tensor(float("nan")), "loss", "nan"),  # finite gradients, NaN loss
        ((model(x) - model(x).detach()).sum() * 1e38, "gradient norm", "inf"),  # a loss of 0, gradients of 4e38
        (model(x).sum().abs() * torch.tensor(float("inf")), "loss", "inf"),
    ]:
        steps.backward(loss)
        with pytest.raises(NonFiniteUpdateError, match=f"an update's {quantity} was {value}, so the optimizer did not"):
            steps.step()
        assert_identical(model.state_dict(), before)
        assert not optimizer.state_dict()["state"] and all(p.grad is None for p in model.parameters())
    assert steps.grad_norms() == []  # no refused step's norm is logged
    steps.backward(model(x).sum())
    steps.step()
    assert not torch.equal(model.weight, before["weight"]) and len(steps.grad_norms()) == (max_grad_norm is not None)
