"""The real embedded model playing the environment (converted once into the user cache)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from cory_agents.acting.actor import LMActor
from cory_env import CollectiveRewardWrapper, RoleExchangeWrapper, env
from cory_env.rewards.sentiment import vader_sentiment
from cory_env.tasks.sentiment import sentiment_prompts

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def embedded_model():
    from cory_env.models import load_causal_lm

    return load_causal_lm().eval()


def test_batched_greedy_episode_with_the_embedded_model(embedded_tokenizer, embedded_model):
    tokenizer = embedded_tokenizer
    game = RoleExchangeWrapper(
        CollectiveRewardWrapper(
            env(
                tokenizer=tokenizer,
                prompts=sentiment_prompts(tokenizer, source="rotten_tomatoes"),
                reward_fn=vader_sentiment,
                num_conversations=4,
                max_new_tokens=8,
            )
        )
    )
    actor = LMActor(embedded_model, do_sample=False)
    game.reset(seed=0)
    finals = {}
    for agent in game.agent_iter():
        obs, reward, term, trunc, info = game.last()
        if term:
            finals[agent] = info
            game.step(None)
        else:
            game.step(actor.act(agent, obs))
    assert set(finals) == {"llm_0", "llm_1"}
    for info in finals.values():
        assert all(text.strip() for text in info["response"])  # decoded texts are non-empty
        assert np.all(np.abs(info["task_reward"]) <= 1.0)

    # Greedy decoding through the environment (KV cache, left padding) is what
    # `generate` produces for the same prompts.
    raw = game.unwrapped
    enc = tokenizer(raw.queries, return_tensors="pt", padding=True, padding_side="left")
    with torch.no_grad():
        out = embedded_model.generate(**enc, max_new_tokens=8, do_sample=False)
    expected = tokenizer.batch_decode(out[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
    assert raw.responses["pioneer"] == expected


def test_registered_environment_defaults_to_the_embedded_sentiment_task(embedded_tokenizer):
    import pettingzoo

    import cory_env

    game = pettingzoo.make("aec", cory_env.ENV_ID, num_conversations=2, max_new_tokens=2)
    game.reset(seed=0)
    raw = game.unwrapped
    assert raw.vocab_size == len(embedded_tokenizer) == 49152
    assert all(2 <= len(embedded_tokenizer(q)["input_ids"]) <= 9 for q in raw.queries)  # review prefixes
    assert raw.reward_fn.__name__ == "vader_sentiment"


@pytest.mark.slow
def test_ppo_at_the_default_settings_raises_the_embedded_models_sentiment(tmp_path):
    """The training defaults learn on the real model (docs/why-it-learns.md): single-agent PPO,
    30 iterations at seed 0, the task reward's last 3 iterations above its first 3 by 2 standard errors."""
    import pandas as pd

    from cory_agents.evaluation.statistics import reward_rise
    from cory_agents.training.config import TrainConfig
    from cory_agents.training.trainer import Trainer

    config = TrainConfig(
        algo="ppo", iterations=30, seed=0, out=str(tmp_path), report_to="none", save_model=False, checkpoint_every=100
    )
    Trainer(config).train(progress=False)
    metrics = pd.read_csv(tmp_path / "metrics.csv")
    rise = reward_rise(metrics["pioneer/task_reward_mean"], metrics["pioneer/task_reward_std"], config.batch_size)
    assert rise["z"] >= 2, (rise, metrics["pioneer/task_reward_mean"].round(3).tolist())


@pytest.mark.ci
@pytest.mark.parametrize("learner", ["happo", "difference", "mappo"])
def test_the_team_learners_train_the_embedded_model_from_the_command_line(tmp_path, learner):
    """cory-train --learner happo|difference|mappo end to end on the real model: two iterations, a few
    conversations, the metrics of every learner finite, each model exported (docs/multi-agent-algorithms.md
    trains them at the defaults)."""
    import json
    import subprocess

    import pandas as pd

    from tests.support.runs import cli, cli_env

    out = tmp_path / learner
    args = ["--learner", learner, "--iterations", "2", "--batch-size", "4", "--max-new-tokens", "6"]
    result = subprocess.run(
        cli(*args, "--report-to", "none", "--out", str(out)), env=cli_env(), capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    metrics = pd.read_csv(out / "metrics.csv")
    assert metrics["iteration"].tolist() == [0, 1]
    for name in ("llm_0", "llm_1"):
        columns = [f"{name}/{m}" for m in ("task_reward_mean", "kl", "policy_loss", "value_loss")]
        assert np.isfinite(metrics[columns].to_numpy()).all()
        assert json.loads((out / "model" / name / "config.json").read_text())["architectures"] == ["LlamaForCausalLM"]
    extra = {"happo": "happo_factor_mean", "difference": "difference_reward_mean"}.get(
        learner, "critic_explained_variance"
    )
    assert np.isfinite(metrics[[f"llm_0/{extra}", f"llm_1/{extra}"]].to_numpy()).all()
