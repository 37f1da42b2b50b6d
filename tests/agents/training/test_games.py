"""Learning in games of several rounds: an agent's episode over its turns, and PPO across them."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from cory_agents.learners.base import Episode, reward_metrics
from cory_agents.training.trainer import Trainer
from cory_env.context import PlayedTurn
from tests.support.runs import PROMPTS, rise_over_seeds, toy_config
from tests.support.toy import fraction_good


def played(round: int, prompt: list[list[int]], response: list[list[int]], task: list[float], reward: list[float]):
    """A PlayedTurn of two conversations laid out as the environment does: prompts left-padded to the
    longest, responses right-padded to the longest (token ids; 0 is padding)."""
    P, T = max(map(len, prompt)), max(map(len, response))
    ids, mask = np.zeros((2, P + T), dtype=np.int64), np.zeros((2, P + T), dtype=np.int64)
    for b, (p, r) in enumerate(zip(prompt, response)):
        ids[b, P - len(p) : P] = p
        ids[b, P : P + len(r)] = r
        mask[b, P - len(p) : P + len(r)] = 1
    return PlayedTurn(
        round, 0, ids, mask, T, np.array([len(r) for r in response]), np.array(task), np.array(reward, dtype=float)
    )


def test_an_episode_of_two_turns_is_turn_major_with_common_widths():
    first = played(0, [[5], [6, 7]], [[8, 9, 10], [11]], task=[0.5, 0.0], reward=[0.0, 0.0])
    second = played(1, [[1, 2, 3, 4], [2]], [[12], [13, 14]], task=[1.0, 0.25], reward=[3.0, 1.0])
    ep = Episode.from_turns([first, second], {"query": ["a", "b"]})
    assert ep.turns == 2 and ep.num_conversations == 2 and ep.response_width == 3
    assert ep.input_ids.shape == (4, 4 + 3)  # the longest prompt (4) and the longest response (3)
    # Row r * B + b is conversation b's turn r: its prompt right-aligned before column 4, its response after.
    assert ep.input_ids[0].tolist() == [0, 0, 0, 5, 8, 9, 10]
    assert ep.attention_mask[1].tolist() == [0, 0, 1, 1, 1, 0, 0]
    assert ep.input_ids[2].tolist() == [1, 2, 3, 4, 12, 0, 0]
    assert ep.attention_mask[3].tolist() == [0, 0, 0, 1, 1, 1, 0]
    assert ep.scores.tolist() == [0.0, 0.0, 3.0, 1.0]
    assert ep.conversation_scores().tolist() == [3.0, 1.0]
    assert ep.task_rewards.tolist() == [1.5, 0.25]  # the turns' own scores summed
    metrics = reward_metrics(ep, kl=2.0, kl_coef=0.1)
    assert metrics["reward_mean"] == 2.0 and metrics["task_reward_mean"] == 0.875
    assert metrics["final_turn_task_reward_mean"] == 0.625 and metrics["kl_per_turn"] == 1.0


@pytest.mark.parametrize(
    "turn_rewards", [pytest.param(False, marks=pytest.mark.ci), True], ids=["episode-rewards", "turn-rewards"]
)
def test_cory_over_two_rounds_raises_the_reward_of_both_learners(toy_model, tmp_path, turn_rewards):
    def train(seed, folder):
        config = toy_config(
            toy_model,
            folder,
            algo="cory",
            rounds=2,
            turn_rewards=turn_rewards,
            iterations=12,
            role_exchange_period=2,
            kl_coef=0.0,
            seed=seed,
            save_model=False,
            context_length=64,
        )
        Trainer(config, prompts=PROMPTS, reward_fn=fraction_good).train(progress=False)

    rises = rise_over_seeds(train, tmp_path, ["llm_0", "llm_1"])
    assert all(rise > 0.1 for rise in rises.values()), rises
    metrics = pd.read_csv(tmp_path / "seed0" / "metrics.csv")
    for learner in ("llm_0", "llm_1"):  # two turns each: the sum of both, and the last alone
        total, last = metrics[f"{learner}/task_reward_mean"], metrics[f"{learner}/final_turn_task_reward_mean"]
        assert (total >= last - 1e-12).all() and (total <= 2.0).all()
        assert torch.isfinite(torch.tensor(metrics[f"{learner}/kl_per_turn"].to_numpy())).all()
