"""Property-based tests: any action sequence ends the episode with consistent bookkeeping."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cory_env import CollectiveRewardWrapper, RoleExchangeWrapper, env
from tests.support.envs import PROMPTS, length_reward

STOP = 50256  # GPT-2's <|endoftext|>


@st.composite
def episodes(draw):
    batched = draw(st.booleans())
    B = draw(st.integers(1, 4)) if batched else None
    lo = draw(st.integers(1, 6))
    hi = draw(st.integers(lo, 8))
    # Mostly ordinary tokens, often the stop token, sometimes the largest id.
    token = st.one_of(st.integers(0, 1000), st.just(STOP), st.just(50256 - 1))
    actions = draw(st.lists(st.lists(token, min_size=B or 1, max_size=B or 1), min_size=20, max_size=20))
    wrap = draw(st.sampled_from(["none", "collective", "both"]))
    return B, (lo, hi), actions, wrap, draw(st.integers(0, 2**16))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=episodes())
def test_every_episode_terminates_with_consistent_bookkeeping(gpt2_tokenizer, case):
    B, bounds, actions, wrap, seed = case
    e = env(
        tokenizer=gpt2_tokenizer,
        prompts=PROMPTS,
        reward_fn=length_reward,
        num_conversations=B,
        max_new_tokens=bounds,
        context_length=64,
    )
    if wrap != "none":
        e = CollectiveRewardWrapper(e)
    if wrap == "both":
        e = RoleExchangeWrapper(e, period=1)
    raw = e.unwrapped
    e.reset(seed=seed)
    T = raw.max_new_tokens
    steps, finals, live_steps = 0, {}, {}
    for agent in e.agent_iter(max_iter=2 * T + 10):
        obs, reward, term, trunc, info = e.last()
        assert e.observation_space(agent).contains(obs)
        assert not trunc
        if term:
            finals[agent] = (reward, info)
            e.step(None)
            continue
        assert reward == 0.0  # rewards only at the end
        row = actions[steps % len(actions)]
        e.step(row[0] if B is None else np.array(row))
        steps += 1
        live_steps[agent] = live_steps.get(agent, 0) + 1
    # The episode ended: every agent finished and left.
    assert e.agents == [] and len(finals) == 2
    assert all(1 <= n <= T for n in live_steps.values())

    total = sum(np.atleast_1d(i["task_reward"]) for _, i in finals.values())
    for reward, info in finals.values():
        lengths = np.atleast_1d(info["response_length"])
        responses = [info["response"]] if B is None else info["response"]
        assert ((1 <= lengths) & (lengths <= T)).all()
        assert np.allclose(np.atleast_1d(info["task_reward"]), length_reward(None, responses))
        expected = total if wrap != "none" else np.atleast_1d(info["task_reward"])
        assert np.allclose(np.atleast_1d(info["reward"]), expected)
        assert np.isclose(reward, expected.mean())

    # A conversation's turn ends at its first stop token, or at T tokens.
    pioneer_len = np.atleast_1d(finals[_learner_of(e, "pioneer")][1]["response_length"])
    for b, n in enumerate(pioneer_len):
        column = [actions[t][b if B else 0] for t in range(n)]
        assert STOP not in column[:-1]
        assert column[-1] == STOP or n == T


def _learner_of(e, role):
    roles = getattr(e, "roles", None)
    if roles is None:
        return role
    return next(learner for learner, r in roles.items() if r == role)
