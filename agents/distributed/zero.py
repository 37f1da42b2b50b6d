"""DeepSpeed ZeRO stage 1/2 for full fine-tuning under ``accelerate launch``.

Launched with an accelerate config that has ``distributed_type: DEEPSPEED`` and ``zero_stage:
1`` or ``2`` (examples/accelerate/deepspeed_zero2.yaml), the run is data parallel as with
``multi_gpu.yaml`` (:mod:`cory_agents.distributed.data_parallel`: each process plays its own conversations,
with the whole weights) but each process keeps only ``1/N`` of every learner's Adam state and
float32 master weights (stage 1), and of its averaged gradients (stage 2).

Each :class:`~cory_agents.learners.lm.LMLearner` wraps its own policy and optimizer in its own
DeepSpeed engine (:func:`engine`), built at its first backward pass (after the trainer has
made the weights equal everywhere). The learner keeps acting and scoring with the bare
module; only its backward pass and optimizer step go through the engine. The engine's
gradient accumulation is *unmanaged* (``managed_gradient_accumulation: false``): the learner
divides its loss by its own ``gradient_accumulation_steps`` and every engine ``step()`` is an
optimizer step, so a partial accumulation at the end of an update works as without DeepSpeed.
Clipping is the learner's ``max_grad_norm``; the weights and Adam state stay float32
(``--bf16`` autocasts the forward passes, as without DeepSpeed).

Checkpoints keep the single-process format: :func:`full_optimizer_state` gathers each
weight's partitioned Adam state into a whole tensor (a collective), and
:func:`load_optimizer_state` puts a whole state back into this process's partitions, so a
checkpoint written under ZeRO loads into a plain single-process learner and back.

Not supported (refused by :meth:`ZeROSettings.from_environment` or the trainer): stage 3
(use FSDP, examples/accelerate/fsdp.yaml), ``--lora``, optimizer or parameter offload, a
DeepSpeed JSON config file, and accelerate's own ``gradient_accumulation_steps`` and
``gradient_clipping`` (pass ``--gradient-accumulation-steps`` and ``--max-grad-norm`` to the
trainer).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn


@dataclass(frozen=True)
class ZeROSettings:
    """What the launcher's DeepSpeed config asks for (accelerate passes it in environment variables)."""

    stage: int = 2

    @classmethod
    def from_environment(cls) -> ZeROSettings | None:
        """The settings of an ``accelerate launch`` with a DeepSpeed config, or None without one."""
        if os.environ.get("ACCELERATE_USE_DEEPSPEED", "false").lower() not in ("1", "true", "yes"):
            return None
        if os.environ.get("ACCELERATE_DEEPSPEED_CONFIG_FILE"):
            raise ValueError(
                "a DeepSpeed config file (deepspeed_config_file) is not supported: the learners build their DeepSpeed "
                "config from the trainer's settings. Set zero_stage in the accelerate config instead (see "
                "examples/accelerate/deepspeed_zero2.yaml)"
            )
        stage = int(os.environ.get("ACCELERATE_DEEPSPEED_ZERO_STAGE", "2"))
        if stage == 3:
            raise ValueError(
                "DeepSpeed ZeRO stage 3 is not supported (acting token by token would gather the weights at every "
                "step): to shard the weights too, launch with examples/accelerate/fsdp.yaml (FSDP2); or set "
                "zero_stage: 2 (see docs/scale-out.md)"
            )
        if stage not in (1, 2):
            raise ValueError(
                f"DeepSpeed zero_stage must be 1 or 2, got {stage} (see examples/accelerate/deepspeed_zero2.yaml)"
            )
        for variable in ("ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE", "ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_DEVICE"):
            if os.environ.get(variable, "none").lower() not in ("none", ""):
                raise ValueError(
                    f"DeepSpeed offload ({variable.removeprefix('ACCELERATE_DEEPSPEED_').lower()}) is not supported: "
                    f"set offload_optimizer_device and offload_param_device to none"
                )
        if os.environ.get("ACCELERATE_GRADIENT_ACCUMULATION_STEPS", "1") not in ("1", ""):
            raise ValueError(
                "accelerate's gradient_accumulation_steps is not used: set it to 1 in the DeepSpeed config and pass "
                "--gradient-accumulation-steps to the trainer"
            )
        if os.environ.get("ACCELERATE_GRADIENT_CLIPPING", "none").lower() not in ("none", ""):
            raise ValueError(
                "accelerate's gradient_clipping is not used: remove it from the DeepSpeed config and pass "
                "--max-grad-norm to the trainer"
            )
        return cls(stage)


def engine(model: nn.Module, optimizer: torch.optim.Optimizer, settings: ZeROSettings, max_grad_norm: float | None):
    """A DeepSpeed engine over ``model`` whose ZeRO optimizer partitions ``optimizer`` (which it takes over).

    A collective: every process builds it at the same point. Returns the engine.
    """
    try:
        import deepspeed
    except ImportError as e:  # accelerate launch checks this first; a plain torchrun does not
        raise ImportError("DeepSpeed is not installed: pip install deepspeed (see docs/scale-out.md)") from e
    config = {
        "train_micro_batch_size_per_gpu": 1,  # for DeepSpeed's bookkeeping only: the learner makes the batches
        "gradient_accumulation_steps": 1,
        "managed_gradient_accumulation": False,  # every step() is an optimizer step (the learner accumulates)
        "gradient_clipping": float(max_grad_norm or 0.0),
        "zero_optimization": {"stage": settings.stage},
        "zero_allow_untested_optimizer": True,  # torch's AdamW: ZeRO runs it on its float32 partitions
        "steps_per_print": 2**62,
        "wall_clock_breakdown": False,
    }
    ds_engine, *_ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
    return ds_engine


def full_optimizer_state(ds_engine, params: list[nn.Parameter], param_groups: list[dict[str, Any]]) -> dict[str, Any]:
    """``torch.optim.AdamW.state_dict()`` of the whole optimizer, as one process would save it (a collective).

    ``params``: the weights in the optimizer's original order; ``param_groups``: its original
    ``state_dict()["param_groups"]`` (weights as indices).
    """
    from deepspeed.utils import safe_get_full_optimizer_state

    inner = ds_engine.optimizer.optimizer  # torch's AdamW over this process's float32 partitions
    steps = [s["step"] for s in inner.state.values() if "step" in s]
    state: dict[int, dict[str, torch.Tensor]] = {}
    for i, p in enumerate(params):
        moments = {k: safe_get_full_optimizer_state(p, k) for k in ("exp_avg", "exp_avg_sq")}
        if steps and all(v is not None for v in moments.values()):
            state[i] = {"step": steps[0].detach().clone(), **{k: v.detach().clone() for k, v in moments.items()}}
    return {"state": state, "param_groups": [dict(g) for g in param_groups]}


def load_optimizer_state(ds_engine, params: list[nn.Parameter], optimizer_state: dict[str, Any]) -> None:
    """Put a whole (single-process) AdamW state into this process's partitions (no communication)."""
    from deepspeed.utils import safe_set_full_optimizer_state

    saved = optimizer_state["state"]
    if not saved:
        return
    inner = ds_engine.optimizer.optimizer
    step = next(iter(saved.values()))["step"]
    for group in inner.param_groups:  # AdamW creates its state at its first step: create it now
        for flat in group["params"]:
            inner.state[flat] = {
                "step": step.detach().clone().to(flat.device if step.device.type != "cpu" else "cpu"),
                "exp_avg": torch.zeros_like(flat),
                "exp_avg_sq": torch.zeros_like(flat),
            }
    # Link each weight to its fragment of the new state (what ZeRO does after its first step).
    ds_engine.optimizer._lazy_init_hp_params_optimizer_state()
    for i, p in enumerate(params):
        if i in saved:
            for k in ("exp_avg", "exp_avg_sq"):
                safe_set_full_optimizer_state(p, saved[i][k].to(p.device), k)
