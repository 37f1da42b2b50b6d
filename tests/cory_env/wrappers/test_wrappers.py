"""CollectiveRewardWrapper and RoleExchangeWrapper, alone and stacked."""

from __future__ import annotations

import numpy as np
import pytest
from pettingzoo.test import api_test, seed_test

from cory_env import CollectiveRewardWrapper, RoleExchangeWrapper
from tests.support.envs import FORMS, play, random_policy

STACKS = {
    "collective": lambda e: CollectiveRewardWrapper(e),
    "role_exchange": lambda e: RoleExchangeWrapper(e, period=2),
    "role_exchange(collective)": lambda e: RoleExchangeWrapper(CollectiveRewardWrapper(e), period=1),
    "collective(role_exchange)": lambda e: CollectiveRewardWrapper(RoleExchangeWrapper(e, period=1)),
}


@pytest.mark.parametrize("B", FORMS)
@pytest.mark.parametrize("stack", STACKS)
def test_api(make_env, stack, B):
    api_test(STACKS[stack](make_env(B)), num_cycles=200)


@pytest.mark.parametrize("B", FORMS)
@pytest.mark.parametrize("stack", STACKS)
def test_seed(make_env, stack, B):
    seed_test(lambda: STACKS[stack](make_env(B)), num_cycles=100)


@pytest.mark.parametrize("B", FORMS)
@pytest.mark.parametrize("stack", ["collective", "role_exchange(collective)", "collective(role_exchange)"])
def test_collective_reward_is_the_sum_of_task_rewards(make_env, stack, B):
    env = STACKS[stack](make_env(B))
    differed = False
    for seed in range(5):
        finals = play(env, random_policy(env), seed=seed)
        (r0, i0), (r1, i1) = finals.values()
        total = np.atleast_1d(i0["task_reward"]) + np.atleast_1d(i1["task_reward"])
        for reward, info in finals.values():
            assert np.allclose(np.atleast_1d(info["reward"]), total)
            assert reward == pytest.approx(total.mean())
        differed |= not np.allclose(i0["task_reward"], i1["task_reward"])
    assert differed  # the test could tell a collective reward from an agent's own


def test_collective_mean_and_weights(make_env):
    env = CollectiveRewardWrapper(make_env(3), aggregate="mean", weights={"pioneer": 1.0, "observer": 3.0})
    finals = play(env, random_policy(env))
    pio, obs = finals["pioneer"][1], finals["observer"][1]
    expected = (pio["task_reward"] + 3 * obs["task_reward"]) / 4
    assert np.allclose(pio["reward"], expected) and np.allclose(obs["reward"], expected)


def test_collective_bad_arguments(make_env):
    with pytest.raises(ValueError, match="aggregate"):
        CollectiveRewardWrapper(make_env(None), aggregate="max")
    with pytest.raises(ValueError, match="one weight for each role"):
        CollectiveRewardWrapper(make_env(None), weights={"pioneer": 1.0, "critic": 1.0})


def test_rewards_only_arrive_at_the_end(make_env):
    env = CollectiveRewardWrapper(make_env(2))
    env.reset(seed=0)
    for agent in env.agent_iter():
        obs, reward, term, trunc, info = env.last()
        if not term:
            assert reward == 0.0
        env.step(None if term else env.action_space(agent).sample())


@pytest.mark.parametrize("period", [1, 2, 5])
def test_role_exchange_swaps_exactly_on_schedule(make_env, period):
    env = RoleExchangeWrapper(CollectiveRewardWrapper(make_env(2)), period=period)
    for episode in range(4 * period):
        finals = play(env, random_policy(env), seed=episode)
        expected_pioneer = "llm_0" if (episode // period) % 2 == 0 else "llm_1"
        assert env.roles[expected_pioneer] == "pioneer"
        assert finals[expected_pioneer][1]["role"] == "pioneer"
        other = "llm_1" if expected_pioneer == "llm_0" else "llm_0"
        assert finals[other][1]["role"] == "observer"


def test_role_exchange_observation_and_order(make_env):
    env = RoleExchangeWrapper(make_env(2), period=1)
    for episode in range(2):
        if episode:
            play(env, random_policy(env), seed=episode)  # the first episode, played: a swap
        env.reset(seed=episode)
        pioneer = "llm_0" if episode == 0 else "llm_1"
        observer = "llm_1" if episode == 0 else "llm_0"
        assert env.agent_selection == pioneer and env.agents == [pioneer, observer]
        assert env.observe(pioneer)["role"][0] == 0 and env.observe(observer)["role"][0] == 1
        assert env.infos[pioneer]["role"] == "pioneer"
    assert env.possible_agents == ["llm_0", "llm_1"]
    assert env.observation_space("llm_0") is env.observation_space("llm_0")


def test_role_exchange_none_never_swaps_and_resume(make_env):
    env = RoleExchangeWrapper(make_env(None), period=None)
    for _ in range(7):
        env.reset()
        assert env.roles == {"llm_0": "pioneer", "llm_1": "observer"}
    env = RoleExchangeWrapper(make_env(None), period=5)
    env.episodes = 7  # resume: 7 episodes already played
    env.reset()
    assert env.roles["llm_1"] == "pioneer"
    with pytest.raises(ValueError, match="period"):
        RoleExchangeWrapper(make_env(None), period=0)


@pytest.mark.parametrize("B", [None, 2])
def test_role_exchange_counts_played_episodes_not_resets(make_env, B):
    """Clients (TorchRL, Tianshou, PettingZoo's api_test) reset before they play: only an episode
    whose last turn ended moves the schedule."""
    env = RoleExchangeWrapper(make_env(B), period=1)
    for _ in range(3):  # resets with nothing played
        env.reset(seed=0)
    assert env.episodes == 0 and env.roles["llm_0"] == "pioneer"
    env.reset(seed=0)
    env.step(env.action_space(env.agent_selection).sample())  # a turn begun, the episode not over
    env.reset(seed=1)
    assert env.episodes == 0 and env.roles["llm_0"] == "pioneer"
    finals = play(env, random_policy(env), seed=2)  # played (dead steps included): counted once
    assert env.episodes == 1 and finals["llm_0"][1]["role"] == "pioneer"
    env.reset(seed=3)
    assert env.roles["llm_1"] == "pioneer"
    env.reset(seed=4)  # still nothing played in the new episode
    assert env.episodes == 1 and env.roles["llm_1"] == "pioneer"
    finals = play(env, random_policy(env), seed=5)
    assert env.episodes == 2 and finals["llm_1"][1]["role"] == "pioneer"
