"""Stable-Baselines3's own PPO learns one role of the toy task through cory_env.RoleEnv."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import torch
from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_vec_env

import cory_env
from cory_agents.integrations.sb3 import (
    RolloutMetricsCallback,
    TokenEmbeddingExtractor,
    episode_rewards,
    token_policy_kwargs,
)
from cory_env.tasks.toy import TOY_PROMPTS, echo_last_word, fraction_good, toy_tokenizer
from tests.support import ROOT

BAD = 7  # toy token id of "bad"


def env_kwargs(role: str) -> dict:
    """The toy task for one role: the pioneer alone, the observer after a pioneer that says "bad",
    or ``observer_1``, the middle of a chain of three whose other agents say "bad" (its context is
    the observer's, so it learns as the observer does; observer_2 answers after it)."""
    chain = dict(num_agents=3, context_length=48) if role == "observer_1" else dict(context_length=32)
    return dict(
        role=role,
        other_policy=(lambda obs: BAD) if role != "pioneer" else None,
        tokenizer=toy_tokenizer(),
        prompts=TOY_PROMPTS,
        reward_fn=fraction_good,
        max_new_tokens=4,
        observer_template="{query} {response} {query}",
        render_mode=None,
        **chain,
    )


def test_extractor_features(tmp_path):
    e = cory_env.RoleEnv(**env_kwargs("observer"))
    extractor = TokenEmbeddingExtractor(e.observation_space, embedding_dim=8, features_dim=16)
    assert extractor.vocab_size == 18
    batch = [e.reset(seed=s)[0] for s in range(3)]
    obs = {k: torch.as_tensor(np.stack([b[k] for b in batch])).float() for k in batch[0]}
    features = extractor(obs)
    assert features.shape == (3, 16) and torch.isfinite(features).all()
    # Padding is ignored: changing a padded position's id does not change the features.
    padded = int(np.flatnonzero(batch[0]["attention_mask"] == 0)[0])
    obs["input_ids"][0, padded] = 9
    assert torch.allclose(extractor(obs), features)


def test_extractor_rejects_the_batched_form():
    batched = cory_env.env(
        tokenizer=toy_tokenizer(),
        prompts=TOY_PROMPTS,
        reward_fn=fraction_good,
        num_conversations=2,
        max_new_tokens=4,
        context_length=32,
    )
    with pytest.raises(ValueError, match="single-form"):
        TokenEmbeddingExtractor(batched.observation_space("pioneer"))


@pytest.mark.parametrize("role", ["pioneer", "observer", "observer_1"])
def test_ppo_raises_the_reward(role, tmp_path):
    """2048 PPO steps (~2 s): the mean reward on the same 200 evaluation prompts rises from ~0.07 to >0.5."""
    kwargs = env_kwargs(role)
    venv = make_vec_env(cory_env.ROLE_ENV_ID, n_envs=4, seed=0, env_kwargs=kwargs)
    eval_env = make_vec_env(cory_env.ROLE_ENV_ID, n_envs=4, env_kwargs=kwargs)
    model = PPO(
        "MultiInputPolicy",
        venv,
        n_steps=64,
        batch_size=64,
        n_epochs=4,
        learning_rate=3e-3,
        seed=0,
        policy_kwargs=token_policy_kwargs(embedding_dim=16, features_dim=32),
    )
    assert isinstance(model.policy.features_extractor, TokenEmbeddingExtractor)
    before = episode_rewards(model, eval_env, episodes=200, seed=123)
    model.learn(2048, callback=RolloutMetricsCallback(tmp_path, learner=role))
    after = episode_rewards(model, eval_env, episodes=200, seed=123)
    print(f"{role}: mean reward before {before.mean():.3f}, after {after.mean():.3f}")
    assert before.mean() < 0.2, before.mean()  # about 1/15: uniform over the words
    assert after.mean() > before.mean() + 0.4, (before.mean(), after.mean())
    # The callback logged one row per rollout (2048 / (4 envs x 64 steps)), with the rise in it.
    metrics = pd.read_csv(tmp_path / "metrics.csv")
    assert len(metrics) == 8 and metrics["timesteps"].iloc[-1] == 2048
    curve = metrics[f"{role}/task_reward_mean"].to_numpy()
    assert curve[-2:].mean() > curve[:2].mean() + 0.3, curve


def test_ppo_policy_reads_its_context():
    """Echo the query's last word: a policy blind to its observation scores at most 1/3."""
    kwargs = dict(env_kwargs("pioneer"), reward_fn=echo_last_word)
    venv = make_vec_env(cory_env.ROLE_ENV_ID, n_envs=4, seed=0, env_kwargs=kwargs)
    eval_env = make_vec_env(cory_env.ROLE_ENV_ID, n_envs=4, env_kwargs=kwargs)
    model = PPO(
        "MultiInputPolicy",
        venv,
        n_steps=64,
        batch_size=64,
        n_epochs=4,
        learning_rate=3e-3,
        seed=0,
        policy_kwargs=token_policy_kwargs(embedding_dim=16, features_dim=32),
    )
    before = episode_rewards(model, eval_env, episodes=300, seed=123)
    model.learn(4096)
    greedy = episode_rewards(model, eval_env, episodes=300, seed=123, deterministic=True)
    print(f"echo: mean reward before {before.mean():.3f}, after (greedy) {greedy.mean():.3f}")
    assert greedy.mean() > 0.6, (before.mean(), greedy.mean())


@pytest.mark.parametrize(
    "role", [["--role", "observer"], pytest.param(["--role", "observer_1", "--num-agents", "3"], marks=pytest.mark.ci)]
)
def test_example_runs(tmp_path, role):
    out = tmp_path / "run"
    args = ["--timesteps", "1024", "--eval-episodes", "40", *role, "--out", str(out)]
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "train_sb3.py"), *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr
    assert "mean reward over 40 episodes: before" in result.stdout
    assert (out / "task_reward.png").stat().st_size > 0 and (out / "model.zip").exists()
    PPO.load(out / "model.zip")


def test_example_names_a_position_outside_the_chain():
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "train_sb3.py"), "--role", "observer_1"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "got 'observer_1' (a position of a longer chain: give --num-agents N)" in result.stderr
