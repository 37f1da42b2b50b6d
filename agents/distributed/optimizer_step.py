"""A learner's backward pass and optimizer step, whatever the run's distribution: one small interface.

A learner builds its optimizer, then hands it to :func:`optimizer_steps`, which picks how the
run steps it:

- :class:`OptimizerSteps`: a single process, data parallel (gradients averaged over the processes
  first) or FSDP (sharded weights, whose gradient norm ``clip_grad_norm_`` reduces). With the
  fused AdamW kernel the clipping coefficient is applied as the kernel reads each gradient
  (``grad_scale``) instead of in a pass of its own;
- :class:`ZeROSteps`: DeepSpeed ZeRO-1/2 (:mod:`cory_agents.distributed.zero`): the engine is built at
  the first backward pass (after the trainer made the weights equal everywhere) and then owns the
  optimizer's partitioned state; a checkpoint still holds the single-process format.

Both give: ``backward(loss)`` (``loss`` already divided by the accumulated minibatches),
``step()`` (clip, step, zero the gradients), ``grad_norms()`` (this update's norms before
clipping), ``state_dict()`` / ``load_state_dict()`` (the optimizer state as one process saves
it), ``weights_loaded(params)`` (weights were overwritten outside the optimizer), and
``params`` (what the optimizer updates).

**No NaN reaches the weights.** Before each optimizer step, ``step()`` checks that every loss
backpropagated since the last step and the gradient norm are finite; if one is not, it raises
:class:`~cory_env.errors.NonFiniteUpdateError` (the message is the learner's:
:attr:`OptimizerSteps.non_finite`) without stepping, so no weight and no optimizer state changes
(the gradients are zeroed, except under ZeRO, whose engine holds them). The norm is the one the clipping computes anyway (with ``max_grad_norm=0`` one pass over
the gradients computes it for the check alone); the losses are kept as tensors and read with the
norm, one device synchronisation per optimizer step. In a data-parallel run every process takes
the same decision: the gradients and so their norm are the same everywhere after averaging (FSDP:
the norm is reduced over the shards), and the "some loss was not finite" flag, which is each
process's own, is reduced with one small all-reduce. Under ZeRO the losses are checked (and reduced)
before the engine's step; the engine computes the gradient norm of its partitions inside its step
and, for float32 weights, skips the step when that norm is not finite (DeepSpeed 0.19's ZeRO
stage 1/2 optimizer), which ``step()`` then reports the same way.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from cory_agents.distributed.data_parallel import DataParallel
from cory_agents.distributed.fsdp import is_sharded
from cory_env.errors import NonFiniteUpdateError


def non_finite_update(quantity: str, value: str) -> NonFiniteUpdateError:
    """The error of an update whose ``quantity`` (``"loss"``, ``"gradient norm"``) was ``value`` (NaN,
    inf), for an optimizer that no learner named (:attr:`OptimizerSteps.non_finite`)."""
    return NonFiniteUpdateError(
        f"an update's {quantity} was {value}, so the optimizer did not step and no weight changed: "
        f"try a lower learning rate or gradient clipping, and check that the rewards are finite numbers",
        quantity=quantity,
    )


def optimizer_steps(
    model: nn.Module, optimizer: torch.optim.Optimizer, data_parallel: DataParallel, max_grad_norm: float | None
) -> OptimizerSteps:
    """How ``model``'s ``optimizer`` steps in this run: :class:`ZeROSteps` under DeepSpeed ZeRO,
    else :class:`OptimizerSteps`."""
    cls = ZeROSteps if data_parallel.zero is not None else OptimizerSteps
    return cls(model, optimizer, data_parallel, max_grad_norm)


class OptimizerSteps:
    """Backward and optimizer steps in one process, data parallel or under FSDP."""

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        data_parallel: DataParallel,
        max_grad_norm: float | None,
    ):
        self.model, self.optimizer, self.data_parallel = model, optimizer, data_parallel
        self.max_grad_norm = max_grad_norm
        self.params = [p for group in optimizer.param_groups for p in group["params"]]
        # Clipping inside the fused kernel, which divides each gradient by the optimizer's
        # `grad_scale` as it reads it (the hook torch.amp.GradScaler uses), saves a pass over all
        # gradients per step. Sharded (FSDP) gradients keep clip_grad_norm_, which reduces their norm.
        fused = bool(optimizer.defaults.get("fused"))
        self.clip_in_step = fused and not data_parallel.sharded
        self._norms: list[torch.Tensor] = []
        self._losses: list[torch.Tensor] = []  # backpropagated since the last step, detached
        #: ``non_finite(quantity, value)``: the error :meth:`step` raises when ``quantity`` (``"loss"`` or
        #: ``"gradient norm"``) was ``value``; a learner sets its own, whose message names it.
        self.non_finite: Callable[[str, str], NonFiniteUpdateError] = non_finite_update

    def backward(self, loss: torch.Tensor) -> None:
        self._losses.append(loss.detach())
        loss.backward()

    def step(self) -> None:
        """Average the gradients over processes, clip them, step, zero them; raise
        :class:`~cory_env.errors.NonFiniteUpdateError` instead of stepping if a loss since the last
        step or the gradient norm is not finite (the module docstring)."""
        self.data_parallel.average_gradients(self.params)
        max_norm = self.max_grad_norm
        if max_norm is not None and self.clip_in_step:  # clip_grad_norm_'s coefficient, as a divisor
            norm = self._total_norm()
            self._refuse_non_finite(norm)
            self.optimizer.grad_scale = torch.clamp((norm + 1e-6) / max_norm, min=1.0)
            self._norms.append(norm.detach())
        elif max_norm is not None:
            norm = torch.nn.utils.clip_grad_norm_(self.params, max_norm)
            norm = norm.full_tensor() if is_sharded(norm) else norm.detach()
            self._refuse_non_finite(norm)
            self._norms.append(norm)
        else:  # no clipping: the norm for the check alone
            self._refuse_non_finite(self._total_norm())
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def _total_norm(self) -> torch.Tensor:
        """The gradients' total 2-norm (over every shard under FSDP: a collective), as ``clip_grad_norm_`` computes it."""
        norm = torch.nn.utils.get_total_norm([p.grad for p in self.params if p.grad is not None])
        return norm.full_tensor() if is_sharded(norm) else norm.detach()

    def _refuse_non_finite(self, norm: torch.Tensor | None) -> None:
        """Raise :attr:`non_finite`'s error if a loss since the last step (on any process) or ``norm``
        (the same on every process) is not finite, the gradients zeroed; ``norm=None`` (ZeRO, before the
        engine's step): the losses only, the engine's gradients left as they are."""
        losses, self._losses = self._losses, []
        device = norm.device if norm is not None else losses[0].device if losses else torch.device("cpu")
        bad_loss = (
            ~torch.isfinite(torch.stack([loss.float() for loss in losses]).to(device)).all()
            if losses
            else torch.zeros((), dtype=torch.bool, device=device)
        )
        bad_norm = ~torch.isfinite(norm) if norm is not None else torch.zeros((), dtype=torch.bool, device=device)
        flags = torch.stack([bad_loss, bad_norm]).float()
        if self.data_parallel.is_distributed:  # every process decides alike: a loss is each process's own
            flags = flags.to(self.data_parallel.device)
            torch.distributed.all_reduce(flags, op=torch.distributed.ReduceOp.MAX)
        any_bad_loss, any_bad_norm = flags.tolist()  # the one synchronisation
        if not (any_bad_loss or any_bad_norm):
            return
        if norm is not None:  # not under ZeRO, whose engine holds the reduced gradients (the run ends)
            self.optimizer.zero_grad(set_to_none=True)
        if any_bad_loss:
            mine = [float(loss) for loss in losses if not math.isfinite(float(loss))]
            raise self.non_finite("loss", str(mine[0]) if mine else "NaN or infinite on another process")
        raise self.non_finite("gradient norm", str(float(norm)))

    def grad_norms(self) -> list[torch.Tensor]:
        """The gradient norms before clipping of the steps since the last call (none without clipping)."""
        norms, self._norms = self._norms, []
        return norms

    def state_dict(self) -> dict[str, Any]:
        return self.optimizer.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state)

    def weights_loaded(self, params: list[nn.Parameter]) -> None:
        """``params`` were overwritten (a checkpoint): nothing else holds a copy of them here."""


class ZeROSteps(OptimizerSteps):
    """Backward and optimizer steps through this learner's own DeepSpeed ZeRO-1/2 engine."""

    def __init__(self, *args: Any):
        super().__init__(*args)
        self.engine = None
        self._param_groups = self.optimizer.state_dict()["param_groups"]
        self._pending_state: dict[str, Any] | None = None  # a checkpoint loaded before the engine existed

    def backward(self, loss: torch.Tensor) -> None:
        """``loss.backward()`` through the engine, which reduces the gradients into this process's partition."""
        if self.engine is None:
            from cory_agents.distributed.zero import engine, load_optimizer_state

            self.engine = engine(self.model, self.optimizer, self.data_parallel.zero, self.max_grad_norm)
            if self._pending_state is not None:
                load_optimizer_state(self.engine, self.params, self._pending_state)
                self._pending_state = None
        self._losses.append(loss.detach())
        self.engine.backward(loss, scale_wrt_gas=False)

    def step(self) -> None:
        """The engine's step: clip, step and gather the weights, on this process's partition; raise
        :class:`~cory_env.errors.NonFiniteUpdateError` instead if a loss since the last step was not
        finite (checked before the engine's step) or the engine skipped its step for a gradient norm
        that was not (the module docstring)."""
        if self.engine is None:  # no backward pass yet, so no engine: nothing to reduce
            super().step()
            return
        self._refuse_non_finite(None)
        self.engine.step()
        norm = self.engine.get_global_grad_norm()  # None when the engine does not clip
        if not self.engine.was_step_applied() or (norm is not None and not math.isfinite(float(norm))):
            raise self.non_finite("gradient norm", str(float(norm)) if norm is not None else "not finite")
        if norm is not None:
            self._norms.append(torch.as_tensor(float(norm)))

    def state_dict(self) -> dict[str, Any]:
        """Gathered whole from the partitions (a collective): the single-process format."""
        if self.engine is not None:
            from cory_agents.distributed.zero import full_optimizer_state

            return full_optimizer_state(self.engine, self.params, self._param_groups)
        return self._pending_state if self._pending_state is not None else self.optimizer.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.engine is None:  # put into the engine's partitions when it is built
            self._pending_state = state
            return
        from cory_agents.distributed.zero import load_optimizer_state

        load_optimizer_state(self.engine, self.params, state)

    def weights_loaded(self, params: list[nn.Parameter]) -> None:
        """ZeRO's float32 master copy (this process's partition) follows the overwritten weights."""
        if self.engine is None:
            return
        from deepspeed.utils import safe_set_full_fp32_param

        for p in params:
            safe_set_full_fp32_param(p, p.detach().float())
