"""A team learner hands its members advantages (and returns): PPO and GRPO learn from them as from their own."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from cory_agents.algorithms.advantages import gae, group_advantages
from cory_agents.algorithms.kl import token_rewards
from cory_agents.learners.base import Episode
from cory_agents.learners.grpo import GRPOConfig, GRPOLearner
from cory_agents.learners.ppo import PPOConfig, PPOLearner
from cory_agents.learners.value_model import CausalLMWithValueHead
from cory_env.models import load_causal_lm

B, W, T = 4, 9, 5


def episode() -> Episode:
    torch.manual_seed(0)
    ids = torch.randint(3, 18, (B, W))
    mask = torch.ones(B, W, dtype=torch.long)
    mask[0, :3] = 0  # left padding
    mask[1, -2:] = 0  # a response that ended early
    scores = np.array([1.0, 0.0, 0.5, 0.2])
    return Episode(ids, mask, T, scores=scores, task_rewards=scores.copy())


def ppo(toy_model, **settings) -> PPOLearner:
    reference = load_causal_lm(str(toy_model)).requires_grad_(False)
    torch.manual_seed(1)
    config = PPOConfig(**{"mini_batch_size": 2, "ppo_epochs": 2, "lr": 1e-3, **settings})
    return PPOLearner(CausalLMWithValueHead(load_causal_lm(str(toy_model))), reference, config, seed=3)


def own_gae(learner: PPOLearner, ep: Episode) -> tuple[torch.Tensor, torch.Tensor]:
    """The advantages and returns the learner computes itself (PPO's steps 1-3, before whitening)."""
    ids, attn = ep.input_ids, ep.attention_mask
    response, mask = ids[:, -T:], attn[:, -T:].float()
    ref_logits = learner._reference_logits(ids, attn, T)
    old_logits, old_values = learner.passes.score(learner, ids, attn, T)
    s = learner._score(old_logits, old_values, ref_logits, response, mask)
    rewards = token_rewards(learner._process_scores(ep.scores), s["kl"], mask, learner.kl_ctl.value)
    return gae(rewards, s["values"], mask, learner.config.gamma, learner.config.lam)


def test_ppo_given_its_own_advantages_and_returns_makes_the_same_update(toy_model):
    ep = episode()
    alone, told = ppo(toy_model), ppo(toy_model)
    advantages, returns = own_gae(told, ep)
    stats_alone = alone.learn(ep)
    stats_told = told.learn(ep, advantages=advantages, returns=returns)
    for name, weight in alone.trainable_state_dict().items():
        assert torch.equal(weight, told.trainable_state_dict()[name]), name
    assert stats_told["policy_loss"] == stats_alone["policy_loss"]
    assert stats_told["value_loss"] == stats_alone["value_loss"]


def test_ppo_given_advantages_without_returns_leaves_its_value_head_alone(toy_model):
    ep = episode()
    learner = ppo(toy_model)
    before = learner.trainable_state_dict()
    advantages = torch.zeros(B, T)
    advantages[:, 0] = torch.tensor([1.0, -1.0, 2.0, -2.0])  # only the first token of each answer matters
    stats = learner.learn(ep, advantages=advantages)
    after = learner.trainable_state_dict()
    head = [n for n in after if n.startswith("v_head.")]
    assert head and all(torch.equal(after[n], before[n]) for n in head)
    assert any(not torch.equal(after[n], before[n]) for n in after if n.startswith("lm."))
    assert stats["value_loss"] == 0.0 and "explained_variance" not in stats


def test_ppo_refuses_given_values_of_the_wrong_shape_or_returns_alone(toy_model):
    learner, ep = ppo(toy_model), episode()
    with pytest.raises(ValueError, match=r"advantages must have one value per response token.*\(4, 5\)"):
        learner.learn(ep, advantages=torch.zeros(B, T + 1))
    with pytest.raises(ValueError, match="pass advantages with them"):
        learner.learn(ep, returns=torch.zeros(B, T))


def grpo(toy_model, section: type[GRPOConfig] = GRPOConfig, **settings) -> GRPOLearner:
    reference = load_causal_lm(str(toy_model)).requires_grad_(False)
    torch.manual_seed(1)
    config = section(**{"mini_batch_size": 2, "ppo_epochs": 2, "lr": 1e-3, "group_size": 2, **settings})
    return GRPOLearner(load_causal_lm(str(toy_model)), reference, config, seed=3)


def test_ppo_keeps_a_shared_advantage_as_given_when_told_not_to_whiten(toy_model):
    ep = episode()
    advantages, returns = own_gae(ppo(toy_model), ep)
    unwhitened, whitened = ppo(toy_model), ppo(toy_model)
    reference = ppo(toy_model, whiten_advantages=False)  # the same learner, configured never to whiten
    assert unwhitened.config.whiten_advantages  # the default whitens
    unwhitened.learn(ep, advantages=advantages, returns=returns, whiten=False)
    whitened.learn(ep, advantages=advantages, returns=returns)
    reference.learn(ep, advantages=advantages, returns=returns)
    weights = [learner.trainable_state_dict() for learner in (unwhitened, whitened, reference)]
    assert all(torch.equal(weights[0][name], weights[2][name]) for name in weights[0])
    assert not all(torch.equal(weights[0][name], weights[1][name]) for name in weights[0])


def test_grpo_applies_its_own_reward_kl_penalty_to_given_advantages(toy_model):
    """rloo's KL is in the reward: given advantages ``a``, it learns from ``a - kl_coef * sum_t KL_t``, as a learner
    without a KL penalty given those."""
    from cory_agents.learners.grpo import RLOOConfig

    ep = episode()
    penalised, told = grpo(toy_model, RLOOConfig, kl_coef=0.5), grpo(toy_model, RLOOConfig, kl_coef=0.0)
    for learner in (penalised, told):  # a KL to learn from: the reference is not the policy
        with torch.no_grad():
            learner.reference.model.embed_tokens.weight.mul_(0.5)
    kl_sum = penalised._score_episode(ep)["kl"].sum(-1)
    assert float(kl_sum.abs().max()) > 0
    advantages = torch.tensor([1.0, -1.0, 0.5, -0.5])
    penalised.learn(ep, advantages=advantages)
    told.learn(ep, advantages=advantages - 0.5 * kl_sum)
    for name, weight in penalised.trainable_state_dict().items():
        torch.testing.assert_close(weight, told.trainable_state_dict()[name], rtol=0, atol=1e-7)


def test_grpo_given_its_group_advantages_makes_the_same_update(toy_model):
    ep = episode()
    ep.queries = ["a", "a", "b", "b"]
    alone, told = grpo(toy_model), grpo(toy_model)
    config = told.config
    assert config.kl_penalty != "reward"  # its advantages are then the scores' alone
    advantages = group_advantages(torch.tensor(ep.scores, dtype=torch.float32), 2, config.advantage, config.std_eps)
    alone.learn(ep)
    told.learn(ep, advantages=advantages)
    for name, weight in alone.trainable_state_dict().items():
        assert torch.equal(weight, told.trainable_state_dict()[name]), name
    with pytest.raises(ValueError, match=r"one value per row of the episode .*, shape \(4,\)"):
        told.learn(ep, advantages=torch.zeros(B, T))


def test_ppo_given_a_function_reads_the_rewards_its_own_gae_would_read(toy_model):
    ep = episode()
    alone, told = ppo(toy_model), ppo(toy_model)
    ids, attn = ep.input_ids, ep.attention_mask
    mask = attn[:, -T:].float()
    s = told._score(*told.passes.score(told, ids, attn, T), told._reference_logits(ids, attn, T), ids[:, -T:], mask)
    expected_rewards = token_rewards(told._process_scores(ep.scores), s["kl"], mask, told.kl_ctl.value)
    seen = []

    def estimate(rewards: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
        seen.append((rewards, response_mask))
        return gae(rewards, s["values"], response_mask, told.config.gamma, told.config.lam)[0]

    returns = gae(expected_rewards, s["values"], mask, told.config.gamma, told.config.lam)[1]
    alone.learn(ep)
    told.learn(ep, advantages=estimate, returns=returns)
    assert len(seen) == 1
    assert torch.equal(seen[0][0], expected_rewards) and torch.equal(seen[0][1], mask)
    for name, weight in alone.trainable_state_dict().items():
        assert torch.equal(weight, told.trainable_state_dict()[name]), name
