"""The PPO-LLM agent: acts token by token in the environment, then learns from the episode.

One iteration for a learner, as in TRL 0.7's ``PPOTrainer.step`` (which CORY's authors used):

1. rollout: the learner acts with its KV cache (:class:`~cory_agents.acting.actor.LMActor`);
   its final observation holds prompt + response, its info the reward per conversation;
2. scoring: one forward pass of the policy (log-probs, values) and of the frozen
   reference (log-probs) over the whole context; per-token KL; per-token rewards
   ``-kl_coef * KL_t`` plus the (collective) task reward at the last token;
3. GAE advantages (whitened), then ``ppo_epochs`` passes over shuffled minibatches of
   the clipped policy loss plus ``vf_coef`` times the clipped value loss;
4. the KL controller adapts to the KL just measured.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch
from trl.trainer.utils import entropy_from_logits, selective_log_softmax

from cory_agents.algorithms.advantages import explained_variance, gae, gae_over_turns, masked_mean
from cory_agents.algorithms.kl import token_rewards
from cory_agents.algorithms.losses import policy_loss, value_loss
from cory_agents.distributed.data_parallel import DataParallel
from cory_agents.learners.base import Episode
from cory_agents.learners.lm import LMLearner, LMLearnerConfig, flag, response_inputs
from cory_agents.learners.value_model import CausalLMWithValueHead
from cory_env.errors import UsageError


@dataclass(kw_only=True)
class PPOConfig(LMLearnerConfig):
    """PPO's settings (``--learner ppo``): the shared ones (learning rate, minibatches, clipping, KL
    controller, ...) are :class:`LMLearnerConfig`'s. Each field is a flag of ``cory-train`` with
    the same name and default (the CORY paper's IMDB column, scaled for a CPU)."""

    _argument_group_name: ClassVar[str] = "Learner ppo: PPO with a value head and GAE"

    value_lr: float = flag(0.0, "ppo: Adam learning rate of the value head (0: --lr)")
    gamma: float = flag(1.0, "ppo: discount")
    lam: float = flag(0.95, "ppo: GAE lambda")
    cliprange_value: float = flag(0.2, "ppo: value clip range")
    vf_coef: float = flag(0.1, "ppo: value loss coefficient")
    whiten_advantages: bool = flag(True, "ppo: normalise the advantages over the batch")
    score_scaling: bool = flag(False, "ppo: scale task scores by their running std")
    score_norm: bool = flag(False, "ppo: also subtract the running mean of scores (with --score-scaling)")
    score_clip: float | None = flag(None, "ppo: clip task scores to [-c, c] after scaling (default: no clip)")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.value_lr < 0:
            raise UsageError(f"--value-lr must be positive (or 0: the same as --lr), got {self.value_lr}")
        for name, meaning in (("gamma", "the discount, 1: none"), ("lam", "GAE's lambda, e.g. 0.95")):
            value = getattr(self, name)
            if not 0 <= value <= 1:  # NaN fails too
                raise UsageError(f"--{name} must be a number from 0 to 1 ({meaning}), got {value}")
        if not (math.isfinite(self.cliprange_value) and self.cliprange_value > 0):
            raise UsageError(f"--cliprange-value must be a number above 0 (e.g. 0.2), got {self.cliprange_value}")
        if not (math.isfinite(self.vf_coef) and self.vf_coef >= 0):
            raise UsageError(f"--vf-coef must be a number at least 0 (the value loss's weight), got {self.vf_coef}")


class RunningMoments:
    """Running mean and std of scores (Chan et al.'s parallel update), for score scaling."""

    def __init__(self) -> None:
        self.mean, self.var, self.count = 0.0, 1.0, 1e-24

    def update(self, x: np.ndarray) -> None:
        n, m, v = len(x), float(np.mean(x)), float(np.var(x))
        delta, total = m - self.mean, self.count + n
        self.var = (self.var * self.count + v * n + delta**2 * self.count * n / total) / total
        self.mean += delta * n / total
        self.count = total

    @property
    def std(self) -> float:
        return float(np.sqrt(self.var * self.count / max(self.count - 1, 1)))

    def state_dict(self) -> dict[str, float]:
        return {"mean": self.mean, "var": self.var, "count": self.count}

    def load_state_dict(self, state: dict[str, float]) -> None:
        self.mean, self.var, self.count = state["mean"], state["var"], state["count"]


class UpdatePasses:
    """The forward passes of one PPO update, in order: a no-grad scoring pass over the batch
    (the "old" log-probs and values), then ``ppo_epochs`` passes over shuffled minibatches with
    gradients. :mod:`cory_agents.speed.scoring_reuse` schedules the same passes with one fewer."""

    def score(
        self, learner: PPOLearner, ids: torch.Tensor, attn: torch.Tensor, T: int, turns: int = 1
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The acting policy's logits and values of the batch (of ``turns`` turns per conversation), detached,
        in the batch's order."""
        learner.model.eval()
        with torch.no_grad():
            return learner._forward(ids, attn, T)

    def minibatches(
        self,
        learner: PPOLearner,
        ids: torch.Tensor,
        attn: torch.Tensor,
        T: int,
        epochs: int | None = None,
        turns: int = 1,
    ) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        """``(indices, logits, values)`` of each minibatch, with gradients: ``epochs`` (default
        ``ppo_epochs``) passes over the batch, each in a new shuffled order (a conversation's ``turns``
        together: ``LMLearner._epoch_order``)."""
        epochs = learner.config.ppo_epochs if epochs is None else epochs
        for idx in learner._minibatch_indices(ids.shape[0], epochs, turns):
            yield (idx, *learner._forward(ids[idx], attn[idx], T))


class PPOLearner(LMLearner):
    """A learning agent: policy + value head, optimizer, KL controller, score statistics.

    Args:
        model: the trainable :class:`CausalLMWithValueHead`.
        reference: the frozen reference causal LM (may be shared between learners).
        config: :class:`PPOConfig`.
        seed: seeds this learner's token sampling (on the model's device) and minibatch shuffling.
        sampling: keyword arguments for :class:`LMActor` (do_sample, temperature, top_k, top_p).
        data_parallel: the processes of a data-parallel run (:mod:`cory_agents.distributed.data_parallel`): gradients,
            score statistics, advantage whitening, the KL controller and the returned statistics
            are then computed over all of them. Default: a single process.
    """

    def __init__(
        self,
        model: CausalLMWithValueHead,
        reference: torch.nn.Module,
        config: PPOConfig,
        seed: int = 0,
        sampling: dict[str, Any] | None = None,
        data_parallel: DataParallel | None = None,
    ):
        params: list[Any] = model.trainable_parameters()
        if config.value_lr:  # the critic's linear head learns at its own rate
            head = {id(p) for p in model.v_head.parameters()}
            params = [
                {"params": [p for p in params if id(p) not in head]},
                {"params": list(model.v_head.parameters()), "lr": config.value_lr},
            ]
        super().__init__(
            model,
            reference,
            config,
            acting_model=model.lm,
            params=params,
            kl_coef=config.kl_coef,
            seed=seed,
            sampling=sampling,
            data_parallel=data_parallel,
        )
        self.score_moments = RunningMoments()
        #: The forward passes of an update; a run may swap in a faster schedule of the same
        #: passes (:mod:`cory_agents.speed.scoring_reuse`, on unless ``--no-reuse-scoring-pass``).
        self.passes = UpdatePasses()

    # ------------------------------------------------------------------ scoring
    def _process_scores(self, scores: np.ndarray) -> torch.Tensor:
        c = self.config
        if c.score_scaling:
            self.score_moments.update(self.data_parallel.gather(scores))  # the same statistics everywhere
            scores = scores - self.score_moments.mean if c.score_norm else scores
            scores = scores / (self.score_moments.std + 1e-8)
        if c.score_clip is not None:
            scores = np.clip(scores, -c.score_clip, c.score_clip)
        return torch.tensor(scores, dtype=torch.float32, device=self.device)

    def _forward(self, ids: torch.Tensor, mask: torch.Tensor, T: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Float32 logits ``(B, T, V)`` predicting the response tokens, and their values ``(B, T)``."""
        with self._autocast():
            logits, values = self.model(**response_inputs(ids, mask, T))
        return logits.float(), values.float()

    @torch.no_grad()
    def _score(
        self,
        logits: torch.Tensor,
        values: torch.Tensor,
        ref_logits: torch.Tensor,
        response: torch.Tensor,
        response_mask: torch.Tensor,
    ) -> dict[str, torch.Tensor]:
        """Old log-probs and values of the acting policy, and the per-token KL to the reference."""
        return {
            **self._kl_terms(logits, ref_logits, response, response_mask, self.config.kl_estimator),
            "values": values,
        }

    # ------------------------------------------------------------------ learning
    def learn(
        self,
        ep: Episode,
        advantage_weights: torch.Tensor | np.ndarray | None = None,
        *,
        advantages: torch.Tensor | np.ndarray | Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
        returns: torch.Tensor | np.ndarray | None = None,
        whiten: bool | None = None,
    ) -> dict[str, float]:
        """One PPO update on one batched episode; returns the iteration's statistics.

        ``advantage_weights`` (``(rows,)``, non-negative: one per conversation, or over several rounds one per
        row, turn-major): each row's advantages are multiplied by its weight after whitening: a team learner's (HAPPO's factor, :mod:`cory_agents.learners.happo`).

        ``advantages`` (``(rows, T)`` over the response tokens, as the episode's rows): a team learner's
        (MAPPO's GAE from a shared critic), used instead of this learner's own GAE, whitened likewise
        (``whiten_advantages``); padding is ignored. It may be a function of this learner's per-token
        rewards, ``advantages(rewards, mask)`` (both ``(rows, T)``: ``-kl_coef * KL_t`` plus the score at
        each answer's last token, what its own GAE would read; ``mask`` 1 on response tokens), called once
        after the scoring pass, for a team critic that needs the KL penalty. ``returns`` (same shape),
        given with them, are the targets of this learner's value head; without them its value head is
        left out of the update (no value loss): the team's critic replaces it.

        ``whiten``: whether the advantages are whitened over the batch (default: ``whiten_advantages``); ``False``
        keeps a team's shared advantage as it is given (the same for every agent of a conversation). The KL
        penalty is this learner's either way: it is in the per-token ``rewards`` a callable ``advantages``
        receives (``-kl_coef * KL_t``; the score sits at each answer's last token), which a team adds to its own
        estimate to keep each member near its reference."""
        c = self.config
        B, T = ep.input_ids.shape[0], ep.response_width
        if B % c.mini_batch(B):
            raise ValueError(f"the batch of {B} conversations is not divisible by mini_batch_size={c.mini_batch(B)}")
        self._refuse_non_finite_inputs(scores=ep.scores)  # before a forward pass, and before the moments take them in
        ids, attn = ep.input_ids.to(self.device), ep.attention_mask.to(self.device)
        response, mask = ids[:, -T:], attn[:, -T:].float()

        # 1. Score: the acting policy's log-probs and values, the frozen reference's log-probs, per-token KL.
        ref_logits = self._reference_logits(ids, attn, T)
        old_logits, old_values = self.passes.score(self, ids, attn, T, ep.turns)
        s = self._score(old_logits, old_values, ref_logits, response, mask)
        del old_logits, ref_logits

        # 2. Rewards per token: -kl_coef * KL_t, plus the (collective) task score at the last token.
        scores = self._process_scores(ep.scores)
        kl_coef = self.kl_ctl.value
        rewards = token_rewards(scores, s["kl"], mask, kl_coef)

        # 3. Advantages: GAE over the response (over an agent's turns, across them), or the team's,
        # whitened over the batch (and the processes).
        own_critic = advantages is None
        if callable(advantages):  # the team's estimate, from the rewards this learner's GAE would read
            advantages = advantages(rewards.clone(), mask)
        if advantages is not None:
            advantages = self._given(advantages, mask, "advantages")
            returns = None if returns is None else self._given(returns, mask, "returns")
        elif returns is not None:
            raise ValueError("returns are the targets of given advantages: pass advantages with them")
        elif ep.turns == 1:
            advantages, returns = gae(rewards, s["values"], mask, c.gamma, c.lam)
        else:
            advantages, returns = gae_over_turns(rewards, s["values"], mask, ep.turns, c.gamma, c.lam)
        if c.whiten_advantages if whiten is None else whiten:
            advantages = self.data_parallel.whiten(advantages, mask)
        if advantage_weights is not None:
            weights = torch.as_tensor(advantage_weights, dtype=advantages.dtype, device=self.device)
            advantages = advantages * weights[:, None]
        checked = {"advantages": advantages} if returns is None else {"advantages": advantages, "returns": returns}
        self._refuse_non_finite_inputs(**checked)  # what every minibatch's loss reads

        # 4. Epochs x shuffled minibatches: clipped policy loss + vf_coef x clipped value loss.
        def minibatch_loss(idx: torch.Tensor, logits: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, dict]:
            new_logprobs = selective_log_softmax(logits, response[idx])
            m = mask[idx]
            pg_loss, pg_stats = policy_loss(new_logprobs, s["logprobs"][idx], advantages[idx], m, c.cliprange)
            if returns is None:  # a team's critic in place of this learner's value head
                vf_loss = torch.zeros((), device=pg_loss.device)
            else:
                vf_loss, _ = value_loss(values, s["values"][idx], returns[idx], m, c.cliprange_value)
            with torch.no_grad():
                stats = {
                    "policy_loss": pg_loss.item(),
                    "value_loss": vf_loss.item(),
                    "entropy": masked_mean(entropy_from_logits(logits), m).item(),
                    "clipfrac": float(pg_stats["clipfrac"]),
                    "approx_kl": float(pg_stats["approx_kl"]),
                }
            return pg_loss + c.vf_coef * vf_loss, stats

        stats = self._update(self.passes.minibatches(self, ids, attn, T, turns=ep.turns), minibatch_loss)

        # 5. The KL controller adapts to the KL just measured; the statistics, over all processes.
        if returns is not None and own_critic:
            stats = {"explained_variance": float(explained_variance(s["values"], returns, mask)), **stats}
        elif returns is not None:
            stats = {"value_head_explained_variance": float(explained_variance(s["values"], returns, mask)), **stats}
        return self._statistics(ep, s, mask, kl_coef, stats)

    def _given(self, values: torch.Tensor | np.ndarray, mask: torch.Tensor, name: str) -> torch.Tensor:
        """A team learner's ``(rows, T)`` per-token values on this device, zero at padding, checked."""
        given = torch.as_tensor(values, dtype=torch.float32, device=self.device)
        if given.shape != mask.shape:
            raise ValueError(
                f"{name} must have one value per response token of the episode, shape {tuple(mask.shape)}, "
                f"got {tuple(given.shape)}"
            )
        return given * mask

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "score_moments": self.score_moments.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.score_moments.load_state_dict(state["score_moments"])
