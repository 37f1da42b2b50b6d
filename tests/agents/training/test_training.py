"""Training for real at toy scale: learning, role exchange state, checkpoints, the CLI."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from transformers.modeling_layers import GradientCheckpointingLayer

from cory_agents.training.checkpoint import checkpoint_iteration, list_checkpoints, load_checkpoint
from cory_agents.training.config import TrainConfig
from cory_agents.training.trainer import Trainer
from tests.support import ROOT
from tests.support.runs import PROMPTS, cli, cli_env, metrics_without_timing, reward_curve, toy_cli_args, toy_config
from tests.support.toy import fraction_good


def test_ppo_raises_the_reward(toy_model, tmp_path):
    Trainer(toy_config(toy_model, tmp_path, algo="ppo"), prompts=PROMPTS, reward_fn=fraction_good).train(progress=False)
    curve = reward_curve(tmp_path, "pioneer")
    assert curve[-3:].mean() > curve[:3].mean() + 0.15, curve


def test_cory_raises_the_reward_of_both_learners(toy_model, tmp_path):
    # No KL penalty: this measures learning alone (the penalty is tested in test_ppo_math). With it, at lr 1e-2
    # the curves were close enough to the threshold that the thread count (float summation order) decided.
    config = toy_config(toy_model, tmp_path, algo="cory", iterations=16, role_exchange_period=2, kl_coef=0.0)
    Trainer(config, prompts=PROMPTS, reward_fn=fraction_good).train(progress=False)
    for learner in ("llm_0", "llm_1"):
        curve = reward_curve(tmp_path, learner)
        assert curve[-3:].mean() > curve[:3].mean() + 0.1, (learner, curve)
    roles = pd.read_csv(tmp_path / "metrics.csv")["llm_0/role"].tolist()
    assert roles == [0, 0, 1, 1] * 4  # pioneer (0) and observer (1), exchanged every 2 iterations


def test_role_exchange_keeps_optimizer_and_controller_state(toy_model, tmp_path):
    config = toy_config(toy_model, tmp_path, algo="cory", iterations=1, role_exchange_period=1, adaptive_kl=True)
    trainer = Trainer(config, prompts=PROMPTS, reward_fn=fraction_good)
    learner = trainer.learners["llm_0"]
    ids = {
        name: id(x) for name, x in (("model", learner.model), ("optimizer", learner.optimizer), ("kl", learner.kl_ctl))
    }
    coefs = []
    for iteration in range(3):
        trainer.run_iteration()
        assert trainer.game.roles["llm_0"] == ("pioneer" if iteration % 2 == 0 else "observer")
        coefs.append(learner.kl_ctl.value)
    # Same objects across the exchanges, Adam moments accumulated over all 3 iterations.
    assert ids == {
        name: id(x) for name, x in (("model", learner.model), ("optimizer", learner.optimizer), ("kl", learner.kl_ctl))
    }
    steps = {int(s["step"]) for s in learner.optimizer.state.values()}
    assert steps == {3 * config.ppo_epochs * config.batch_size // config.mini_batch_size}
    assert len(set(coefs)) == 3  # the adaptive coefficient kept moving, never reset to its initial value


#: The toy reward after a short sleep: the same numbers, and iterations long enough that a test's
#: signal lands inside the run however slow the machine is to notice the moment it waits for.
PACED = ("--reward", "tests.support.toy:slow_fraction_good")


def toy_cli_env() -> dict[str, str]:
    return cli_env() | {"TOY_REWARD_SLEEP": "0.2"}


def run_toy_cli(model: Path, out: Path, *extra: str) -> None:
    subprocess.run(
        cli(*toy_cli_args(model, out, *extra)),
        env=toy_cli_env(),
        cwd=ROOT,
        check=True,
        capture_output=True,
        timeout=300,
    )


def start_toy_cli(model: Path, out: Path, *extra: str, wait_for: Callable[[], bool]) -> subprocess.Popen:
    """The CLI in the background, returned once ``wait_for()`` holds (it must hold before the run ends)."""
    proc = subprocess.Popen(
        cli(*toy_cli_args(model, out, *extra)),
        env=toy_cli_env(),
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 240
    while not wait_for():
        assert proc.poll() is None and time.monotonic() < deadline, "the run ended before it was interrupted"
        time.sleep(0.02)
    return proc


@pytest.mark.parametrize("algo", ["cory", "ppo", pytest.param("cory --lora", marks=pytest.mark.ci)])
def test_cli_end_to_end(toy_model, tmp_path, algo):
    out = tmp_path / "run"
    algo, *extra = algo.split()
    result = subprocess.run(
        cli(*toy_cli_args(toy_model, out, "--algo", algo, "--iterations", "2", *extra)),
        env=cli_env(),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    metrics = pd.read_csv(out / "metrics.csv")
    assert metrics["iteration"].tolist() == [0, 1]
    learners = ["llm_0", "llm_1"] if algo == "cory" else ["pioneer"]
    for learner in learners:
        for column in (
            "task_reward_mean",
            "kl",
            "combined_reward",
            "policy_loss",
            "value_loss",
            "entropy",
            "clipfrac",
            "kl_coef",
            "role",
        ):
            assert np.isfinite(metrics[f"{learner}/{column}"]).all()
    for png in ("task_reward.png", "kl.png", "combined_reward.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (out / "samples.jsonl").read_text().count("\n") >= 2
    assert (out / "checkpoints" / "iter_000001.safetensors").exists()
    assert "plots:" in result.stdout and "models:" in result.stdout
    weights = "adapter_model.safetensors" if extra == ["--lora"] else "model.safetensors"
    assert all((out / "model" / learner / weights).is_file() for learner in learners)


@pytest.mark.parametrize(
    "game",
    [
        ["--task", "signal", "--reward", "signal", "--prompt-source", "auto", "--context-length", "96"],
        pytest.param(["--rounds", "2"], marks=pytest.mark.ci),
        ["--rounds", "3", "--turn-rewards", "--num-agents", "3", "--context-length", "96"],
    ],
    ids=["signal", "2-rounds", "3-rounds-of-3-turn-rewards"],
)
def test_cli_games_end_to_end(toy_model, tmp_path, game):
    out = tmp_path / "run"
    result = subprocess.run(
        cli(*toy_cli_args(toy_model, out, "--iterations", "2", *game)),
        env=cli_env(),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    metrics = pd.read_csv(out / "metrics.csv")
    assert metrics["iteration"].tolist() == [0, 1]
    learners = sorted({c.split("/")[0] for c in metrics.columns if c.startswith("llm_")})
    assert learners == [f"llm_{i}" for i in range(3 if "--num-agents" in game else 2)]
    for learner in learners:
        for column in ("task_reward_mean", "reward_mean", "kl", "policy_loss", "value_loss"):
            assert np.isfinite(metrics[f"{learner}/{column}"]).all()
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    if "signal" in game:  # the secret is in the sender's prompt only
        for sample in samples:
            told = re.search(r"The secret colour is (red|blue|green|yellow)\.", sample["context"])
            assert (told is not None) == (sample["role"] == "pioneer")
            assert 0.0 <= sample["reward"] <= 1.0 and sample["task_reward"] in (0.0, 1.0)
            if sample["role"] == "pioneer":
                assert sample["task_reward"] == 0.0


def test_cli_help_explains_the_flags():
    result = subprocess.run(cli("--help"), env=cli_env(), capture_output=True, text=True, timeout=120)
    assert result.returncode == 0
    for flag in ("--algo", "--role-exchange-period", "--no-knowledge-transfer", "--kl-coef", "--resume", "--preset"):
        assert flag in result.stdout
    assert "iterations between role exchanges" in result.stdout


@pytest.mark.parametrize(
    "learner",
    [
        "ppo",
        pytest.param("happo", marks=pytest.mark.ci),
        pytest.param("difference", marks=pytest.mark.ci),
        pytest.param("mappo --rounds 2 --turn-rewards", marks=pytest.mark.ci),
        pytest.param("ppo --compile", marks=pytest.mark.ci),
        pytest.param("ppo --rounds 2 --turn-rewards", marks=pytest.mark.ci),
        pytest.param(
            "ppo --task signal --reward signal --prompt-source auto --context-length 96", marks=pytest.mark.ci
        ),
        # Chat form on the embedded architecture (its chat template): later turns carry the earlier ones' columns.
        pytest.param(
            "ppo --model tiny --task signal --chat --rounds 2 --prompt-source auto --context-length 256",
            marks=pytest.mark.ci,
        ),
        pytest.param("ppo --model tiny --task sentiment --chat --rounds 2 --context-length 256", marks=pytest.mark.ci),
        pytest.param("ppo --model tiny --task taboo --prompt-source auto --context-length 128", marks=pytest.mark.ci),
    ],
)
def test_resume_after_sigkill_matches_an_uninterrupted_run(toy_model, tmp_path, learner):
    args = ["--algo", "cory", "--iterations", "6", "--checkpoint-every", "1", "--role-exchange-period", "2"]
    learner, *extra = learner.split()
    args += ["--learner", learner, *extra, *PACED]
    run_toy_cli(toy_model, tmp_path / "whole", *args)
    killed = tmp_path / "killed"
    # A checkpoint after the first iteration: each deletes the one before it (--keep-checkpoints 1).
    proc = start_toy_cli(
        toy_model, killed, *args, wait_for=lambda: any(checkpoint_iteration(p) >= 1 for p in list_checkpoints(killed))
    )
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done = pd.read_csv(killed / "metrics.csv")["iteration"].max()
    assert done < 5, "killed too late to test a resume"

    run_toy_cli(toy_model, killed, *args, "--resume")
    assert pd.read_csv(killed / "metrics.csv")["iteration"].tolist() == list(range(6))
    pd.testing.assert_frame_equal(
        metrics_without_timing(tmp_path / "whole"), metrics_without_timing(killed), check_exact=True
    )


@pytest.mark.ci  # make test: SIGTERM's stop (test_stops.py), the exact resume after SIGKILL (above)
def test_sigterm_finishes_the_iteration_saves_a_checkpoint_and_the_resume_is_exact(toy_model, tmp_path):
    args = ["--algo", "cory", "--iterations", "8", "--checkpoint-every", "100", "--role-exchange-period", "2", *PACED]
    run_toy_cli(toy_model, tmp_path / "whole", *args)
    stopped = tmp_path / "stopped"
    metrics = stopped / "metrics.csv"
    proc = start_toy_cli(
        toy_model, stopped, *args, wait_for=lambda: metrics.exists() and len(metrics.read_text().splitlines()) >= 2
    )
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=240)
    assert proc.returncode == 128 + signal.SIGTERM, stderr[-2000:]
    done = len(pd.read_csv(metrics))
    assert done < 8, "the signal came too late to test a stop"
    # Not every 100 iterations: a checkpoint of exactly the iterations done; no final model yet.
    assert [p.name for p in (stopped / "checkpoints").iterdir()] == [f"iter_{done - 1:06d}.safetensors"]
    assert "stopped by SIGTERM" in stderr and "--resume" in stderr
    assert not (stopped / "model").exists()

    run_toy_cli(toy_model, stopped, *args, "--resume")
    pd.testing.assert_frame_equal(
        metrics_without_timing(tmp_path / "whole"), metrics_without_timing(stopped), check_exact=True
    )
    assert (stopped / "model" / "llm_0" / "model.safetensors").is_file()


def test_a_prompt_too_long_for_the_context_fails_before_the_first_episode(toy_model, tmp_path):
    from cory_env import PromptTooLongError

    config = toy_config(toy_model, tmp_path, algo="ppo", context_length=32)
    with pytest.raises(PromptTooLongError, match="1 of 4 prompts do not fit context_length=32"):
        Trainer(config, prompts=[*PROMPTS, "the movie was " * 10], reward_fn=fraction_good)


def test_a_new_run_does_not_silently_replace_an_old_one(toy_model, tmp_path):
    config = toy_config(toy_model, tmp_path, algo="ppo", iterations=1)
    Trainer(config, prompts=PROMPTS, reward_fn=fraction_good).train(progress=False)
    with pytest.raises(FileExistsError, match="--resume.*--overwrite"):
        Trainer(config, prompts=PROMPTS, reward_fn=fraction_good).train(progress=False)
    again = toy_config(toy_model, tmp_path, algo="ppo", iterations=1, overwrite=True)
    Trainer(again, prompts=PROMPTS, reward_fn=fraction_good).train(progress=False)


def test_resume_continues_further_but_refuses_other_settings(toy_model, tmp_path, caplog):
    first = toy_config(toy_model, tmp_path, algo="ppo", iterations=1, resume=True)
    with caplog.at_level("WARNING", logger="cory_agents.training.trainer"):
        Trainer(first, prompts=PROMPTS, reward_fn=fraction_good).train(progress=False)
    assert "no checkpoint" in caplog.text and "iteration 0" in caplog.text
    other = toy_config(toy_model, tmp_path, algo="ppo", iterations=2, resume=True, lr=1e-3, kl_coef=0.1)
    with pytest.raises(ValueError, match=r"--kl-coef 0.05 -> 0.1, --lr 0.01 -> 0.001.*config.json.*--overwrite"):
        Trainer(other, prompts=PROMPTS, reward_fn=fraction_good).train(progress=False)
    further = toy_config(toy_model, tmp_path, algo="ppo", iterations=2, resume=True, checkpoint_every=1)
    Trainer(further, prompts=PROMPTS, reward_fn=fraction_good).train(progress=False)
    assert pd.read_csv(tmp_path / "metrics.csv")["iteration"].tolist() == [0, 1]


@pytest.mark.parametrize("bf16", [False, True])
def test_bf16_warns_on_a_cpu_without_bfloat16_arithmetic(toy_model, tmp_path, caplog, bf16):
    with caplog.at_level("WARNING", logger="cory_agents.training.trainer"):
        Trainer(toy_config(toy_model, tmp_path, algo="ppo", bf16=bf16), prompts=PROMPTS, reward_fn=fraction_good)
    native = torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()
    assert ("no bfloat16 arithmetic" in caplog.text) == (bf16 and not native)


@pytest.mark.parametrize("lora", [False, True])
def test_a_run_leaves_each_policy_as_a_hugging_face_model(toy_model, tmp_path, lora):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    config = toy_config(toy_model, tmp_path, iterations=1, batch_size=4, mini_batch_size=4, ppo_epochs=1, lora=lora)
    trainer = Trainer(config, prompts=PROMPTS, reward_fn=fraction_good)
    trainer.train(progress=False)
    x = torch.tensor([[5, 6, 7, 8, 9]])
    original = AutoModelForCausalLM.from_pretrained(toy_model).eval()
    for name in ("llm_0", "llm_1"):
        path = tmp_path / "model" / name
        if lora:
            assert (path / "adapter_config.json").is_file() and not (path / "model.safetensors").exists()
            loaded = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(toy_model), path).eval()
        else:
            loaded = AutoModelForCausalLM.from_pretrained(path).eval()
        assert AutoTokenizer.from_pretrained(path).get_vocab() == trainer.tokenizer.get_vocab()
        with torch.no_grad():
            logits = loaded(input_ids=x).logits
            torch.testing.assert_close(logits, trainer.policies[name](input_ids=x).logits)
            assert not torch.allclose(logits, original(input_ids=x).logits, atol=1e-4)  # the trained weights

    assert sorted(p.name for p in (tmp_path / "model").iterdir()) == ["llm_0", "llm_1"]  # nothing else left there
    umask = os.umask(0)
    os.umask(umask)  # permissions as a plain mkdir/open gives them, not a temporary folder's 0700
    assert (tmp_path / "model").stat().st_mode & 0o777 == 0o777 & ~umask
    assert {f.stat().st_mode & 0o777 for f in (tmp_path / "model").rglob("*") if f.is_file()} == {0o666 & ~umask}

    # The same folders from the checkpoint (a run stopped early, or without --save-model).
    export = [
        sys.executable,
        str(ROOT / "examples" / "export_model.py"),
        "--checkpoint",
        str(tmp_path),
        "--out",
        str(tmp_path / "exported"),
    ]
    subprocess.run(export, env=cli_env(), cwd=ROOT, check=True, capture_output=True)
    for name in ("llm_0", "llm_1"):
        for f in (tmp_path / "model" / name).iterdir():
            if f.suffix == ".safetensors":
                assert f.read_bytes() == (tmp_path / "exported" / name / f.name).read_bytes()


def test_lora_shared_base_learns_and_keeps_one_copy_of_the_weights(toy_model, tmp_path):
    # A 32-wide toy model shifts its output mostly through lm_head, so it gets an adapter too. No KL penalty, as in
    # test_cory_raises_the_reward_of_both_learners: with 0.05 the pair's curve rose by 0.08-0.12, so the CPU's
    # kernel path decided (AVX2 on one thread failed in CI); without it, 0.65-0.80 on every path.
    modules = "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj,lm_head"
    config = toy_config(
        toy_model,
        tmp_path,
        algo="cory",
        iterations=16,
        role_exchange_period=2,
        lora=True,
        lora_r=8,
        lr=1e-2,
        checkpoint_every=16,
        lora_target_modules=modules,
        kl_coef=0.0,
    )
    trainer = Trainer(config, prompts=PROMPTS, reward_fn=fraction_good)
    views = [learner.model.lm for learner in trainer.learners.values()]
    assert views[0].peft_model is views[1].peft_model is trainer.learners["llm_0"].reference.peft_model
    base_before = {n: p.detach().clone() for n, p in views[0].peft_model.named_parameters() if "lora_" not in n}
    trainer.train(progress=False)
    # Judge the pair's mean reward.
    curve = (reward_curve(tmp_path, "llm_0") + reward_curve(tmp_path, "llm_1")) / 2
    assert curve[-4:].mean() > curve[:4].mean() + 0.1, curve
    # The base (= the reference) never moved; only the adapters did, each its own.
    for n, p in views[0].peft_model.named_parameters():
        if "lora_" not in n:
            assert torch.equal(p, base_before[n]), n
    saved = load_checkpoint(tmp_path / "checkpoints" / "iter_000015.safetensors")["learners"]["llm_0"]["model"]
    assert saved and all("lora_" in n or "v_head" in n for n in saved)
    assert not any(".llm_1." in n for n in saved)


@pytest.mark.parametrize("lora", [False, True])
@pytest.mark.parametrize("flag", ["gradient_checkpointing", "gradient_checkpointing_observer"])
def test_gradient_checkpointing_gives_the_same_updates(toy_model, tmp_path, lora, flag):
    runs = []
    for checkpointing in (False, True):
        config = toy_config(
            toy_model,
            tmp_path / str(checkpointing),
            algo="cory",
            iterations=2,
            lora=lora,
            role_exchange_period=1,
            **{flag: checkpointing},
        )
        trainer = Trainer(config, prompts=PROMPTS, reward_fn=fraction_good)
        runs.append([trainer.run_iteration()[0] for _ in range(2)])
    for plain, checkpointed in zip(*runs):
        for key in ("llm_0/policy_loss", "llm_1/value_loss", "llm_1/kl", "llm_0/task_reward_mean"):
            assert checkpointed[key] == pytest.approx(plain[key], rel=1e-4, abs=1e-6), key


def _recomputes(learner) -> bool:
    """Whether the learner's decoder layers are set to recompute activations (Hugging Face's flag)."""
    return any(m.gradient_checkpointing for m in learner.model.modules() if isinstance(m, GradientCheckpointingLayer))


@pytest.mark.parametrize("lora", [False, True])
def test_observer_checkpointing_is_on_only_while_the_observer_learns(toy_model, tmp_path, lora):
    config = toy_config(
        toy_model,
        tmp_path / "run",
        algo="cory",
        iterations=2,
        lora=lora,
        role_exchange_period=1,
        gradient_checkpointing_observer=True,
    )
    trainer = Trainer(config, prompts=PROMPTS, reward_fn=fraction_good)
    seen: dict[str, bool] = {}
    for name, learner in trainer.learners.items():

        def learn(episode, name=name, learner=learner, inner=learner.learn):
            seen[name] = _recomputes(learner)
            return inner(episode)

        learner.learn = learn
    for _ in range(2):  # the roles exchange every iteration
        metrics, _ = trainer.run_iteration()
        assert seen == {n: metrics[f"{n}/role"] == 1 for n in ("llm_0", "llm_1")}, (seen, metrics)
        assert not any(_recomputes(learner) for learner in trainer.learners.values())  # off again for the rollouts


def test_observer_checkpointing_needs_an_observer(toy_model, tmp_path):
    with pytest.raises(ValueError, match="--gradient-checkpointing-observer applies to CORY"):
        Trainer(
            toy_config(toy_model, tmp_path / "run", algo="ppo", gradient_checkpointing_observer=True),
            prompts=PROMPTS,
            reward_fn=fraction_good,
        )
    with pytest.raises(
        ValueError, match="team learner 'happo' runs its members' updates itself: use --gradient-checkpointing"
    ):
        Trainer(
            toy_config(toy_model, tmp_path / "run", learner="happo", algo="cory", gradient_checkpointing_observer=True),
            prompts=PROMPTS,
            reward_fn=fraction_good,
        )


@pytest.mark.parametrize("gradient_accumulation_steps", [1, 2])
def test_one_minibatch_reuses_the_first_forward_as_the_scoring_pass(toy_model, gradient_accumulation_steps):
    """With mini-batch = batch, epoch 0's forward doubles as the scoring pass: one forward fewer, same update."""
    from cory_agents.learners.ppo import Episode, PPOConfig, PPOLearner
    from cory_agents.learners.value_model import CausalLMWithValueHead
    from cory_agents.speed.scoring_reuse import reuse_scoring_pass
    from cory_env.models import load_causal_lm

    torch.manual_seed(0)
    B, W, T = 4, 9, 5
    ids = torch.randint(3, 18, (B, W))
    mask = torch.ones(B, W, dtype=torch.long)
    mask[0, :3] = 0  # left padding
    mask[1, -1] = 0  # a response that ended early
    episode = Episode(ids, mask, T, scores=np.array([1.0, 0.0, 0.5, 0.2]), task_rewards=np.array([1.0, 0.0, 0.5, 0.2]))
    config = PPOConfig(
        mini_batch_size=B,
        ppo_epochs=3,
        lr=1e-3,
        kl_estimator="full",
        gradient_accumulation_steps=gradient_accumulation_steps,
    )
    results = {}
    for reuse in (True, False):
        reference = load_causal_lm(str(toy_model)).requires_grad_(False)
        torch.manual_seed(1)
        learner = PPOLearner(CausalLMWithValueHead(load_causal_lm(str(toy_model))), reference, config, seed=3)
        if reuse:
            reuse_scoring_pass(learner)
        calls = []
        forward = learner._forward
        learner._forward = lambda *a, _f=forward, _calls=calls: _calls.append(1) or _f(*a)
        stats = learner.learn(episode)
        results[reuse] = (len(calls), stats, learner.trainable_state_dict())
    assert results[True][0] == config.ppo_epochs and results[False][0] == config.ppo_epochs + 1
    for key in ("kl", "policy_loss", "value_loss", "entropy"):
        assert results[True][1][key] == pytest.approx(results[False][1][key], rel=1e-4, abs=1e-6), key
    for name, weight in results[True][2].items():
        torch.testing.assert_close(weight, results[False][2][name], rtol=1e-4, atol=1e-6)
    initial = load_causal_lm(str(toy_model)).state_dict()
    moved = [n for n, w in results[True][2].items() if n.startswith("lm.") and not torch.equal(w, initial[n[3:]])]
    assert moved  # the update happened


def test_a_model_with_dropout_keeps_the_separate_scoring_pass(toy_model):
    """A training-mode pass with dropout is not the eval-mode scoring pass: no reuse then."""
    from cory_agents.learners.dropout import has_dropout
    from cory_agents.learners.ppo import PPOConfig

    learner, episode = toy_ppo_learner(toy_model, PPOConfig(mini_batch_size=4, ppo_epochs=2))
    assert not has_dropout(learner.model)
    attention = next(m for m in learner.model.modules() if hasattr(m, "attention_dropout"))
    attention.attention_dropout = 0.1
    assert has_dropout(learner.model)
    calls = []
    forward = learner._forward
    learner._forward = lambda *a, _f=forward, _calls=calls: _calls.append(1) or _f(*a)
    learner.learn(episode)
    assert len(calls) == 2 + 1  # the epochs' passes and the scoring pass


@pytest.mark.parametrize("reuse", [True, False])
def test_ppo_learners_reuse_the_first_training_pass_unless_told_not_to(toy_model, tmp_path, reuse):
    from cory_agents.learners.ppo import UpdatePasses
    from cory_agents.speed.scoring_reuse import ScoringReusePasses

    trainer = Trainer(
        toy_config(toy_model, tmp_path / "run", algo="cory", reuse_scoring_pass=reuse),
        prompts=PROMPTS,
        reward_fn=fraction_good,
    )
    for learner in trainer.learners.values():
        assert type(learner.passes) is (ScoringReusePasses if reuse else UpdatePasses)


@pytest.mark.parametrize("cpu_linear", [True, False])
def test_cpu_runs_use_the_cpu_linear_layers_unless_told_not_to(toy_model, tmp_path, cpu_linear):
    from cory_agents.speed.cpu_linear import CPULinear

    trainer = Trainer(
        toy_config(toy_model, tmp_path / "run", algo="cory", device="cpu", cpu_linear=cpu_linear),
        prompts=PROMPTS,
        reward_fn=fraction_good,
    )
    for learner in trainer.learners.values():
        for lm in (learner.model.lm, learner.reference):  # the value head is added after: a plain nn.Linear
            kinds = {type(m) for m in lm.modules() if isinstance(m, torch.nn.Linear)}
            assert kinds == {CPULinear if cpu_linear else torch.nn.Linear}


def toy_ppo_learner(toy_model: Path, config, seed: int = 1):
    """A PPO learner on the toy model (its own copy; a frozen reference; the passes a run gives it),
    and a 4-conversation episode."""
    from cory_agents.learners.ppo import Episode, PPOLearner
    from cory_agents.learners.value_model import CausalLMWithValueHead
    from cory_agents.speed.scoring_reuse import reuse_scoring_pass
    from cory_env.models import load_causal_lm

    torch.manual_seed(0)
    B, W, T = 4, 9, 5
    ids = torch.randint(3, 18, (B, W))
    mask = torch.ones(B, W, dtype=torch.long)
    episode = Episode(ids, mask, T, scores=np.array([1.0, 0.0, 0.5, 0.2]), task_rewards=np.array([1.0, 0.0, 0.5, 0.2]))
    reference = load_causal_lm(str(toy_model)).requires_grad_(False)
    torch.manual_seed(seed)
    learner = PPOLearner(CausalLMWithValueHead(load_causal_lm(str(toy_model))), reference, config, seed=3)
    return reuse_scoring_pass(learner), episode


@pytest.mark.parametrize("max_grad_norm", [1e-3, 0.0, 1e9])
def test_clipping_inside_the_fused_optimizer_step_equals_clip_grad_norm(toy_model, max_grad_norm):
    """The fused AdamW divides each gradient by the clipping factor as it reads it: the same update
    as clip_grad_norm_ then step (to float32 rounding when clipping acts; exactly when it does not)."""
    from cory_agents.learners.ppo import PPOConfig
    from cory_env.models import load_causal_lm

    config = PPOConfig(mini_batch_size=2, ppo_epochs=2, lr=1e-3, max_grad_norm=max_grad_norm)
    weights, grad_norms = {}, {}
    for in_step in (True, False):
        learner, episode = toy_ppo_learner(toy_model, config)
        assert learner.steps.clip_in_step  # a CPU model in float32: the fused kernel
        learner.steps.clip_in_step = in_step
        grad_norms[in_step] = learner.learn(episode).get("grad_norm")
        weights[in_step] = learner.trainable_state_dict()
    initial = load_causal_lm(str(toy_model)).state_dict()
    assert not torch.equal(weights[True]["lm.model.norm.weight"], initial["model.norm.weight"])  # it trained
    if max_grad_norm:  # both paths log the norm before clipping (0: no clipping)
        assert grad_norms[True] == pytest.approx(grad_norms[False], rel=1e-4)
    for name, weight in weights[True].items():
        if max_grad_norm == 1e-3:  # clipping acts at every step
            torch.testing.assert_close(weight, weights[False][name], rtol=1e-5, atol=1e-7)
        else:
            assert torch.equal(weight, weights[False][name]), name


def test_grad_norm_is_the_mean_norm_before_clipping_and_explained_variance_is_logged(toy_model):
    from cory_agents.learners.ppo import PPOConfig

    config = PPOConfig(mini_batch_size=2, ppo_epochs=2, lr=1e-3, max_grad_norm=1e-3)
    learner, episode = toy_ppo_learner(toy_model, config)
    seen = []  # the gradients' norm as each step reads them (the fused kernel clips while reading)
    learner.optimizer.register_step_pre_hook(
        lambda *_: seen.append(float(torch.nn.utils.get_total_norm([p.grad for p in learner.steps.params])))
    )
    stats = learner.learn(episode)
    assert len(seen) == 4 and min(seen) > 1e-3  # 2 epochs x 2 minibatches, every one clipped
    assert stats["grad_norm"] == pytest.approx(np.mean(seen), rel=1e-5)
    assert np.isfinite(stats["explained_variance"]) and stats["explained_variance"] <= 1  # by hand: test_ppo_math
    unclipped, episode = toy_ppo_learner(toy_model, PPOConfig(mini_batch_size=2, max_grad_norm=0))
    assert "grad_norm" not in unclipped.learn(episode)  # not computed when nothing is clipped


def test_scoring_passes_keep_exactly_the_columns_that_predict_the_response(toy_model):
    from cory_agents.learners.lm import predicting_columns, response_logits
    from cory_agents.learners.value_model import CausalLMWithValueHead
    from cory_env.models import load_causal_lm

    torch.manual_seed(0)
    lm = load_causal_lm(str(toy_model)).eval()
    ids = torch.randint(3, 18, (3, 9))
    mask = torch.ones_like(ids)
    mask[0, :2] = 0  # left padding
    T = 4
    with torch.no_grad():
        full = lm(input_ids=ids, attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp(min=0)).logits
        torch.testing.assert_close(response_logits(lm, ids, mask, T), full[:, -T - 1 : -1])
        model = CausalLMWithValueHead(lm)
        logits, values = model(ids, mask, logits_to_keep=predicting_columns(9, T))
        last_logits, last_values = model(ids, mask, logits_to_keep=T + 1)
    assert predicting_columns(9, T).tolist() == [4, 5, 6, 7]
    torch.testing.assert_close(logits, last_logits[:, :-1])
    torch.testing.assert_close(values, last_values[:, :-1])


def test_the_critic_starts_at_zero_so_the_first_advantages_are_the_reward_to_go(toy_model):
    """A random value head's noise was 95% of the first advantages' variance on the embedded model
    (docs/why-it-learns.md): a fresh head predicts 0 everywhere, and learns from the first update on."""
    from cory_agents.algorithms.advantages import gae
    from cory_agents.algorithms.kl import token_rewards
    from cory_agents.learners.ppo import PPOConfig

    learner, episode = toy_ppo_learner(toy_model, PPOConfig(mini_batch_size=4, ppo_epochs=1, lr=1e-3))
    T = episode.response_width
    _, values = learner._forward(episode.input_ids, episode.attention_mask, T)
    assert torch.equal(values, torch.zeros_like(values))
    mask = episode.attention_mask[:, -T:].float()
    rewards = token_rewards(torch.tensor(episode.scores, dtype=torch.float32), torch.zeros_like(mask), mask, 0.0)
    advantages, _ = gae(rewards, values.detach(), mask, 1.0, 0.95)
    # the reward sits at the last token: with V = 0 the advantage at t is lam^(T-1-t) times it
    expected = torch.tensor(episode.scores, dtype=torch.float32)[:, None] * 0.95 ** torch.arange(T - 1, -1, -1.0)
    torch.testing.assert_close(advantages, expected)
    learner.learn(episode)
    assert learner.model.v_head.weight.abs().max() > 0  # the critic learns


def test_the_value_head_can_learn_at_its_own_rate(toy_model):
    from cory_agents.learners.ppo import PPOConfig

    learner, _ = toy_ppo_learner(toy_model, PPOConfig(lr=1e-6, value_lr=1e-3))
    head = {id(p) for p in learner.model.v_head.parameters()}
    rates = {(id(p) in head, g["lr"]) for g in learner.optimizer.param_groups for p in g["params"]}
    assert rates == {(False, 1e-6), (True, 1e-3)}
    assert len(learner.steps.params) == len(list(learner.model.trainable_parameters()))  # every weight once
    assert PPOConfig(value_lr=0.0).value_lr == 0.0  # 0: the same rate as the policy
    with pytest.raises(ValueError, match="--value-lr must be positive"):
        PPOConfig(value_lr=-1e-3)


def test_the_mini_batch_follows_the_batch_size_unless_given(toy_model, tmp_path):
    from cory_agents.cli.train import parse_config
    from cory_agents.learners.lm import default_mini_batch_size

    config = parse_config(["--batch-size", "4"])  # refused before: 4 % 16
    assert config.mini_batch_size is None
    trainer = Trainer(
        toy_config(toy_model, tmp_path, algo="ppo", batch_size=4, mini_batch_size=None),
        prompts=PROMPTS,
        reward_fn=fraction_good,
    )
    assert trainer.config.mini_batch_size == 4 and trainer.learners["pioneer"].config.mini_batch_size == 4
    assert [default_mini_batch_size(b) for b in (32, 64, 24, 7, 1)] == [16, 16, 12, 7, 1]
    with pytest.raises(ValueError, match="--batch-size 6 must be a multiple of --mini-batch-size 4"):
        Trainer(
            toy_config(toy_model, tmp_path, algo="ppo", batch_size=6, mini_batch_size=4),
            prompts=PROMPTS,
            reward_fn=fraction_good,
        )


def test_resolve_fills_in_every_derived_setting_once_and_checks_them_before_a_model_loads(monkeypatch):
    from cory_agents.distributed.data_parallel import DataParallel
    from cory_agents.training.config import resolve

    resolved = resolve(TrainConfig(algo="cory", report_to="none", preset="paper-imdb", lr=1e-4))
    assert (resolved.model, resolved.iterations, resolved.lr) == ("gpt2-large", 100, 1e-4)  # a given flag wins
    assert resolved.mini_batch_size == 256 and resolved.num_agents == 2 and resolved.reward == "lvwerra/distilbert-imdb"
    assert (resolved.min_new_tokens, resolved.max_new_tokens, resolved.context_length) == (4, 15, 128)
    assert resolve(resolved) == resolved  # a resolved config (a checkpoint's, say) resolves to itself
    plain = resolve(TrainConfig(algo="ppo", batch_size=24, models="", report_to="none"))
    assert plain.mini_batch_size == 12 and plain.num_agents is None
    with pytest.raises(ValueError, match="--batch-size 6 must be a multiple of --group-size 4"):
        resolve(TrainConfig(learner="grpo", batch_size=6, mini_batch_size=2))
    with pytest.raises(ValueError, match="--gradient-checkpointing-observer applies to CORY's observer"):
        resolve(TrainConfig(algo="ppo", gradient_checkpointing_observer=True))
    assert not resolve(TrainConfig(report_to="none"), DataParallel()).bf16
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "bf16")  # accelerate launch --mixed_precision bf16
    assert resolve(TrainConfig(report_to="none"), DataParallel()).bf16


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (dict(learner_devices="cpu"), "1 device.*for 2 learner"),
        (dict(learner_devices="cpu,gpu7"), "--learner-devices 'gpu7': .*give cpu, cuda, cuda:N"),
        (dict(learner_devices="cpu,cpu", device="cpu"), "either --device or --learner-devices"),
        (dict(learner_devices="cuda:0,cuda:1", lora=True), "different devices needs full fine-tuning"),
        (dict(load_in_4bit=True), "--load-in-4bit needs --lora"),
    ],
)
def test_resolve_refuses_settings_that_contradict_each_other_before_a_device_is_touched(change, message):
    """The device flags are checked against each other and the learners by resolve, on a machine without
    the devices they name: what a device is checked for where it is used is only that it exists."""
    from cory_agents.training.config import resolve

    with pytest.raises(ValueError, match=message):
        resolve(TrainConfig(report_to="none", **change))


def test_resolve_refuses_device_flags_that_contradict_the_launcher():
    from cory_agents.distributed.data_parallel import DataParallel
    from cory_agents.training.config import resolve

    # What a process of a 2-process CPU launch holds (a process group needs the other process).
    dp = DataParallel()
    dp.num_processes, dp.device = 2, torch.device("cpu")
    assert dp.is_distributed
    assert resolve(TrainConfig(report_to="none", device="cpu"), dp).device == "cpu"
    with pytest.raises(ValueError, match="--learner-devices is for a single process"):
        resolve(TrainConfig(report_to="none", learner_devices="cpu,cpu"), dp)
    with pytest.raises(ValueError, match="--device cuda conflicts with the launcher's device cpu"):
        resolve(TrainConfig(report_to="none", device="cuda"), dp)
    with pytest.raises(ValueError, match="--device 'gpu0': .*give cpu, cuda, cuda:N or auto"):
        resolve(TrainConfig(report_to="none", device="gpu0"), dp)  # a name torch does not know, under a launcher


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (dict(algo="a2c"), "algo must be one of"),
        (dict(learner="dqn"), "--learner 'dqn' is not a learner: choose one of ppo, grpo"),
        (dict(batch_size=0), "--batch-size must be at least 1"),
        (dict(keep_checkpoints=0), "--keep-checkpoints"),
        (dict(value_lr=-1e-5), "--value-lr must be positive"),
    ],
)
def test_a_bad_setting_fails_when_the_config_is_made(change, message):
    with pytest.raises(ValueError, match=message):
        TrainConfig(**change)
