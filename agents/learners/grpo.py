"""A critic-free group-relative learner: GRPO (Shao et al., 2024) or RLOO (Ahmadian et al., 2024).

No value head and no GAE: the batch holds ``group_size`` responses to each prompt
(the trainer repeats each prompt, :func:`cory_env.prompts.repeat_each`), and a
response's advantage is its sequence-level reward relative to its group's
(:func:`cory_agents.algorithms.advantages.group_advantages`), the same at every token of the response.
Under CORY the reward is the collective one and groups are formed by query: the observers
of a group answer the same query, each after its own pioneer's response.

One iteration for a learner:

1. rollout: the learner acts with its KV cache (:class:`~cory_agents.acting.actor.LMActor`);
2. scoring: one forward pass of the policy (log-probs of the sampled tokens) and of the
   frozen reference over prompt + response; the exact KL to the reference (logged, as PPO);
3. advantages per group of ``group_size`` conversations: ``grpo`` normalises by the
   group's mean and std, ``rloo`` subtracts the mean of the other responses;
4. ``ppo_epochs`` passes over shuffled minibatches of the clipped ratio loss (PPO's,
   :func:`cory_agents.algorithms.losses.policy_loss`, token-level mean) plus the KL term below.

The KL to the reference, ``kl_coef`` (beta), is applied where the two reference trainers do:

- ``kl_penalty="loss"`` (:class:`GRPOConfig`, as the GRPO paper and TRL's ``GRPOTrainer``):
  ``+ beta * k3`` per token in the loss, ``k3 = q/p - 1 - log(q/p)`` of the current policy
  ``p`` to the reference ``q`` (non-negative, unbiased); the reward stays the task reward.
- ``kl_penalty="reward"`` (:class:`RLOOConfig`, as TRL's ``RLOOTrainer``): the sequence reward
  becomes ``r - beta * sum_t KL_t`` (``kl_estimator``, k1 by default) before the baseline.

Differences from TRL worth knowing: TRL's ``GRPOTrainer`` defaults to ``beta=0`` and
``num_iterations=1``, here ``kl_coef`` and ``ppo_epochs`` come from the run's flags;
TRL's ``RLOOTrainer`` clips a sequence-level ratio, here the ratio is per token for both.
An adaptive KL coefficient (Ziegler et al.) works as for PPO. Score scaling is not offered:
group normalisation already makes the advantages scale-free (``grpo``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn
from trl.trainer.utils import entropy_from_logits, selective_log_softmax

from cory_agents.algorithms.advantages import GROUP_BASELINES, group_advantages, masked_mean
from cory_agents.algorithms.kl import kl_per_token
from cory_agents.algorithms.losses import policy_loss
from cory_agents.distributed.data_parallel import DataParallel
from cory_agents.learners.base import Episode
from cory_agents.learners.lm import LMLearner, LMLearnerConfig, flag, response_logits
from cory_env.errors import UsageError

KL_PENALTIES = ("loss", "reward")


@dataclass(kw_only=True)
class GRPOConfig(LMLearnerConfig):
    """GRPO's settings (``--learner grpo``): group-normalised advantages, the KL as a k3 term in the
    loss. The shared ones (learning rate, minibatches, clipping, KL controller, ...) are
    :class:`LMLearnerConfig`'s; each field is a flag of ``cory-train`` with the same name and default."""

    _argument_group_name: ClassVar[str] = "Learner grpo/rloo: group-relative, no value head"
    #: How a response's advantage is read from its group (not a flag: it is what makes the learner GRPO).
    advantage: ClassVar[str] = "grpo"  # (r - group mean) / (group std + std_eps)
    #: Where the KL to the reference goes: ``loss`` (+ kl_coef * k3 per token) or ``reward``.
    kl_penalty: ClassVar[str] = "loss"

    group_size: int = flag(
        4, "grpo/rloo: responses per prompt, consecutive in the batch (--batch-size must be a multiple)"
    )
    std_eps: float = flag(1e-4, "grpo: added to the group's std before dividing, as TRL's")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.advantage not in GROUP_BASELINES or self.kl_penalty not in KL_PENALTIES:
            raise UsageError(
                f"{type(self).__name__}: advantage must be one of {GROUP_BASELINES} and kl_penalty one of "
                f"{KL_PENALTIES}, got {self.advantage!r} and {self.kl_penalty!r}"
            )
        if self.group_size < 2:
            raise UsageError(
                f"group_size must be at least 2 (responses per prompt to compare), got {self.group_size}: "
                f"pass --group-size 2 or more"
            )


@dataclass(kw_only=True)
class RLOOConfig(GRPOConfig):
    """RLOO's settings (``--learner rloo``): GRPO's, with a leave-one-out baseline (``r`` minus the
    mean of the group's other rewards) and the KL to the reference in the reward (``r - kl_coef *
    sum_t KL_t``), as TRL's ``RLOOTrainer``."""

    advantage: ClassVar[str] = "rloo"
    kl_penalty: ClassVar[str] = "reward"


class GRPOLearner(LMLearner):
    """A group-relative learning agent: policy (a causal LM, no value head), optimizer, KL controller.

    Args:
        model: the trainable causal LM (full weights, or an :class:`~cory_agents.training.adapters.AdapterView`).
        reference: the frozen reference causal LM (may be shared between learners).
        config: :class:`GRPOConfig`.
        seed: seeds this learner's token sampling (on the model's device) and minibatch shuffling.
        sampling: keyword arguments for :class:`LMActor` (do_sample, temperature, top_k, top_p).
        data_parallel: the processes of a data-parallel run (:mod:`cory_agents.distributed.data_parallel`): gradients
            are averaged over them, and the KL controller and returned statistics use all of them.
            Groups never span processes (each process plays whole groups), so advantages stay local.

    ``group_size`` tells the trainer to present each prompt that many times in a row.
    """

    def __init__(
        self,
        model: nn.Module,
        reference: nn.Module,
        config: GRPOConfig,
        seed: int = 0,
        sampling: dict[str, Any] | None = None,
        data_parallel: DataParallel | None = None,
    ):
        params = (
            model.trainable_parameters()
            if hasattr(model, "trainable_parameters")  # an AdapterView: its adapter only
            else [p for p in model.parameters() if p.requires_grad]
        )
        super().__init__(
            model,
            reference,
            config,
            acting_model=model,
            params=params,
            kl_coef=config.kl_coef,
            seed=seed,
            sampling=sampling,
            data_parallel=data_parallel,
        )
        self.group_size = config.group_size

    # ------------------------------------------------------------------ scoring
    def _check_groups(self, ep: Episode) -> None:
        B, G = ep.input_ids.shape[0], self.group_size
        if B % G:
            raise ValueError(f"the batch of {B} conversations does not split into groups of group_size={G}")
        if B % self.config.mini_batch(B):
            raise ValueError(
                f"the batch of {B} conversations is not divisible by mini_batch_size={self.config.mini_batch(B)}"
            )
        for start in range(0, len(ep.queries), G):
            if len(set(ep.queries[start : start + G])) > 1:
                raise ValueError(
                    f"conversations {start}..{start + G - 1} should be {G} responses to one query, got queries "
                    f"{ep.queries[start : start + G]}: present each prompt group_size times in a row "
                    f"(cory_env.prompts.repeat_each(prompts, {G}); the Trainer does it for a learner with group_size)"
                )

    @torch.no_grad()
    def _score_episode(self, ep: Episode) -> dict[str, torch.Tensor]:
        T, dev = ep.response_width, self.device
        ids, mask = ep.input_ids.to(dev), ep.attention_mask.to(dev)
        response, response_mask = ids[:, -T:], mask[:, -T:].float()
        with self._autocast():
            logits = response_logits(self.model, ids, mask, T).float()
        # The estimator of the penalty actually applied (what the adaptive controller tracks).
        estimator = "k3" if self.config.kl_penalty == "loss" else self.config.kl_estimator
        terms = self._kl_terms(logits, self._reference_logits(ids, mask, T), response, response_mask, estimator)
        return {"response": response, "response_mask": response_mask, **terms}

    # ------------------------------------------------------------------ learning
    def learn(self, ep: Episode, *, advantages: torch.Tensor | np.ndarray | None = None) -> dict[str, float]:
        """One group-relative update on one batched episode; returns the iteration's statistics.

        ``advantages`` (``(rows,)``, one per conversation, or over several rounds one per row, turn-major): a team
        learner's, used as they are instead of the group-relative ones (every token of a response gets its
        row's; no normalisation, so a shared advantage stays shared); the groups are then not required. This
        learner's KL term still applies, as it computes it: ``kl_penalty="loss"`` adds ``kl_coef * k3`` to the
        loss, ``"reward"`` subtracts ``kl_coef * sum_t KL_t`` of each row from its given advantage."""
        c = self.config
        if advantages is None:
            self._check_groups(ep)
        self._refuse_non_finite_inputs(scores=ep.scores)
        B, T = ep.input_ids.shape[0], ep.response_width
        s = self._score_episode(ep)
        mask = s["response_mask"]
        kl_coef = self.kl_ctl.value
        rewards = torch.tensor(ep.scores, dtype=torch.float32, device=self.device)
        if c.kl_penalty == "reward":
            rewards = rewards - kl_coef * s["kl"].sum(-1)
        if advantages is None:
            advantages = group_advantages(rewards, c.group_size, c.advantage, c.std_eps)
        else:
            advantages = torch.as_tensor(advantages, dtype=torch.float32, device=self.device)
            if advantages.shape != (B,):
                raise ValueError(
                    f"advantages must be one value per row of the episode (a conversation's turn), shape ({B},), "
                    f"got {tuple(advantages.shape)}"
                )
            if c.kl_penalty == "reward":  # this learner's own KL penalty, on the team's advantage
                advantages = advantages - kl_coef * s["kl"].sum(-1)
        self._refuse_non_finite_inputs(advantages=advantages)  # what every minibatch's loss reads
        token_advantages = advantages[:, None].expand(B, T)

        ids, attn = ep.input_ids.to(self.device), ep.attention_mask.to(self.device)

        def minibatches() -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
            for idx in self._minibatch_indices(B, c.ppo_epochs, ep.turns):
                with self._autocast():
                    logits = response_logits(self.model, ids[idx], attn[idx], T)
                yield idx, logits.float()

        def minibatch_loss(idx: torch.Tensor, logits: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
            new_logprobs = selective_log_softmax(logits, s["response"][idx])
            m = mask[idx]
            pg_loss, pg_stats = policy_loss(new_logprobs, s["logprobs"][idx], token_advantages[idx], m, c.cliprange)
            loss = pg_loss
            kl_loss = torch.zeros((), device=self.device)
            if c.kl_penalty == "loss":
                kl_loss = masked_mean(kl_per_token(new_logprobs, s["ref_logprobs"][idx], "k3"), m)
                loss = loss + kl_coef * kl_loss
            with torch.no_grad():
                stats = {
                    "policy_loss": pg_loss.item(),
                    "kl_loss": kl_loss.item(),
                    "entropy": masked_mean(entropy_from_logits(logits), m).item(),
                    "clipfrac": float(pg_stats["clipfrac"]),
                    "approx_kl": float(pg_stats["approx_kl"]),
                }
            return loss, stats

        stats = self._update(minibatches(), minibatch_loss)

        groups = rewards.view(-1, c.group_size)
        zero_std = float((groups.amax(1) == groups.amin(1)).float().mean())
        extra = {"advantage_abs_mean": float(advantages.abs().mean()), "frac_groups_zero_std": zero_std}
        return self._statistics(ep, s, mask, kl_coef, {**extra, **stats})
