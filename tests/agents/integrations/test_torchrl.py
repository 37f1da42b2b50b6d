"""TorchRL consumes the environment: PettingZooWrapper over every form, rewards per conversation, PPO learns."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import torch

pytest.importorskip("torchrl", reason="TorchRL is in the marl extra: pip install -e '.[marl]'")

from tensordict.nn import TensorDictSequential  # noqa: E402
from torchrl.data import Categorical  # noqa: E402
from torchrl.envs import PettingZooWrapper  # noqa: E402
from torchrl.envs.utils import check_env_specs  # noqa: E402

import cory_env  # noqa: E402
from cory_agents.integrations.torchrl import (  # noqa: E402
    episode_rewards,
    finished_episode_rewards,
    fixed_token_policy,
    token_actor,
    token_critic,
)
from cory_env import CollectiveRewardWrapper, RoleExchangeWrapper  # noqa: E402
from cory_env.pioneer_observer import chain_roles  # noqa: E402
from cory_env.tasks.toy import TOY_PROMPTS, fraction_good, toy_tokenizer  # noqa: E402
from tests.support import ROOT

GOOD, BAD = 6, 7  # toy token ids
# TorchRL warns for every PettingZoo release but 1.24.3; these tests are what checks this one.
pytestmark = pytest.mark.filterwarnings("ignore:PettingZoo in TorchRL is tested using version")


def toy_env(B=None, context_length=32, **kwargs):
    return cory_env.env(
        numeric_infos=True,
        num_conversations=B,
        tokenizer=toy_tokenizer(),
        prompts=TOY_PROMPTS,
        reward_fn=fraction_good,
        max_new_tokens=4,
        context_length=context_length,
        observer_template="{query} {response} {query}",
        **kwargs,
    )


WRAPS = {
    "plain": lambda e: e,
    "stack": lambda e: RoleExchangeWrapper(CollectiveRewardWrapper(e), period=1),  # as the trainer composes them
}
FORMS = [None, 3]


def build(api, B, wrap, n=2):
    aec = WRAPS[wrap](toy_env(B) if n == 2 else toy_env(B, num_agents=n, context_length=48))
    return PettingZooWrapper(env=aec if api == "aec" else cory_env.to_parallel(aec), use_mask=True, seed=0)


@pytest.mark.parametrize("n", [2, 3])
@pytest.mark.parametrize("wrap", WRAPS)
@pytest.mark.parametrize("B", FORMS)
@pytest.mark.parametrize("api", ["aec", "parallel"])
def test_wrapper_passes_check_env_specs_and_rolls_out_episodes(api, B, wrap, n):
    env = build(api, B, wrap, n)
    check_env_specs(env)
    assert sorted(a for agents in env.group_map.values() for a in agents) == sorted(
        env.unwrapped.possible_agents if wrap == "plain" else [f"llm_{i}" for i in range(n)]
    )
    rollout = env.rollout(100, break_when_any_done=True)  # one whole episode, TorchRL's random policy
    done = rollout["next", "done"].squeeze(-1)
    assert done[-1] and not done[:-1].any()
    assert len(rollout) <= 4 * n  # n turns of at most 4 tokens
    transcript = env.last_transcript  # the texts of the episode TorchRL just played, forwarded over either API
    for group, agents in env.group_map.items():  # what docs/other-algorithms.md says a TorchRL user gets
        action = env.full_action_spec[group, "action"]
        assert type(action) is Categorical and action.n == 18 and action.dtype == torch.int64
        assert action.shape == ((len(agents),) if B is None else (len(agents), B))
        assert rollout[group, "action"].dtype == torch.int64
        info_keys = {"role", "response_length", "task_reward", "reward"}
        info_keys |= {"active_agent"} if api == "parallel" else set()
        assert set(rollout[group, "info"].keys()) == info_keys
        for key in info_keys:  # TorchRL's info spec is float32 whatever the environment's dtype (int64 for role)
            assert env.full_observation_spec[group, "info", key].dtype == torch.float32, key
            assert rollout["next", group, "info", key].dtype == torch.float32, key
        assert rollout[group, "info", "role"].shape == (len(rollout), len(agents))
        assert rollout[group, "observation", "role"].dtype == torch.int64  # the observation's role: int64
        np.testing.assert_array_equal(rollout[group, "observation", "role"][..., 0], rollout[group, "info", "role"])
    for group, agents in env.group_map.items():
        mask = rollout[group, "mask"]
        if api == "aec":  # one agent acts per step
            assert mask.shape[-1] == len(agents)
        for i in range(len(agents)):
            role = chain_roles(n)[int(rollout["next", group, "info", "role"][-1, i])]
            paid = np.asarray(transcript[role]["reward"], dtype=np.float32)
            per_conversation = rollout["next", group, "info", "reward"][-1, i].numpy()
            np.testing.assert_allclose(per_conversation, paid, rtol=1e-6)
            reward = rollout["next", group, "reward"][:, i, 0]
            assert reward[-1].item() == pytest.approx(float(paid.mean()), rel=1e-6)
            assert (reward[:-1] == 0).all()  # rewards come at the end of the episode
            assert isinstance(transcript[role]["response"], str if B is None else list)
    if api == "aec":
        acting = torch.cat([rollout[g, "mask"] for g in env.group_map], dim=-1)
        assert (acting.sum(-1) == 1).all()
    longer = env.rollout(60, break_when_any_done=False)  # TorchRL resets after each episode
    assert longer["next", "done"].sum() >= 60 // (4 * n)


def test_per_conversation_rewards_reach_torchrl():
    """Batched form: the reward entry is the mean over conversations, ("info", "reward") each one's."""
    env = PettingZooWrapper(env=toy_env(3), use_mask=True, seed=0)
    words = torch.tensor([GOOD, BAD, GOOD])  # conversation 1 says "bad": its reward is 0

    def policy(td):
        for group in env.group_map:
            td[group, "action"] = words.expand(env.full_action_spec[group, "action"].shape).clone()
        return td

    rollout = env.rollout(20, policy, break_when_any_done=True)
    for group in ("pioneer", "observer"):
        assert rollout["next", group, "info", "reward"][-1].tolist() == [[1.0, 0.0, 1.0]]
        assert rollout["next", group, "info", "task_reward"][-1].tolist() == [[1.0, 0.0, 1.0]]
        assert rollout["next", group, "reward"][-1].item() == pytest.approx(2 / 3)
        np.testing.assert_array_equal(finished_episode_rewards(rollout, group, ("info", "reward")), [1.0, 0.0, 1.0])
    assert env.last_transcript["observer"]["response"] == ["good good good good", "bad bad bad bad"] + [
        "good good good good"
    ]


def test_float_actions_get_the_environments_error():
    """TorchRL hands a float action over as it is; the environment names the problem and the cast."""
    for B in FORMS:
        env = PettingZooWrapper(env=toy_env(B), use_mask=True, seed=0)
        td = env.rand_action(env.reset())
        td["pioneer", "action"] = td["pioneer", "action"].float() + 0.5
        with pytest.raises(TypeError, match=r"must be integer token id\(s\), got dtype float32.*astype\(np.int64\)"):
            env.step(td)


def test_policy_modules_act_in_both_forms():
    for B in FORMS:
        env = PettingZooWrapper(env=toy_env(B), use_mask=True, seed=0)
        actor, critic = token_actor(env, "pioneer"), token_critic(env, "pioneer")
        other = fixed_token_policy(env, "observer", BAD)
        td = critic(other(actor(env.reset())))
        shape = (1,) if B is None else (1, B)
        assert td["pioneer", "action"].shape == shape and td["pioneer", "action_log_prob"].shape == shape
        assert td["pioneer", "logits"].shape == (*shape, 18)
        assert td["pioneer", "state_value"].shape == ((1, 1) if B is None else shape)  # as the reward, per conversation
        assert (td["observer", "action"] == BAD).all()
        rewards = episode_rewards(env, TensorDictSequential(actor, other), "pioneer", episodes=5, seed=1)
        assert rewards.shape == (5,) and ((0 <= rewards) & (rewards <= 1)).all()
    with pytest.raises(KeyError, match="not a group"):
        token_actor(env, "llm_0")
    with pytest.raises(ValueError, match="outside the vocabulary"):
        fixed_token_policy(env, "observer", 18)


def test_evaluation_prompts_follow_the_seed():
    env = PettingZooWrapper(env=toy_env(), use_mask=True, seed=0)
    queries = []
    for _ in range(2):
        episode_rewards(env, None, "pioneer", episodes=1, seed=5)
        queries.append(env.last_transcript["pioneer"]["query"])
    assert queries[0] == queries[1]


@pytest.mark.parametrize("role", ["pioneer", pytest.param("observer", marks=pytest.mark.ci)])
def test_example_ppo_raises_the_reward(role, tmp_path):
    """examples/train_torchrl.py, 2048 steps at seed 0: the reward per collected batch rises from chance (~0.06)."""
    out = tmp_path / "run"
    args = ["--role", role, "--frames", "2048", "--eval-episodes", "40", "--seed", "0", "--out", str(out)]
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "train_torchrl.py"), *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "mean reward over 40 episodes: before" in result.stdout
    metrics = pd.read_csv(out / "metrics.csv")
    assert len(metrics) == 2048 // 256 and metrics["timesteps"].iloc[-1] == 2048
    curve = metrics[f"{role}/task_reward_mean"].to_numpy()
    print(role, np.round(curve, 3))
    assert curve[:2].mean() < 0.2, curve
    assert curve[-2:].mean() > curve[:2].mean() + 0.3, curve
    assert (out / "task_reward.png").stat().st_size > 0 and (out / "policy.pt").exists()


def test_role_exchange_schedule_starts_at_the_first_played_episode():
    """TorchRL resets the environment while it builds the wrapper and in check_env_specs; those
    resets play nothing, so the first episode it plays has llm_0 as pioneer (issue 16, section 3)."""
    stack = RoleExchangeWrapper(CollectiveRewardWrapper(toy_env()), period=1)
    env = PettingZooWrapper(env=stack, use_mask=True, seed=0)
    check_env_specs(env)
    played_before = stack.episodes
    pioneers = []
    for _ in range(3):
        rollout = env.rollout(100, break_when_any_done=True)
        assert rollout["next", "done"].squeeze(-1)[-1]
        roles = {g: int(rollout["next", g, "info", "role"][-1, 0]) for g in env.group_map}
        pioneers.append(next(g for g, r in roles.items() if r == 0))
    assert stack.episodes == played_before + 3
    first = "llm_0" if played_before % 2 == 0 else "llm_1"
    second = "llm_1" if first == "llm_0" else "llm_0"
    assert pioneers == [first, second, first]
