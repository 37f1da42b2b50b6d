"""PettingZoo's parallel API over the pioneer/observer game (turn_based_aec_to_parallel)."""

from __future__ import annotations

import copy

import numpy as np
import pytest
from pettingzoo.test import parallel_api_test, parallel_seed_test
from pettingzoo.utils.conversions import turn_based_aec_to_parallel

import cory_env
from cory_env import CollectiveRewardWrapper, RoleExchangeWrapper
from tests.support.envs import FORMS, PROMPTS, length_reward

WRAPS = {
    "plain": lambda e: e,
    "collective": CollectiveRewardWrapper,
    "role_exchange": lambda e: RoleExchangeWrapper(e, period=1),
    "both": lambda e: RoleExchangeWrapper(CollectiveRewardWrapper(e), period=1),
}


@pytest.mark.parametrize("wrap", WRAPS)
@pytest.mark.parametrize("B", FORMS)
def test_parallel_api(make_env, B, wrap):
    parallel_api_test(turn_based_aec_to_parallel(WRAPS[wrap](make_env(B))), num_cycles=100)


@pytest.mark.parametrize("B", FORMS)
def test_parallel_api_pioneer_alone(make_env, B):
    par = turn_based_aec_to_parallel(make_env(B, with_observer=False))
    parallel_api_test(par, num_cycles=100)
    assert par.possible_agents == ["pioneer"]


@pytest.mark.parametrize("B", FORMS)
def test_parallel_seed(make_env, B):
    parallel_seed_test(lambda: turn_based_aec_to_parallel(make_env(B)), num_cycles=100)


def test_parallel_env_factory(gpt2_tokenizer):
    par = cory_env.parallel_env(tokenizer=gpt2_tokenizer, prompts=PROMPTS, reward_fn=length_reward, context_length=64)
    observations, infos = par.reset(seed=0)
    assert par.agents == ["pioneer", "observer"]
    assert isinstance(par.unwrapped, cory_env.PioneerObserverEnv)
    assert observations["pioneer"]["num_new_tokens"][0] > 0 and observations["observer"]["num_new_tokens"][0] == 0
    assert par.last_transcript is None  # no episode has finished yet
    while par.agents:
        observations, rewards, terms, truncs, infos = par.step({a: 11 for a in par.agents})
    assert set(par.last_transcript) == {"pioneer", "observer"}
    assert par.last_transcript["observer"]["response"] == infos["observer"]["response"]


def token_table(agents, B, vocab, eos, max_steps=8, seed=0):
    """Each agent's k-th token (or B tokens), with stop tokens sprinkled in."""
    rng = np.random.default_rng(seed)
    shape = (max_steps,) if B is None else (max_steps, B)
    table = {}
    for agent in agents:
        t = rng.integers(0, vocab, size=shape)
        t[rng.random(shape) < 0.15] = eos
        table[agent] = t
    return table


def play_aec(env, table, seed):
    env.reset(seed=seed)
    turns = dict.fromkeys(env.possible_agents, 0)
    final = {}
    for agent in env.agent_iter():
        obs, reward, term, trunc, info = env.last()
        if term or trunc:
            final[agent] = (reward, info)
            env.step(None)
        else:
            env.step(table[agent][turns[agent]])
            turns[agent] += 1
    return final, turns


def play_parallel(par, table, seed):
    observations, infos = par.reset(seed=seed)
    # Nobody has acted yet, so infos carry no "active_agent": whoever plays the pioneer starts.
    active = next(a for a in par.agents if infos[a]["role"] == "pioneer")
    turns = dict.fromkeys(par.possible_agents, 0)
    totals = dict.fromkeys(par.possible_agents, 0.0)
    last_infos = {}
    while par.agents:
        # Every live agent sends an action; only the active agent's is used.
        actions = {a: table[a][turns[a]] for a in par.agents}
        turns[active] += 1
        observations, rewards, terms, truncs, infos = par.step(actions)
        for a, r in rewards.items():
            totals[a] += r
        last_infos.update(infos)
        if par.agents:
            active = infos[par.agents[0]]["active_agent"]
            assert all(infos[a]["active_agent"] == active for a in par.agents)
    return totals, last_infos, turns


@pytest.mark.parametrize("wrap", WRAPS)
@pytest.mark.parametrize("B", FORMS)
def test_parallel_episode_matches_aec_episode(make_env, gpt2_tokenizer, B, wrap):
    make = lambda: WRAPS[wrap](make_env(B, max_new_tokens=(3, 6)))  # noqa: E731
    aec, par = make(), turn_based_aec_to_parallel(make())
    for seed in range(4):
        table = token_table(aec.possible_agents, B, 2000, gpt2_tokenizer.eos_token_id, seed=seed)
        final, aec_turns = play_aec(aec, table, seed)
        totals, infos, par_turns = play_parallel(par, table, seed)
        assert par_turns == aec_turns
        for agent, (reward, info) in final.items():
            assert totals[agent] == pytest.approx(reward)
            for key in ("role", "query", "response", "task_reward", "reward"):
                assert np.all(np.asarray(infos[agent][key]) == np.asarray(info[key])), (agent, key)
        if wrap in ("collective", "both"):
            rewards = list(totals.values())
            assert rewards[0] == pytest.approx(rewards[1])


@pytest.mark.parametrize("wrap", WRAPS)
@pytest.mark.parametrize("B", FORMS)
def test_numeric_active_agent(make_env, B, wrap):
    """Under numeric_infos, to_parallel's infos name the acting agent by index, from reset on."""
    par = cory_env.to_parallel(WRAPS[wrap](make_env(B, numeric_infos=True)))
    parallel_api_test(par, num_cycles=50)
    observations, infos = par.reset(seed=0)
    first = infos[par.agents[0]]["active_agent"]
    assert isinstance(first, np.integer) and par.possible_agents[first] in par.agents
    assert all(infos[a]["active_agent"] == first for a in par.agents)
    while par.agents:
        active = par.possible_agents[infos[par.agents[0]]["active_agent"]]
        assert active == par.aec_env.agent_selection
        actions = {a: par.action_space(a).sample() for a in par.agents}
        observations, rewards, terms, truncs, infos = par.step(actions)
        for info in infos.values():
            assert set(info) >= {"role", "reward", "active_agent"}
            assert not any(isinstance(v, str) for v in info.values())
    assert all(info["active_agent"] == -1 for info in infos.values())  # after the episode's last step
    # The AEC environment's own infos are not written into.
    assert all(not isinstance(i.get("active_agent"), np.integer) for i in par.aec_env.infos.values())


def test_to_parallel_without_numeric_infos_is_pettingzoos_conversion(make_env):
    par = cory_env.to_parallel(make_env(None))
    assert isinstance(par, type(turn_based_aec_to_parallel(make_env(None))))
    observations, infos = par.reset(seed=0)
    assert "active_agent" not in infos["pioneer"]
    observations, rewards, terms, truncs, infos = par.step({"pioneer": 11, "observer": 11})
    assert infos["pioneer"]["active_agent"] in ("pioneer", "observer")


def assert_transcript_is(transcript, final_infos):
    """The transcript (by role) holds what each agent's final infos held (by agent, role in its infos)."""
    assert set(transcript) == {info["role"] for info in final_infos.values()}
    for agent, info in final_infos.items():
        kept = transcript[info["role"]]
        for key in ("role", "query", "context", "response", "response_length", "task_reward", "reward"):
            assert np.all(np.asarray(kept[key]) == np.asarray(info[key])), (agent, key)


@pytest.mark.parametrize("wrap", WRAPS)
@pytest.mark.parametrize("B", FORMS)
def test_last_transcript_through_the_wrappers_and_the_parallel_api(make_env, gpt2_tokenizer, B, wrap):
    """env.last_transcript through CORY's AEC wrappers (PettingZoo's forwarding) and par.last_transcript
    through to_parallel (forwarded to the AEC environment), both by role."""
    aec, par = WRAPS[wrap](make_env(B)), cory_env.to_parallel(WRAPS[wrap](make_env(B)))
    assert aec.last_transcript is None and par.last_transcript is None
    table = token_table(aec.possible_agents, B, 2000, gpt2_tokenizer.eos_token_id)
    final, _ = play_aec(aec, table, seed=0)
    assert_transcript_is(aec.last_transcript, {agent: info for agent, (_, info) in final.items()})
    totals, infos, _ = play_parallel(par, table, seed=0)
    assert_transcript_is(par.last_transcript, infos)
    assert_transcript_is(par.unwrapped.last_transcript, infos)
    par.reset(seed=1)  # kept through reset, as on the AEC environment
    assert_transcript_is(par.last_transcript, infos)


def test_to_parallel_forwards_public_names_only(make_env):
    par = cory_env.to_parallel(RoleExchangeWrapper(make_env(None), period=1))
    par.reset(seed=0)
    assert par.roles == {"llm_0": "pioneer", "llm_1": "observer"}  # the role exchange wrapper's
    assert isinstance(par.unwrapped, cory_env.PioneerObserverEnv)
    with pytest.raises(AttributeError):
        _ = par.no_such_attribute
    assert not hasattr(par, "_last_transcript")  # private names are not forwarded
    # Built without __init__ (as copy and pickle do), it has no aec_env: names are missing, no recursion.
    bare = object.__new__(type(par))
    with pytest.raises(AttributeError):
        _ = bare.last_transcript
    twin = copy.deepcopy(par)
    assert twin.aec_env is not par.aec_env and twin.roles == par.roles
