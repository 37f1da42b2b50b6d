"""The group-relative learners (GRPO, RLOO) and the learner interface: math by hand, prompt
groups, learning for real at toy scale (single agent and both CORY learners), the CLI,
exact resume, and the REINFORCE example of docs/plug-in-your-algorithm.md."""

from __future__ import annotations

import dataclasses
import math
import re
import subprocess
import typing

import numpy as np
import pandas as pd
import pytest
import torch
from transformers import HfArgumentParser
from trl.trainer.utils import nanstd

from cory_agents.algorithms.advantages import group_advantages
from cory_agents.algorithms.kl import kl_per_token
from cory_agents.learners.base import Learner
from cory_agents.learners.grpo import GRPOConfig, GRPOLearner, RLOOConfig
from cory_agents.learners.ppo import PPOLearner
from cory_agents.training.checkpoint import load_checkpoint
from cory_agents.training.config import TrainConfig
from cory_agents.training.registry import LEARNERS
from cory_agents.training.trainer import Trainer
from cory_env.prompts import Prompt, repeat_each
from tests.support import ROOT
from tests.support.runs import cli, cli_env, reward_curve, toy_cli_args, toy_config
from tests.support.toy import fraction_good

PROMPTS = ["the movie was", "the plot is", "acting is very"]
D = torch.float64


def t(values) -> torch.Tensor:
    return torch.tensor(values, dtype=D)


# ---------------------------------------------------------------- advantages


def test_grpo_advantages_by_hand():
    # Group 1: mean 2, unbiased std 1 -> (r - 2) / (1 + 1e-4). Group 2: mean 4, std sqrt(8) = 2.828...
    adv = group_advantages(t([1.0, 2.0, 3.0, 2.0, 4.0, 6.0]), 3, "grpo")
    s = math.sqrt(((2 - 4) ** 2 + 0 + (6 - 4) ** 2) / 2)
    expected = [-1 / 1.0001, 0.0, 1 / 1.0001, -2 / (s + 1e-4), 0.0, 2 / (s + 1e-4)]
    torch.testing.assert_close(adv, t(expected))


def test_rloo_advantages_by_hand():
    # Baselines: (2+3+6)/3, (1+3+6)/3, (1+2+6)/3, (1+2+3)/3.
    adv = group_advantages(t([1.0, 2.0, 3.0, 6.0]), 4, "rloo")
    torch.testing.assert_close(adv, t([1 - 11 / 3, 2 - 10 / 3, 3 - 3.0, 6 - 2.0]))


def test_group_advantages_match_trl_and_the_leave_one_out_definition():
    rewards = torch.randn(24, generator=torch.Generator().manual_seed(0), dtype=D)
    G = 6
    groups = rewards.view(-1, G)
    # TRL GRPOTrainer's formula, with its own nanstd.
    trl = (groups - groups.mean(1, keepdim=True)) / (nanstd(groups, dim=1, keepdim=True) + 1e-4)
    torch.testing.assert_close(group_advantages(rewards, G, "grpo"), trl.view(-1))
    loo = torch.stack(
        [
            rewards[i] - torch.cat([g[:j], g[j + 1 :]]).mean()
            for i, (g, j) in enumerate((groups[i // G], i % G) for i in range(24))
        ]
    )
    torch.testing.assert_close(group_advantages(rewards, G, "rloo"), loo)


@pytest.mark.parametrize("baseline", ["grpo", "rloo"])
def test_a_group_of_equal_rewards_gets_exactly_zero_advantage(baseline):
    rewards = t([0.1, 0.1, 0.1, 0.7, 0.7, 0.7, 0.0, 0.0, 1.0])  # 0.1 * 3 / 3 != 0.1 in floating point
    adv = group_advantages(rewards, 3, baseline)
    assert torch.isfinite(adv).all()
    assert adv[:6].tolist() == [0.0] * 6
    assert adv[6] < 0 < adv[8]


def test_group_advantages_reject_bad_input():
    with pytest.raises(ValueError, match="at least 2"):
        group_advantages(t([1.0, 2.0]), 1)
    with pytest.raises(ValueError, match="multiple of group_size"):
        group_advantages(t([1.0, 2.0, 3.0]), 2)
    with pytest.raises(ValueError, match="baseline must be one of"):
        group_advantages(t([1.0, 2.0]), 2, "ppo")


def test_k3_by_hand_and_unbiased_for_the_exact_kl():
    p, q = t([[0.5, 0.3, 0.2]]), t([[0.25, 0.25, 0.5]])
    k3 = kl_per_token(p.log(), q.log(), "k3")
    torch.testing.assert_close(k3[0, 0], t(0.5 - 1 - math.log(0.5)))  # q/p - 1 - log(q/p)
    assert (k3 >= 0).all()
    # E_p[k3] = sum_v p (q/p - 1 - log q/p) = 1 - 1 + KL(p || q): the exact KL.
    exact = kl_per_token(None, None, "full", logits=p.log()[:, None], ref_logits=q.log()[:, None])
    torch.testing.assert_close((p * k3).sum(), exact.sum().to(D), rtol=1e-5, atol=1e-6)  # "full" is float32


def test_config_rejects_bad_values():
    with pytest.raises(ValueError, match="--group-size 2 or more"):
        GRPOConfig(group_size=1)
    assert (GRPOConfig.advantage, GRPOConfig.kl_penalty, RLOOConfig.advantage, RLOOConfig.kl_penalty) == (
        "grpo",
        "loss",
        "rloo",
        "reward",
    )  # what makes each learner what it is: not a setting
    with pytest.raises(TypeError):
        GRPOConfig(advantage="rloo")

    @dataclasses.dataclass(kw_only=True)
    class Mixed(GRPOConfig):
        advantage: typing.ClassVar[str] = "gae"

    with pytest.raises(ValueError, match="advantage must be one of"):
        Mixed()


def test_the_learner_configs_are_the_command_lines_sections_one_name_one_default():
    """What the CLI parses for --learner is the learner's config itself: no renames, no second defaults."""
    from cory_agents.cli.train import parse_config
    from cory_agents.learners.difference import DifferenceConfig
    from cory_agents.learners.happo import HAPPOConfig
    from cory_agents.learners.mappo import MAPPOConfig
    from cory_agents.learners.ppo import PPOConfig

    sections = (("ppo", PPOConfig), ("grpo", GRPOConfig), ("rloo", RLOOConfig))
    for learner, section in (
        *sections,
        ("happo", HAPPOConfig),
        ("difference", DifferenceConfig),
        ("mappo", MAPPOConfig),
    ):
        config = parse_config(["--learner", learner, "--algo", "ppo", "--lr", "1e-4", "--kl-coef", "0.2"])
        chosen = config.learner_config()
        assert type(chosen) is section and (chosen.lr, chosen.kl_coef) == (1e-4, 0.2)
        defaults = section()
        for f in dataclasses.fields(section):
            assert getattr(defaults, f.name) == getattr(TrainConfig(), f.name), f.name  # one default per setting
            assert f.metadata.get("help"), f.name  # every learner setting is a documented flag
    assert parse_config(["--learner", "grpo", "--group-size", "8"]).learner_config().group_size == 8
    with pytest.raises(ValueError, match="--group-size is a setting of --learner grpo, rloo, not of --learner ppo"):
        parse_config(["--group-size", "8"])
    with pytest.raises(
        ValueError, match="--value-lr is a setting of --learner ppo, happo, difference, mappo, not of --learner rloo"
    ):
        parse_config(["--learner", "rloo", "--value-lr", "1e-3"])
    with pytest.raises(SystemExit):  # what makes GRPO or RLOO what it is is not a flag
        parse_config(["--learner", "grpo", "--advantage", "rloo"])


# ---------------------------------------------------------------- prompt groups


def test_repeat_each_presents_each_prompt_group_size_times_in_a_row():
    source = repeat_each([f"prompt {i}" for i in range(10)], 3)
    drawn = [p.query for p in source.sample(np.random.default_rng(0), 12)]
    # The same draws as the source itself would make for 4 conversations, each repeated 3 times.
    base = [p.query for p in source.source.sample(np.random.default_rng(0), 4)]
    assert drawn == [q for q in base for _ in range(3)]
    assert len(source) == 10
    metadata = repeat_each([Prompt("q", {"answer": "42"})], 2).sample(np.random.default_rng(0), 2)
    assert [p.metadata["answer"] for p in metadata] == ["42", "42"]
    with pytest.raises(ValueError, match="multiple of 3"):
        source.sample(np.random.default_rng(0), 10)
    with pytest.raises(ValueError, match="positive int"):
        repeat_each(["a"], 0)


def test_cory_groups_share_a_query_and_each_observer_sees_its_own_pioneer(toy_model, tmp_path):
    config = toy_config(toy_model, tmp_path, algo="cory", learner="grpo", group_size=4, batch_size=8, mini_batch_size=4)
    trainer = Trainer(
        config, prompts=[f"the movie was {w}" for w in ("good", "bad", "fine", "ok", "awful")], reward_fn=fraction_good
    )
    finals = trainer.rollout()
    pioneer = next(info for _, info in finals.values() if info["role"] == "pioneer")
    observer = next(info for _, info in finals.values() if info["role"] == "observer")
    queries = pioneer["query"]
    assert all(len(set(queries[k : k + 4])) == 1 for k in (0, 4)), queries
    for b in range(8):  # the observer's prompt holds its own conversation's pioneer response
        assert f'"{queries[b]}{pioneer["response"][b]}"' in observer["context"][b]
    episode, _ = finals["llm_0"]
    assert episode.queries == list(queries)


# ---------------------------------------------------------------- the learner


def test_learners_satisfy_the_interface_and_grpo_has_no_value_head(toy_model, tmp_path):
    trainer = Trainer(
        toy_config(toy_model, tmp_path, algo="ppo", learner="grpo"), prompts=PROMPTS, reward_fn=fraction_good
    )
    learner = trainer.learners["pioneer"]
    assert isinstance(learner, GRPOLearner) and isinstance(learner, Learner)
    assert not hasattr(learner.model, "v_head")
    assert sum(p.numel() for p in learner.steps.params) == sum(p.numel() for p in learner.model.parameters())
    ppo = Trainer(toy_config(toy_model, tmp_path / "ppo", algo="ppo"), prompts=PROMPTS, reward_fn=fraction_good)
    assert isinstance(ppo.learners["pioneer"], PPOLearner) and isinstance(ppo.learners["pioneer"], Learner)


def test_learn_refuses_a_batch_whose_groups_do_not_share_a_query(toy_model, tmp_path):
    trainer = Trainer(
        toy_config(toy_model, tmp_path, algo="ppo", learner="grpo", group_size=2, batch_size=4, mini_batch_size=4),
        prompts=PROMPTS,
        reward_fn=fraction_good,
    )
    episode, _ = trainer.rollout()["pioneer"]
    episode.queries = ["a", "a", "a", "b"]
    with pytest.raises(ValueError, match="repeat_each"):
        trainer.learners["pioneer"].learn(episode)


@pytest.mark.parametrize(
    "changes, message",
    [
        (dict(batch_size=10, mini_batch_size=2, group_size=4), "--batch-size 10 must be a multiple of --group-size 4"),
        (dict(group_size=1), "--group-size 2 or more"),
        (dict(learner="dpo"), "--learner 'dpo' is not a learner: choose one of ppo"),
    ],
)
def test_bad_group_settings_fail_before_loading_the_model(tmp_path, changes, message):
    with pytest.raises(ValueError, match=message):  # when the config is made, or the Trainer: before the model
        config = toy_config(tmp_path / "no-such-model", tmp_path, algo="cory", **{"learner": "grpo", **changes})
        Trainer(config, prompts=PROMPTS, reward_fn=fraction_good)


def test_a_factory_that_builds_no_learner_is_refused(toy_model, tmp_path):
    LEARNERS["broken"] = lambda config, **_: object()
    try:
        with pytest.raises(TypeError, match="lacks act, learn"):
            Trainer(toy_config(toy_model, tmp_path, learner="broken"), prompts=PROMPTS, reward_fn=fraction_good)
    finally:
        del LEARNERS["broken"]


# ---------------------------------------------------------------- learning for real


@pytest.mark.parametrize("learner", ["grpo", "rloo"])
def test_single_agent_raises_the_reward(toy_model, tmp_path, learner):
    config = toy_config(toy_model, tmp_path, algo="ppo", learner=learner, group_size=8)
    Trainer(config, prompts=PROMPTS, reward_fn=fraction_good).train(progress=False)
    curve = reward_curve(tmp_path, "pioneer")
    assert curve[-3:].mean() > curve[:3].mean() + 0.25, curve


def test_cory_with_grpo_raises_the_reward_of_both_learners(toy_model, tmp_path):
    config = toy_config(toy_model, tmp_path, algo="cory", learner="grpo", group_size=8, role_exchange_period=2)
    Trainer(config, prompts=PROMPTS, reward_fn=fraction_good).train(progress=False)
    for learner in ("llm_0", "llm_1"):
        curve = reward_curve(tmp_path, learner)
        assert curve[-3:].mean() > curve[:3].mean() + 0.1, (learner, curve)
    metrics = pd.read_csv(tmp_path / "metrics.csv")
    assert metrics["llm_0/role"].tolist() == [0, 0, 1, 1] * 3
    assert (metrics["llm_1/kl"].iloc[-1] > 0) and (metrics["llm_1/kl_loss"] >= 0).all()


# ---------------------------------------------------------------- CLI and checkpoints


def test_cli_end_to_end_with_grpo(toy_model, tmp_path):
    out = tmp_path / "run"
    args = toy_cli_args(toy_model, out, "--algo", "cory", "--learner", "grpo", "--group-size", "2", "--iterations", "2")
    result = subprocess.run(cli(*args), env=cli_env(), cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    metrics = pd.read_csv(out / "metrics.csv")
    assert metrics["iteration"].tolist() == [0, 1]
    for learner in ("llm_0", "llm_1"):
        for column in (
            "task_reward_mean",
            "kl",
            "combined_reward",
            "policy_loss",
            "entropy",
            "clipfrac",
            "kl_coef",
            "role",
            "kl_loss",
        ):
            assert np.isfinite(metrics[f"{learner}/{column}"]).all(), column
        assert f"{learner}/value_loss" not in metrics
    for png in ("task_reward.png", "kl.png", "combined_reward.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (out / "checkpoints" / "iter_000001.safetensors").exists()


def test_cli_help_lists_the_learners():
    from cory_agents.cli.train import build_parser

    help_text = build_parser().format_help()
    assert "--learner {ppo,grpo,rloo,happo,difference,mappo}" in help_text and "--value-lr VALUE_LR" in help_text
    assert "--group-size GROUP_SIZE" not in help_text
    grpo_help = build_parser("grpo").format_help()
    assert "Learner grpo/rloo" in grpo_help and "--group-size GROUP_SIZE" in grpo_help
    assert "--value-lr VALUE_LR" not in grpo_help


@pytest.mark.parametrize("learner", ["grpo", "rloo"])
def test_resume_continues_exactly(toy_model, tmp_path, learner):
    def config(out, iterations, **kw):
        return toy_config(
            toy_model,
            out,
            algo="cory",
            learner=learner,
            group_size=4,
            iterations=iterations,
            checkpoint_every=2,
            role_exchange_period=1,
            adaptive_kl=True,
            **kw,
        )

    Trainer(config(tmp_path / "whole", 4), prompts=PROMPTS, reward_fn=fraction_good).train(progress=False)
    Trainer(config(tmp_path / "split", 2), prompts=PROMPTS, reward_fn=fraction_good).train(progress=False)
    resumed = Trainer(config(tmp_path / "split", 4, resume=True), prompts=PROMPTS, reward_fn=fraction_good)
    resumed.train(progress=False)
    timing = ["tokens_per_s", "seconds"]
    a = pd.read_csv(tmp_path / "whole" / "metrics.csv").drop(columns=timing)
    b = pd.read_csv(tmp_path / "split" / "metrics.csv").drop(columns=timing)
    assert b["iteration"].tolist() == [0, 1, 2, 3]
    pd.testing.assert_frame_equal(a, b, check_exact=True)
    saved = load_checkpoint(tmp_path / "split" / "checkpoints" / "iter_000003.safetensors")["learners"]["llm_1"]
    assert set(saved["model"]) == {n for n, _ in resumed.learners["llm_1"].model.named_parameters()}
    assert saved["kl_ctl"]["value"] != 0.05  # the adaptive coefficient moved (from --kl-coef) and was saved


def test_lora_checkpoint_holds_only_the_learners_own_adapter(toy_model, tmp_path):
    config = toy_config(
        toy_model,
        tmp_path,
        algo="cory",
        learner="grpo",
        group_size=4,
        iterations=1,
        lora=True,
        lora_r=4,
        lora_target_modules="q_proj,v_proj",
    )
    Trainer(config, prompts=PROMPTS, reward_fn=fraction_good).train(progress=False)
    saved = load_checkpoint(tmp_path / "checkpoints" / "iter_000000.safetensors")["learners"]
    for name in ("llm_0", "llm_1"):
        keys = list(saved[name]["model"])
        assert keys and all("lora_" in k and f".{name}." in k for k in keys), keys[:3]


# ---------------------------------------------------------------- the docs' example


def docs_learner_code() -> str:
    text = (ROOT / "docs" / "plug-in-your-algorithm.md").read_text()
    section = text.split("## A minimal learner", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_docs_reinforce_learner_runs_and_resumes(toy_model, tmp_path):
    code = docs_learner_code()
    assert len(code.splitlines()) < 60
    namespace: dict = {}
    try:
        exec(compile(code, "plug-in-your-algorithm.md", "exec"), namespace)
        assert "reinforce" in LEARNERS
        parsed = HfArgumentParser(TrainConfig).parse_args_into_dataclasses(args=["--learner", "reinforce"])[0]
        assert parsed.learner == "reinforce"
        config = toy_config(toy_model, tmp_path, algo="cory", learner="reinforce", iterations=3, checkpoint_every=1)
        trainer = Trainer(config, prompts=PROMPTS, reward_fn=fraction_good)
        assert isinstance(trainer.learners["llm_0"], namespace["REINFORCELearner"])
        assert isinstance(trainer.learners["llm_0"], Learner)
        trainer.train(progress=False)
        metrics = pd.read_csv(tmp_path / "metrics.csv")
        assert np.isfinite(metrics[["llm_0/task_reward_mean", "llm_1/policy_loss"]].to_numpy()).all()
        assert (tmp_path / "task_reward.png").exists()
        resumed = Trainer(
            toy_config(toy_model, tmp_path, algo="cory", learner="reinforce", iterations=4, resume=True),
            prompts=PROMPTS,
            reward_fn=fraction_good,
        )
        resumed.train(progress=False)
        assert pd.read_csv(tmp_path / "metrics.csv")["iteration"].tolist() == [0, 1, 2, 3]
    finally:
        LEARNERS.pop("reinforce", None)
