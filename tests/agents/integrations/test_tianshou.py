"""Tianshou consumes the environment: PettingZooEnv in DummyVectorEnv collects episodes in both forms."""

from __future__ import annotations

import numpy as np
import pytest
from pettingzoo.test import api_test

pytest.importorskip("tianshou", reason="Tianshou is in the marl extra (installed with --no-deps; see pyproject.toml)")

from tianshou.algorithm import MARLRandomDiscreteMaskedOffPolicyAlgorithm, MultiAgentOffPolicyAlgorithm  # noqa: E402
from tianshou.algorithm.algorithm_base import RandomActionPolicy  # noqa: E402
from tianshou.algorithm.multiagent.marl import MultiAgentPolicy  # noqa: E402
from tianshou.data import Collector, CollectStats, VectorReplayBuffer  # noqa: E402
from tianshou.env import DummyVectorEnv, PettingZooEnv, SubprocVectorEnv  # noqa: E402

import cory_env  # noqa: E402
from cory_agents.integrations.tianshou import ActionMaskWrapper  # noqa: E402
from cory_env import CollectiveRewardWrapper, RoleExchangeWrapper  # noqa: E402
from cory_env.tasks.toy import TOY_PROMPTS, fraction_good, toy_tokenizer  # noqa: E402

FORMS = [None, 3]
WRAPS = {
    "plain": lambda e: e,
    "stack": lambda e: RoleExchangeWrapper(CollectiveRewardWrapper(e), period=1),  # as the trainer composes them
}
pytestmark = pytest.mark.filterwarnings("ignore:Sequence has shape")  # Tianshou's stats over the agents' returns


def toy_env(B=None, context_length=32, **kwargs):
    return cory_env.env(
        num_conversations=B,
        tokenizer=toy_tokenizer(),
        prompts=TOY_PROMPTS,
        reward_fn=fraction_good,
        max_new_tokens=4,
        context_length=context_length,
        observer_template="{query} {response} {query}",
        **kwargs,
    )


def random_agents(env: PettingZooEnv) -> MultiAgentOffPolicyAlgorithm:
    """Tianshou's multi-agent setup from its PettingZoo tutorial, with a random masked policy per agent."""
    algorithms = [MARLRandomDiscreteMaskedOffPolicyAlgorithm(action_space=env.action_space) for _ in env.agents]
    return MultiAgentOffPolicyAlgorithm(algorithms=algorithms, env=env)


@pytest.mark.parametrize("n", [2, 3])
@pytest.mark.parametrize("wrap", WRAPS)
@pytest.mark.parametrize("B", FORMS)
def test_dummy_vector_env_collects_episodes(B, wrap, n):
    # The single form works as it is; the batched form needs the adapter (MultiDiscrete actions get no mask).
    def make():
        e = WRAPS[wrap](toy_env(B) if n == 2 else toy_env(B, num_agents=n, context_length=48))
        return PettingZooEnv(e if B is None else ActionMaskWrapper(e))

    np.random.seed(0)
    venv = DummyVectorEnv([make, make])
    venv.seed(0)
    collector = Collector[CollectStats](random_agents(make()), venv, VectorReplayBuffer(2000, len(venv)))
    collector.reset()
    stats = collector.collect(n_episode=6)
    assert stats.n_collected_episodes == 6
    assert ((n <= stats.lens) & (stats.lens <= 4 * n)).all()  # n turns of 1 to 4 tokens
    assert stats.returns.shape == (6, n)  # one return per agent (PettingZooEnv's reward list)
    top = float(n) if wrap == "stack" else 1.0  # the collective reward sums the task rewards
    assert ((0 <= stats.returns) & (stats.returns <= top)).all()
    if wrap == "stack":
        for k in range(1, n):
            np.testing.assert_allclose(stats.returns[:, 0], stats.returns[:, k])
    data, _ = collector.buffer.sample(0)  # every stored transition
    assert data.act.dtype == np.int64 and data.act.shape[1:] == (() if B is None else (B,))
    # Rewards are paid at the episode's end: only the last transition of an episode has any.
    assert data.done.sum() == 6 and np.all(data.rew[~data.done] == 0)
    np.testing.assert_allclose(np.sort(data.rew[data.done].sum(-1)), np.sort(stats.returns.sum(-1)))
    # The infos of the last transition (the next agent's, as PettingZooEnv reports them) carry the texts.
    assert "response" in data.info.get_keys()


def test_batched_form_without_the_adapter_fails_inside_tianshou():
    """Why ActionMaskWrapper exists: if Tianshou starts to handle MultiDiscrete masks, this test says so."""
    make = lambda: PettingZooEnv(toy_env(3))  # noqa: E731
    venv = DummyVectorEnv([make])
    collector = Collector[CollectStats](random_agents(make()), venv)
    with pytest.raises(AttributeError, match="obs_next|mask"):
        collector.collect(n_episode=1, reset_before_collect=True)


@pytest.mark.parametrize("B", FORMS)
def test_action_mask_wrapper(B):
    api_test(ActionMaskWrapper(toy_env(B)), num_cycles=100)
    env = ActionMaskWrapper(toy_env(B))
    env.reset(seed=0)
    obs = env.observe("pioneer")
    assert set(obs) == {"observation", "action_mask"}
    assert env.observation_space("pioneer").contains(obs)
    rows = [obs["action_mask"]] if B is None else list(obs["action_mask"])  # Gymnasium's MultiDiscrete mask: a tuple
    assert len(rows) == (1 if B is None else B)
    for row in rows:
        assert row.shape == (18,) and row.dtype == np.int8 and row.all() and not row.flags.writeable
    assert env.observation_space("pioneer")["observation"] == toy_env(B).observation_space("pioneer")
    action = env.action_space("pioneer").sample(mask=obs["action_mask"])
    assert np.shape(action) == (() if B is None else (B,))
    np.testing.assert_array_equal(obs["observation"]["input_ids"], env.unwrapped.observe("pioneer")["input_ids"])


def test_float_actions_get_the_environments_error():
    """Tianshou's RandomActionPolicy returns float tensors; the environment names the problem and the cast."""
    make = lambda: PettingZooEnv(toy_env())  # noqa: E731
    env = make()
    policy = MultiAgentPolicy({agent: RandomActionPolicy(env.action_space) for agent in env.agents})
    collector = Collector[CollectStats](policy, DummyVectorEnv([make]))
    with pytest.raises(TypeError, match=r"must be integer token id\(s\), got dtype float32.*int\(\.\.\.\)"):
        collector.collect(n_step=4, reset_before_collect=True)


@pytest.mark.parametrize("wrap", WRAPS)
@pytest.mark.parametrize("B", FORMS)
def test_last_transcript_through_tianshou(B, wrap):
    """As docs/other-algorithms.md says: ``ts_env.env.last_transcript`` (Tianshou's PettingZooEnv is an AEC
    environment of its own, its ``unwrapped`` itself), ``venv.get_env_attr("env")`` in a DummyVectorEnv."""

    def make():
        e = WRAPS[wrap](toy_env(B))
        return PettingZooEnv(e if B is None else ActionMaskWrapper(e))

    env = make()
    assert env.unwrapped is env and not hasattr(env, "last_transcript")
    assert env.env.last_transcript is None  # no episode finished yet
    np.random.seed(0)
    done = False
    while not done:  # one episode, the random masked policy's actions (obs["mask"] is all True)
        action = env.action_space.sample()
        obs, rewards, term, trunc, info = env.step(action)
        done = term or trunc
    # The final info is the next agent's (PettingZooEnv reports last()), its role named in it.
    assert env.env.last_transcript[info["role"]]["response"] == info["response"]
    assert set(env.env.last_transcript) == {"pioneer", "observer"}

    np.random.seed(0)
    venv = DummyVectorEnv([make, make])
    venv.seed(0)
    collector = Collector[CollectStats](random_agents(make()), venv, VectorReplayBuffer(2000, len(venv)))
    collector.reset()
    collector.collect(n_episode=4)
    transcripts = [e.last_transcript for e in venv.get_env_attr("env")]  # one per worker
    for transcript, buffer in zip(transcripts, collector.buffer.buffers):
        last = buffer.info[np.flatnonzero(buffer.done[: len(buffer)])[-1]]  # the worker's last finished episode
        np.testing.assert_array_equal(np.asarray(transcript[last["role"]]["response"]), np.asarray(last["response"]))
        np.testing.assert_allclose(transcript[last["role"]]["reward"], last["reward"])
    with pytest.raises(AttributeError, match="last_transcript"):
        venv.get_env_attr("last_transcript")
    venv.close()


def test_last_transcript_from_a_subprocess_vector_env():
    """SubprocVectorEnv: get_env_attr("env") sends the worker's environment back, pickled; the attribute
    itself comes back as None (Tianshou's worker answers None for names the PettingZooEnv lacks)."""
    make = lambda: PettingZooEnv(toy_env())  # noqa: E731
    venv = SubprocVectorEnv([make])
    try:
        collector = Collector[CollectStats](random_agents(make()), venv)
        collector.collect(n_episode=1, reset_before_collect=True)
        (worker_env,) = venv.get_env_attr("env")  # a copy of the worker's environment
        assert set(worker_env.last_transcript) == {"pioneer", "observer"}
        assert isinstance(worker_env.last_transcript["observer"]["response"], str)
        assert venv.get_env_attr("last_transcript") == [None]
    finally:
        venv.close()
