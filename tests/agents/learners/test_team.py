"""The team-level learner interface (agents/learners/team.py): the trainer drives a team learner, its
state resumes exactly, the command line offers the team learners with their sections, and the
team learner of docs/plug-in-your-algorithm.md runs and resumes as it is."""

from __future__ import annotations

import re
import subprocess

import numpy as np
import pandas as pd
import pytest

from cory_agents.cli.train import main as train_main
from cory_agents.learners.happo import HAPPO
from cory_agents.learners.ppo import PPOLearner
from cory_agents.learners.team import IndependentLearners, TeamLearner
from cory_agents.training.checkpoint import load_checkpoint
from cory_agents.training.registry import LEARNERS
from cory_agents.training.trainer import Trainer
from tests.support import ROOT
from tests.support.runs import PROMPTS, cli, cli_env, metrics_without_timing, toy_config
from tests.support.toy import fraction_good


def test_per_agent_learners_run_as_independent_learners_in_chain_order(toy_model, tmp_path):
    config = toy_config(toy_model, tmp_path, algo="cory", num_agents=3, iterations=1, role_exchange_period=1)
    trainer = Trainer(config, prompts=PROMPTS, reward_fn=fraction_good)
    assert isinstance(trainer.team, IndependentLearners) and isinstance(trainer.team, TeamLearner)
    assert trainer.team.members is trainer.learners
    trainer.run_iteration()  # role exchange: llm_1 plays the pioneer in the second episode
    team = trainer.team_episode(trainer.rollout())
    assert team.roles == {"llm_1": "pioneer", "llm_2": "observer_1", "llm_0": "observer_2"}
    assert team.order == ["llm_1", "llm_2", "llm_0"]
    rewards = sum(team.episodes[n].task_rewards for n in team.order)
    np.testing.assert_allclose(team.collective_rewards, rewards)
    for episode in team.episodes.values():  # CORY's collective reward: what each learner receives
        np.testing.assert_allclose(episode.scores, rewards)
    # Row b of every episode is conversation b: the same query.
    assert team.episodes["llm_0"].queries == team.episodes["llm_1"].queries == team.episodes["llm_2"].queries
    assert "team" not in trainer.state_dict()  # independent learners keep no state of their own


def test_a_team_learners_state_is_checkpointed_and_its_members_are_the_learners(toy_model, tmp_path):
    config = toy_config(toy_model, tmp_path, algo="cory", learner="happo", iterations=2, checkpoint_every=1)
    trainer = Trainer(config, prompts=PROMPTS, reward_fn=fraction_good)
    assert isinstance(trainer.team, HAPPO)
    assert all(isinstance(learner, PPOLearner) for learner in trainer.learners.values())
    trainer.train(progress=False)
    state = load_checkpoint(tmp_path / "checkpoints" / "iter_000001.safetensors")
    assert sorted(state["learners"]) == ["llm_0", "llm_1"]
    assert state["team"]["generator"].equal(trainer.team.generator.get_state())
    # Exported as CORY's learners are, one model each.
    assert all((tmp_path / "model" / name / "model.safetensors").is_file() for name in ("llm_0", "llm_1"))


def test_the_command_line_offers_the_team_learners_with_their_sections(capsys):
    """In-process, as the command parses (cory_agents.cli.train); one subprocess: the installed script's."""
    for learner, section in (
        ("happo", "Learner happo"),
        ("difference", "Learner difference"),
        ("mappo", "Learner mappo"),
    ):
        with pytest.raises(SystemExit) as done:
            train_main(["--learner", learner, "--help"])
        out = capsys.readouterr().out
        assert done.value.code == 0 and section in out and "--vf-coef" in out and "GROUP_SIZE" not in out
    refused = subprocess.run(
        cli("--learner", "happo", "--group-size", "4"), env=cli_env(), cwd=ROOT, capture_output=True, text=True
    )
    assert refused.returncode == 2 and "--group-size" in refused.stderr and "grpo" in refused.stderr


def docs_team_learner_code() -> str:
    text = (ROOT / "docs" / "plug-in-your-algorithm.md").read_text()
    section = text.split("### A minimal team learner", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


@pytest.mark.parametrize("num_agents", [2, 3])
def test_the_docs_team_learner_runs_and_resumes_exactly(toy_model, tmp_path, num_agents):
    code = docs_team_learner_code()
    assert len(code.splitlines()) <= 60
    namespace: dict = {}
    try:
        exec(compile(code, "plug-in-your-algorithm.md", "exec"), namespace)
        assert "take-turns" in LEARNERS

        def config(out, iterations, **kw):
            return toy_config(
                toy_model,
                tmp_path / out,
                algo="cory",
                learner="take-turns",
                num_agents=num_agents,
                iterations=iterations,
                checkpoint_every=1,
                **kw,
            )

        whole = Trainer(config("whole", 4), prompts=PROMPTS, reward_fn=fraction_good)
        assert isinstance(whole.team, namespace["TakeTurns"])
        whole.train(progress=False)
        metrics = pd.read_csv(tmp_path / "whole" / "metrics.csv")
        learning = metrics[[f"llm_{i}/learning" for i in range(num_agents)]].to_numpy()
        assert (learning.sum(axis=1) == 1).all()  # one learner an iteration, in turn
        assert [row.argmax() for row in learning] == [i % num_agents for i in range(4)]
        assert np.isfinite(metrics[[f"llm_{i}/kl" for i in range(num_agents)]].to_numpy()).all()
        Trainer(config("halves", 2), prompts=PROMPTS, reward_fn=fraction_good).train(progress=False)
        Trainer(config("halves", 4, resume=True), prompts=PROMPTS, reward_fn=fraction_good).train(progress=False)
        pd.testing.assert_frame_equal(
            metrics_without_timing(tmp_path / "whole"), metrics_without_timing(tmp_path / "halves"), check_exact=True
        )
    finally:
        LEARNERS.pop("take-turns", None)


def docs_block(heading: str) -> str:
    section = (ROOT / "docs" / "plug-in-your-algorithm.md").read_text().split(heading, 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_docs_team_learner_that_owns_a_module_trains_it_and_resumes_exactly(toy_model, tmp_path):
    namespace: dict = {}
    try:
        exec(compile(docs_block("### Modules the team owns"), "plug-in-your-algorithm.md", "exec"), namespace)

        def config(out, iterations, **kw):
            return toy_config(
                toy_model, tmp_path / out, algo="cory", learner="shared-baseline", iterations=iterations,
                checkpoint_every=1, **kw,
            )  # fmt: skip

        whole = Trainer(config("whole", 4), prompts=PROMPTS, reward_fn=fraction_good)
        assert isinstance(whole.team, namespace["SharedBaseline"])
        assert whole.team_run.modules == {"baseline": whole.team.baseline}
        whole.train(progress=False)
        metrics = pd.read_csv(tmp_path / "whole" / "metrics.csv")
        state = load_checkpoint(tmp_path / "whole" / "checkpoints" / "iter_000003.safetensors")
        assert float(state["team"]["baseline"]["bias"]) == pytest.approx(metrics["team/baseline"].iloc[-1])
        assert metrics["team/baseline"].nunique() == 4  # it learned every iteration
        Trainer(config("halves", 2), prompts=PROMPTS, reward_fn=fraction_good).train(progress=False)
        Trainer(config("halves", 4, resume=True), prompts=PROMPTS, reward_fn=fraction_good).train(progress=False)
        pd.testing.assert_frame_equal(
            metrics_without_timing(tmp_path / "whole"), metrics_without_timing(tmp_path / "halves"), check_exact=True
        )
    finally:
        LEARNERS.pop("shared-baseline", None)


def test_the_docs_replay_gives_the_later_agents_rewards_without_the_first_answer(toy_model, tmp_path):
    namespace: dict = {}
    exec(compile(docs_block("### Replays"), "plug-in-your-algorithm.md", "exec"), namespace)
    config = toy_config(toy_model, tmp_path, algo="cory", num_agents=3, batch_size=8)
    trainer = Trainer(config, prompts=PROMPTS, reward_fn=fraction_good)
    team = trainer.team_episode(trainer.rollout())
    later = namespace["later_agents_without_the_first"](team, trainer.learners)
    assert later.shape == (8,) and np.isfinite(later).all()
    from cory_agents.learners.replay import KEEP, replay

    again = replay(team, trainer.learners, {0: [""] * 8}).task_rewards(team.order[1:])
    np.testing.assert_array_equal(later, again)  # the episode's random numbers: the same counterfactual twice
    played = sum(team.episodes[n].task_rewards for n in team.order[1:])
    np.testing.assert_array_equal(replay(team, trainer.learners, {0: KEEP}).task_rewards(team.order[1:]), played)
