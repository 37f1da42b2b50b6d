"""What the language-model learners (PPO, GRPO/RLOO) share: acting, the optimizer, the KL
controller, gradient averaging over processes, reference scoring and checkpoints.

A subclass passes its policy module and the causal LM inside it that acts, and implements
:meth:`~cory_agents.learners.base.Learner.learn`. :class:`LMLearner` then provides the rest of the
:class:`~cory_agents.learners.base.Learner` interface:

* ``act``: one incremental forward pass per token step (:class:`~cory_agents.acting.actor.LMActor`,
  KV cache), sampling with this learner's own generator;
* ``_update``: the epochs x shuffled minibatches x gradient accumulation loop of an update, to
  which a subclass's ``learn`` gives its minibatches and its loss;
* ``optimizer``: AdamW over the trainable weights only (a LoRA adapter and not its shared
  base), the fused kernel where the device has it; a subclass's ``learn`` calls
  :meth:`_backward` for each (accumulation-scaled) loss and :meth:`_optimizer_step` at each
  accumulation boundary, which the run's :mod:`~cory_agents.distributed.optimizer_step` carries out
  (in one process, data parallel, FSDP or DeepSpeed ZeRO alike: the learner does not know which);
* no NaN reaches the weights: a subclass's ``learn`` checks what every loss of its update reads
  (the scores, the advantages: :meth:`_refuse_non_finite_inputs`) before its first optimizer step,
  and before each optimizer step the losses since the last one and the gradient norm are checked;
  one that is not finite raises :class:`~cory_env.errors.NonFiniteUpdateError` instead of stepping
  (that step changes no weight and no optimizer state). Its message names the learner (``name``,
  which the run sets), the iteration (``updates + 1``: ``updates`` counts the completed ``_update``
  loops), the quantity and what to try. Every process of a run takes the same decision;
* ``kl_ctl``: a fixed or adaptive (Ziegler et al., 2019) KL coefficient;
* ``state_dict``/``load_state_dict``: the trainable weights by name, the optimizer, the
  controller, both random generators and the count of updates, so a resumed run continues exactly
  (the optimizer state in the single-process format, whatever the run's distribution).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn
from trl.trainer.utils import selective_log_softmax

from cory_agents.acting.actor import LMActor, generate_positions
from cory_agents.algorithms.kl import ESTIMATORS, AdaptiveKLController, FixedKLController, kl_per_token
from cory_agents.distributed.data_parallel import DataParallel
from cory_agents.distributed.optimizer_step import optimizer_steps
from cory_agents.learners.base import Episode, load_weights, reward_metrics
from cory_env.errors import NonFiniteUpdateError, UsageError


def predicting_columns(width: int, T: int, device: torch.device | str | None = None) -> torch.Tensor:
    """The columns of a ``width``-wide context whose logits predict its last ``T`` tokens: ``W-T-1 .. W-2``.

    Passed as ``logits_to_keep``, the LM head runs on exactly these (not on the last column too,
    whose prediction follows the response), and on a contiguous copy of their hidden states.
    """
    return torch.arange(width - T - 1, width - 1, device=device)


def response_inputs(input_ids: torch.Tensor, attention_mask: torch.Tensor, T: int) -> dict[str, Any]:
    """Keyword arguments of a forward pass whose outputs ``(B, T, ...)`` predict the last ``T`` tokens
    (the response) of ``(B, W)`` left-padded contexts: positions count real tokens only (as
    ``generate``), ``logits_to_keep`` the :func:`predicting_columns`. A model made padding-free
    (:mod:`cory_agents.speed.padding_free`, at build time) packs such a call itself."""
    columns = predicting_columns(input_ids.shape[1], T, input_ids.device)
    return dict(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=generate_positions(attention_mask),
        logits_to_keep=columns,
    )


def response_logits(lm: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor, T: int) -> torch.Tensor:
    """Logits ``(B, T, V)`` that predicted the last ``T`` tokens (the response), left padding handled."""
    return lm(**response_inputs(input_ids, attention_mask, T), use_cache=False).logits


def flag(default: Any, help: str, **kw: Any) -> Any:
    """A config field that is a command-line flag: its default and its ``--help`` text
    (``kw``: more of HfArgumentParser's keywords, such as ``choices``)."""
    return field(default=default, metadata={"help": help, **kw})


#: ``mini_batch_size``'s default, when it divides the batch.
MINI_BATCH_SIZE = 16


def default_mini_batch_size(batch_size: int) -> int:
    """``mini_batch_size`` when it is not given: 16, or the largest divisor of the batch below it.

    >>> default_mini_batch_size(32), default_mini_batch_size(4), default_mini_batch_size(24)
    (16, 4, 12)
    """
    return next(m for m in range(min(MINI_BATCH_SIZE, batch_size), 0, -1) if batch_size % m == 0)


@dataclass(kw_only=True)
class LMLearnerConfig:
    """The settings every language-model learner shares (:class:`~cory_agents.learners.ppo.PPOConfig` and
    :class:`~cory_agents.learners.grpo.GRPOConfig` add their own). Keyword arguments only.

    Each field is also a flag of ``cory-train`` under the same name, with the same default: the
    command line's learner section is this config (:mod:`cory_agents.training.config`).
    """

    _argument_group_name: ClassVar[str] = "Learner: the update of each agent"

    lr: float = flag(3e-5, "Adam learning rate")
    mini_batch_size: int | None = flag(
        None, "conversations per gradient step (default: 16, or the largest divisor of --batch-size below it)"
    )
    gradient_accumulation_steps: int = flag(1, "minibatches per optimizer step")
    ppo_epochs: int = flag(1, "passes over each batch (PPO epochs; grpo/rloo: num_iterations, mu)")
    cliprange: float = flag(0.2, "policy ratio clip range (epsilon)")
    kl_coef: float = flag(
        0.05,
        "KL coefficient eta (initial value if adaptive); grpo: beta of the k3 loss term, rloo: of the summed KL in the reward",
    )
    adaptive_kl: bool = flag(False, "adapt the KL coefficient towards --target-kl (Ziegler et al. 2019)")
    target_kl: float = flag(6.0, "target KL (summed over the response) of the adaptive controller")
    kl_horizon: int = flag(10000, "horizon of the adaptive KL controller")
    kl_estimator: str = flag(
        "k1",
        "per-token KL in the reward: k1 (sampled token), abs, mse, k3, full (whole distribution); grpo's loss term is k3",
        choices=list(ESTIMATORS),
    )
    max_grad_norm: float = flag(1.0, "gradient clipping norm (0: off)")
    weight_decay: float = flag(0.0, "AdamW weight decay")
    bf16: bool = flag(False, "bfloat16 autocast for forward passes (float32 weights and optimizer)")

    def __post_init__(self) -> None:
        if self.kl_estimator not in ESTIMATORS:
            raise UsageError(f"kl_estimator must be one of {ESTIMATORS}, got {self.kl_estimator!r}")
        for name in ("mini_batch_size", "gradient_accumulation_steps", "ppo_epochs"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise UsageError(f"--{name.replace('_', '-')} must be at least 1, got {value}")
        if self.max_grad_norm < 0:
            raise UsageError(f"--max-grad-norm must be positive (or 0: no clipping), got {self.max_grad_norm}")
        if not (math.isfinite(self.cliprange) and self.cliprange > 0):
            raise UsageError(
                f"--cliprange must be a number above 0 (the policy ratio's clip range epsilon, e.g. 0.2), got {self.cliprange}"
            )

    def mini_batch(self, batch_size: int) -> int:
        """Conversations per gradient step for a batch of ``batch_size``: ``mini_batch_size``, or its default."""
        return self.mini_batch_size or default_mini_batch_size(batch_size)


class LMLearner:
    """Base of the learners that act with a causal LM and train it against a frozen reference.

    Args:
        model: the trainable policy module (what ``learn`` runs forward; checkpoints name
            the weights after its parameters).
        reference: the frozen reference causal LM (may be shared between learners).
        config: the algorithm's settings; read here: ``lr``, ``weight_decay``,
            ``adaptive_kl``, ``target_kl``, ``kl_horizon``, ``max_grad_norm``, ``bf16``.
        acting_model: the causal LM that acts (``model`` itself, or the LM inside it).
        params: the weights the optimizer updates: a list, or optimizer parameter groups (dicts with
            ``params`` and, optionally, their own ``lr``).
        kl_coef: the KL coefficient (initial value, if adaptive).
        seed: seeds this learner's token sampling (on the model's device) and minibatch shuffling.
        sampling: keyword arguments for :class:`LMActor` (do_sample, temperature, top_k, top_p).
        data_parallel: the processes of a data-parallel run (:mod:`cory_agents.distributed.data_parallel`).
            Default: a single process.
    """

    def __init__(
        self,
        model: nn.Module,
        reference: nn.Module,
        config: Any,
        *,
        acting_model: nn.Module,
        params: list[nn.Parameter] | list[dict[str, Any]],
        kl_coef: float,
        seed: int = 0,
        sampling: dict[str, Any] | None = None,
        data_parallel: DataParallel | None = None,
    ):
        self.model = model
        self.data_parallel = data_parallel or DataParallel()
        self.reference = reference.eval()  # frozen by whoever built it (it may share weights)
        self.config = config
        self.generator = torch.Generator().manual_seed(seed)  # minibatch shuffling, on the CPU
        self.sampling_generator = torch.Generator(self.device).manual_seed(seed)
        self.actor = LMActor(acting_model, generator=self.sampling_generator, bf16=config.bf16, **(sampling or {}))
        # The fused kernel: one pass over the weights per step instead of several (faster on a CPU; docs/benchmarks.md times the steps).
        groups = params if params and isinstance(params[0], dict) else [{"params": params}]
        fused = all(p.is_floating_point() and p.device.type in ("cpu", "cuda") for g in groups for p in g["params"])
        self.optimizer = torch.optim.AdamW(groups, lr=config.lr, weight_decay=config.weight_decay, fused=fused or None)
        #: How the optimizer steps in this run (one process, data parallel, FSDP or ZeRO).
        self.steps = optimizer_steps(model, self.optimizer, self.data_parallel, config.max_grad_norm or None)
        self.steps.non_finite = self._non_finite_update
        #: This learner's name in the run (``llm_0``, ``pioneer``: the run sets it when it builds the
        #: learner), for its messages.
        self.name = "the learner"
        #: The updates this learner has completed (saved in its checkpoint): the run's iterations so far,
        #: as every learner learns once an iteration.
        self.updates = 0
        self._steps_taken = 0  # optimizer steps of the update under way
        self.kl_ctl = (
            AdaptiveKLController(kl_coef, config.target_kl, config.kl_horizon)
            if config.adaptive_kl
            else FixedKLController(kl_coef)
        )
        self.model.eval()

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def _autocast(self) -> torch.autocast:
        return torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.config.bf16)

    def act(self, agent: str, observation: dict[str, np.ndarray]) -> np.ndarray | int:
        # The model is in eval mode outside learn(): no per-token mode switch on this hot path.
        return self.actor.act(agent, observation)

    # ------------------------------------------------------------------ scoring
    @torch.no_grad()
    def _reference_logits(self, ids: torch.Tensor, mask: torch.Tensor, T: int) -> torch.Tensor:
        """Float32 reference logits ``(B, T, V)`` that predicted the response tokens."""
        with self._autocast():
            return response_logits(self.reference, ids, mask, T).float()

    @staticmethod
    @torch.no_grad()
    def _kl_terms(
        logits: torch.Tensor,
        ref_logits: torch.Tensor,
        response: torch.Tensor,
        response_mask: torch.Tensor,
        estimator: str,
    ) -> dict[str, torch.Tensor]:
        """Log-probs of the response under the policy and the reference, the per-token KL of the
        penalty's ``estimator`` (``kl``) and the exact KL (``kl_exact``, what the paper plots,
        logged whatever the estimator), both zero after each response's end."""
        logprobs = selective_log_softmax(logits, response)
        ref_logprobs = selective_log_softmax(ref_logits, response)
        exact = kl_per_token(logprobs, ref_logprobs, "full", logits=logits, ref_logits=ref_logits)
        kl = exact if estimator == "full" else kl_per_token(logprobs, ref_logprobs, estimator)
        return {
            "logprobs": logprobs,
            "ref_logprobs": ref_logprobs,
            "kl_exact": exact * response_mask,
            "kl": kl * response_mask,
        }

    @torch.no_grad()
    def kl_to_reference(self, ep: Episode) -> np.ndarray:
        """Exact KL to the reference summed over each response, ``(B,)``: per conversation, the
        quantity whose batch mean ``learn`` logs as ``kl`` (used by :mod:`cory_agents.evaluation.held_out`)."""
        T = ep.response_width
        ids, mask = ep.input_ids.to(self.device), ep.attention_mask.to(self.device)
        self.model.eval()
        with self._autocast():
            logits = response_logits(self.actor.model, ids, mask, T).float()
        terms = self._kl_terms(logits, self._reference_logits(ids, mask, T), ids[:, -T:], mask[:, -T:].float(), "full")
        return terms["kl_exact"].sum(-1).cpu().numpy().astype(np.float64)

    @torch.no_grad()
    def response_logprobs(self, ep: Episode) -> torch.Tensor:
        """``(B,)`` the log-probability of each response under the current policy (its tokens' log-probs
        summed), on this learner's device: the likelihood whose ratio before/after an update is the
        policy's change on that conversation (:mod:`cory_agents.learners.happo`)."""
        T = ep.response_width
        ids, mask = ep.input_ids.to(self.device), ep.attention_mask.to(self.device)
        self.model.eval()
        with self._autocast():
            logits = response_logits(self.actor.model, ids, mask, T).float()
        return (selective_log_softmax(logits, ids[:, -T:]) * mask[:, -T:]).sum(-1)

    # ------------------------------------------------------------------ updates
    def _minibatch_indices(self, batch_size: int, epochs: int, turns: int = 1) -> Iterator[torch.Tensor]:
        """Each minibatch's row indices over ``epochs`` passes, each in a new order (:meth:`_epoch_order`)."""
        size = self.config.mini_batch(batch_size)
        for _ in range(epochs):
            yield from (idx.to(self.device) for idx in self._epoch_order(batch_size, turns).split(size))

    def _epoch_order(self, batch_size: int, turns: int = 1) -> torch.Tensor:
        """One epoch's order of a batch's rows, from this learner's generator. Over several ``turns`` (rows
        turn-major: row ``r * B + b`` is conversation ``b``'s turn ``r``) the conversations are shuffled, each
        keeping its turns together, so a minibatch of a multiple of ``turns`` rows holds whole conversations: a
        carried context's earlier turn starts its later turns' contexts, and a padding-free pass runs it once
        for all of them. A minibatch size that ``turns`` does not divide shuffles the rows one by one."""
        if turns == 1 or self.config.mini_batch(batch_size) % turns:
            return torch.randperm(batch_size, generator=self.generator)
        order = torch.randperm(batch_size // turns, generator=self.generator)
        return (order[:, None] + batch_size // turns * torch.arange(turns)).reshape(-1)

    def _update(
        self, minibatches: Iterable[tuple[Any, ...]], loss: Callable[..., tuple[torch.Tensor, dict[str, float]]]
    ) -> dict[str, float]:
        """The loop of an update that PPO and GRPO share; each brings its own ``loss``.

        For each minibatch (the tuple ``minibatches`` yields, with gradients), ``loss(*minibatch)``
        gives the loss and that minibatch's statistics; the loss, divided by
        ``gradient_accumulation_steps``, is backpropagated, and every
        ``gradient_accumulation_steps`` minibatches (and once for a partial accumulation left
        over at the end) the optimizer steps. The model trains during the loop and is back in
        eval mode, to act, after it. Returns each statistic's mean over the minibatches.
        """
        accumulation = self.config.gradient_accumulation_steps
        self.model.train()
        stats: dict[str, list[float]] = {}
        done = self._steps_taken = 0
        self.optimizer.zero_grad(set_to_none=True)
        try:
            for minibatch in minibatches:
                total, values = loss(*minibatch)
                del minibatch  # its logits go with the graph, before the next minibatch's forward pass
                self._backward(total / accumulation)
                done += 1
                if done % accumulation == 0:
                    self._optimizer_step()
                for name, value in values.items():
                    stats.setdefault(name, []).append(value)
                del total
            if done % accumulation:  # a partial accumulation left over
                self._optimizer_step()
        finally:
            self.model.eval()  # back to acting (after a NonFiniteUpdateError too)
            self._steps_taken = 0
        self.updates += 1
        return {name: float(np.mean(values)) for name, values in stats.items()}

    def _backward(self, loss: torch.Tensor) -> None:
        """``loss.backward()`` as the run does it (``loss`` already divided by the number of
        accumulated minibatches)."""
        self.steps.backward(loss)

    def _optimizer_step(self) -> None:
        """Average the gradients over processes, clip them, step, zero them (:mod:`cory_agents.distributed.optimizer_step`);
        raise :class:`~cory_env.errors.NonFiniteUpdateError` instead of stepping if a loss since the last step or the
        gradient norm is not finite."""
        self.steps.step()
        self._steps_taken += 1

    def _refuse_non_finite_inputs(self, **inputs: torch.Tensor | np.ndarray) -> None:
        """Raise :class:`~cory_env.errors.NonFiniteUpdateError` before this update's first optimizer step if one of
        ``inputs`` (``(B, ...)``, one row per conversation: the scores, the advantages, ...) holds a NaN or an
        infinity in float32 (a score of 1e300 is one). Every process takes the same decision (one all-reduce), so
        none goes on to a collective the others left."""
        counts = {}
        for name, values in inputs.items():
            values = torch.as_tensor(values).to(torch.float32)
            counts[name] = (~torch.isfinite(values.reshape(values.shape[0], -1))).any(1).sum()
        mine = dict(zip(counts, torch.stack(list(counts.values())).tolist()))  # one synchronisation
        everyone = self.data_parallel.sum(mine)
        for name, total in everyone.items():
            if total:
                rows = len(next(iter(inputs.values())))
                where = f"on {int(mine[name])} of {rows} conversations" if mine[name] else "on another process"
                raise self._non_finite_update(name, f"not finite in float32 (NaN, or past ±3.4e38) {where}")

    def _non_finite_update(self, quantity: str, value: str) -> NonFiniteUpdateError:
        """The error of this learner's update whose ``quantity`` (``loss``, ``gradient norm``: checked at each
        optimizer step; ``scores``, ``advantages``, ...: before the first) was ``value``."""
        c, iteration, taken = self.config, self.updates + 1, self._steps_taken
        stopped = (
            "before its first optimizer step, so no weight changed"
            if not taken
            else f"before its optimizer step {taken + 1} (the {taken} before it stand, finite)"
        )
        clip = (
            f"a lower --max-grad-norm (now {c.max_grad_norm:g})" if c.max_grad_norm else "--max-grad-norm 1 (now off)"
        )
        reward = "check that the reward function returns finite numbers of a moderate size"
        advice = (
            f"Try a lower --lr (now {c.lr:g}) or {clip}, and {reward}"
            if quantity in ("loss", "gradient norm")
            else reward[0].upper() + reward[1:]
        )
        verb = "were" if quantity.endswith("s") else "was"
        return NonFiniteUpdateError(
            f"{self.name}'s update in iteration {iteration} was stopped {stopped}: its {quantity} {verb} {value}. "
            f"{advice}",
            learner=self.name,
            iteration=iteration,
            quantity=quantity,
        )

    def _statistics(
        self, ep: Episode, scored: dict[str, torch.Tensor], mask: torch.Tensor, kl_coef: float, stats: dict[str, float]
    ) -> dict[str, float]:
        """The end of every update: the statistics (the paper's KL: per-token KL summed over the response,
        batch mean; the response length; ``stats``; the gradient norm) averaged over the processes, the KL
        controller adapted to the KL just measured (``scored["kl"]``, the penalty's estimator), and the
        reward metrics (:func:`~cory_agents.learners.base.reward_metrics`) over every process's conversations."""
        dp = self.data_parallel
        means = dp.mean(
            {
                "kl": float(scored["kl_exact"].sum(-1).mean()) * ep.turns,  # per conversation: its turns summed
                "kl_penalty": float(scored["kl"].sum(-1).mean()),
                "response_length": float(mask.sum(-1).mean()),
                **stats,
                **self._grad_norm_stats(),
            }
        )
        kl_sum = means.pop("kl")
        self.kl_ctl.update(means.pop("kl_penalty"), mask.shape[0] * dp.num_processes)
        if dp.is_distributed:
            gathered = dict(scores=dp.gather(ep.scores), task_rewards=dp.gather(ep.task_rewards))
            if ep.turns > 1:  # every process's conversations, turn by turn
                turn_scores = ep.scores.reshape(ep.turns, -1)
                gathered["scores"] = np.concatenate([dp.gather(row) for row in turn_scores])
                if "turn_task_rewards" in ep.extra:
                    rows = ep.extra["turn_task_rewards"]
                    gathered["extra"] = {**ep.extra, "turn_task_rewards": np.stack([dp.gather(r) for r in rows])}
            ep = dataclasses.replace(ep, **gathered)
        return {**reward_metrics(ep, kl_sum, kl_coef), **means}

    def _grad_norm_stats(self) -> dict[str, float]:
        """``grad_norm``: the mean over this update's optimizer steps of the gradient norm before
        clipping (computed for the clipping anyway: absent with ``max_grad_norm=0``)."""
        norms = self.steps.grad_norms()
        return {"grad_norm": float(torch.stack(norms).float().mean())} if norms else {}  # one device sync

    # ------------------------------------------------------------------ checkpoints
    def trainable_state_dict(self) -> dict[str, torch.Tensor]:
        """The weights this learner trains (not a shared frozen base), by parameter name."""
        trainable = {id(p) for p in self.steps.params}
        return {n: p.detach().clone() for n, p in self.model.named_parameters() if id(p) in trainable}

    def load_trainable_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        load_weights(self.model, state, self.trainable_state_dict(), self.steps)

    def state_dict(self) -> dict[str, Any]:
        return {
            "model": self.trainable_state_dict(),
            "optimizer": self.steps.state_dict(),
            "kl_ctl": self.kl_ctl.state_dict(),
            "generator": self.generator.get_state(),
            "sampling_generator": self.sampling_generator.get_state(),
            "updates": self.updates,
            "config": asdict(self.config),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.load_trainable_state_dict(state["model"])
        self.steps.load_state_dict(state["optimizer"])
        self.kl_ctl.load_state_dict(state["kl_ctl"])
        self.generator.set_state(state["generator"])
        self.sampling_generator.set_state(state["sampling_generator"])
        self.updates = int(state.get("updates", 0))  # 0 from a checkpoint written before the count
