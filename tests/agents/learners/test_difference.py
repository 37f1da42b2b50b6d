"""Difference rewards (agents/learners/difference.py): each agent's reward by hand from a replay, the
played episode left as it was, learning for real at toy scale in chains of two and three."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from cory_agents.learners.difference import BLANK, DifferenceRewards
from cory_agents.learners.team import TeamEpisode
from cory_agents.training.trainer import Trainer
from tests.support.runs import PROMPTS, team_rises, toy_config
from tests.support.toy import fraction_good


def played(trainer: Trainer) -> TeamEpisode:
    return trainer.team_episode(trainer.rollout())


def replayed_by_hand(trainer: Trainer, team: TeamEpisode, position: int) -> dict[str, np.ndarray]:
    """Each later agent's task reward when the chain is played again with the answer at ``position`` blank."""
    env = copy.copy(team.env)
    learner_at = {role: name for name, role in team.roles.items()}
    roles = env.possible_agents
    answers = [list(env.responses[r]) for r in roles[:position]] + [[BLANK] * env.num_conversations]
    env.reset(options={"answers": answers})
    rewards, started = {}, set()
    after = {n: learner.sampling_generator.get_state() for n, learner in trainer.learners.items()}
    for role in env.agent_iter():
        observation, _, terminated, truncated, info = env.last()
        name = learner_at[role]
        if terminated or truncated:
            rewards[name] = np.asarray(info["task_reward"])
            env.step(None)
        else:
            if name not in started:  # common random numbers: the generator as this turn started in the episode
                started.add(name)
                trainer.learners[name].sampling_generator.set_state(team.sampling_states[name][0])
            env.step(trainer.learners[name].act(name, observation))
    for n, state in after.items():  # left as the episode left them
        trainer.learners[n].sampling_generator.set_state(state)
    return rewards


@pytest.mark.parametrize("num_agents", [2, 3])
def test_each_agent_learns_from_its_reward_plus_its_help_to_the_later_agents(toy_model, tmp_path, num_agents):
    config = toy_config(toy_model, tmp_path, algo="cory", learner="difference", num_agents=num_agents)
    trainer = Trainer(config, prompts=PROMPTS, reward_fn=fraction_good)
    assert isinstance(trainer.team, DifferenceRewards)
    team = played(trainer)
    order = team.order
    env = team.env
    untouched = (env.last_transcript, dict(env.responses), dict(env.task_rewards), env.np_random.bit_generator.state)
    start = {n: learner.state_dict() for n, learner in trainer.learners.items()}

    # By hand: D^i = r^i + sum_{j > i} (r^j - r'^j), r' from a replay with agent i's answer blank.
    task = {n: team.episodes[n].task_rewards for n in order}
    expected = {}
    for i, name in enumerate(order):
        replay = replayed_by_hand(trainer, team, i) if i + 1 < num_agents else {}
        assert sorted(replay) == sorted(order[i + 1 :])
        expected[name] = task[name] + sum(task[n] - replay[n] for n in order[i + 1 :])
    assert not np.array_equal(expected[order[0]], team.collective_rewards)  # the replays did answer otherwise

    for name, learner in trainer.learners.items():  # the same random draws again
        learner.load_state_dict(start[name])
    seen = {}
    for name, learner in trainer.learners.items():
        learn = learner.learn
        learner.learn = lambda episode, learn=learn, name=name: seen.setdefault(name, episode) and learn(episode)
    stats = trainer.team.learn(team)
    for name in order:
        np.testing.assert_allclose(seen[name].scores, expected[name], rtol=0, atol=1e-12)  # summation order
        assert stats[name]["difference_reward_mean"] == pytest.approx(expected[name].mean())
        assert stats[name]["reward_mean"] == pytest.approx(expected[name].mean())  # what PPO learned from
    np.testing.assert_array_equal(seen[order[-1]].scores, task[order[-1]])  # the last agent: its own reward
    # The played episode is left as it was, and the environment's generator untouched.
    assert repr(
        (env.last_transcript, dict(env.responses), dict(env.task_rewards), env.np_random.bit_generator.state)
    ) == repr(untouched)


@pytest.mark.parametrize("num_agents", [2, pytest.param(3, marks=pytest.mark.ci)])
def test_difference_rewards_raise_every_learners_reward(toy_model, tmp_path, num_agents):
    rises = team_rises(toy_model, tmp_path, "difference", num_agents)
    assert all(rise > 0.1 for rise in rises.values()), rises


def test_over_two_rounds_each_agent_learns_from_the_team_reward_it_made_at_its_last_turn(toy_model, tmp_path):
    """--rounds 2: D^i = the agent's own turns' rewards + the others' rewards in the turns after its first - the
    others' rewards in a replay of those turns with every answer of i blank (common random numbers: the replay is
    deterministic, so it is replayed here as learn replays it)."""
    from cory_agents.learners.replay import KEEP, replay

    config = toy_config(toy_model, tmp_path, algo="cory", learner="difference", rounds=2, batch_size=8)
    trainer = Trainer(config, prompts=PROMPTS, reward_fn=fraction_good)
    team = played(trainer)
    first, second = team.order
    turns = {n: team.episodes[n].extra["turn_task_rewards"] for n in team.order}  # (2, 8) each
    blank = [""] * 8
    without_first = replay(team, trainer.learners, {0: blank, 2: blank})
    without_second = replay(team, trainer.learners, {0: KEEP, 1: blank, 3: blank})
    expected = {
        first: turns[first].sum(0) + turns[second].sum(0) - without_first.episodes[second].task_rewards,
        second: turns[second].sum(0) + turns[first][1] - without_second.episodes[first].task_rewards,
    }
    seen = {}
    for name, learner in trainer.learners.items():
        learn = learner.learn
        learner.learn = lambda episode, learn=learn, name=name: seen.setdefault(name, episode) and learn(episode)
    stats = trainer.team.learn(team)
    for name in team.order:
        scores = seen[name].scores.reshape(2, 8)
        np.testing.assert_array_equal(scores[0], np.zeros(8))  # the first turn: nothing of its own
        np.testing.assert_allclose(scores[1], expected[name], rtol=0, atol=1e-12)
        assert stats[name]["difference_reward_mean"] == pytest.approx(expected[name].mean())
