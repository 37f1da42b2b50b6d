"""Fully sharded data parallel (PyTorch FSDP2) for full fine-tuning under ``accelerate launch``.

Launched with an accelerate config that has ``distributed_type: FSDP`` and ``fsdp_version: 2``
(examples/accelerate/fsdp.yaml), the run is data parallel as with ``multi_gpu.yaml``
(:mod:`cory_agents.distributed.data_parallel`: each process plays its own conversations) but each process keeps
only ``1/N`` of every learner's weights, gradients and Adam state, and of the frozen reference:
:func:`shard` applies ``torch.distributed.fsdp.fully_shard`` in place to each decoder layer and
then to the whole causal LM (and PPO's value head on its own). In the update, FSDP
all-gathers a layer's weights just before it runs and reduce-scatters (averages) the
gradients in ``backward()``, so the learners' own gradient all-reduce skips these parameters
(:meth:`cory_agents.distributed.data_parallel.DataParallel.average_gradients`). For a rollout the policies'
weights are gathered whole once (:func:`gathered`): each process plays its own number of
token steps, so acting must not be a collective.

Checkpoints keep the single-process format: :func:`full_state` gathers every sharded tensor
of a learner's state (weights and optimizer) into a whole CPU tensor, and :func:`shard_state`
cuts a loaded whole state back into this process's shards. A learner's state from a
checkpoint written under FSDP therefore loads into a plain single-process learner as it is.

Not supported (refused with a message by :meth:`FSDPSettings.from_environment` or the
trainer): ``--lora`` (adapters on one shared frozen base), FSDP version 1, parameter CPU
offload, accelerate's activation checkpointing (use ``--gradient-checkpointing``) and
``cpu_ram_efficient_loading`` (every process loads the whole model, then keeps its shard).
"""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

#: accelerate's ``fsdp_reshard_after_forward`` values (FSDP2 booleans, FSDP1 strategy names).
_RESHARD = {"true": True, "full_shard": True, "false": False, "shard_grad_op": False, "no_reshard": False}


def _flag(name: str, default: str = "false") -> bool:
    return os.environ.get(name, default).lower() in ("1", "true", "yes")


@dataclass(frozen=True)
class FSDPSettings:
    """What the launcher's FSDP config asks for (accelerate passes it in ``FSDP_*`` variables)."""

    #: In an update, free a layer's gathered weights after its forward pass and gather them again for
    #: the backward pass (least memory); False keeps them from forward to backward (less communication).
    reshard_after_forward: bool = True
    #: Class names of the modules sharded as units (``fsdp_transformer_layer_cls_to_wrap``); empty:
    #: the model's ``_no_split_modules`` (its decoder layer, e.g. ``LlamaDecoderLayer``).
    layer_classes: tuple[str, ...] = ()

    @classmethod
    def from_environment(cls) -> FSDPSettings | None:
        """The settings of an ``accelerate launch`` with an FSDP config, or None without one."""
        if not _flag("ACCELERATE_USE_FSDP"):
            return None
        version = os.environ.get("FSDP_VERSION", "1")
        if version != "2":
            raise ValueError(
                f"FSDP version {version} is not supported: set fsdp_version: 2 under fsdp_config in the accelerate "
                f"config (see examples/accelerate/fsdp.yaml), or pass --fsdp_version 2"
            )
        refused = {
            "FSDP_OFFLOAD_PARAMS": "fsdp_offload_params (CPU offload) is not supported: set it to false",
            "FSDP_ACTIVATION_CHECKPOINTING": (
                "fsdp_activation_checkpointing is not supported: set it to false and pass --gradient-checkpointing "
                "to the trainer instead"
            ),
            "FSDP_CPU_RAM_EFFICIENT_LOADING": (
                "fsdp_cpu_ram_efficient_loading is not supported (every process loads the whole model, then keeps "
                "its shard): set it to false"
            ),
        }
        for variable, message in refused.items():
            if _flag(variable):
                raise ValueError(message)
        reshard = os.environ.get("FSDP_RESHARD_AFTER_FORWARD", "true").lower()
        if reshard not in _RESHARD:
            raise ValueError(f"fsdp_reshard_after_forward must be true or false, got {reshard!r}")
        classes = os.environ.get("FSDP_TRANSFORMER_CLS_TO_WRAP", "")
        return cls(
            reshard_after_forward=_RESHARD[reshard],
            layer_classes=tuple(c.strip() for c in classes.split(",") if c.strip()),
        )


def shard(module: nn.Module, settings: FSDPSettings) -> nn.Module:
    """Shard ``module`` in place over all processes: each decoder layer, then ``module`` itself.

    Process 0's weights and buffers are first copied to every process (as FSDP1's
    ``sync_module_states``), so the shards come from one model. The layers are the modules
    whose class is named in ``settings.layer_classes``, else in ``module._no_split_modules``
    (a Hugging Face model's decoder layer); a module with none
    (a value head) is one unit. ``module`` becomes the root FSDP module of its own forward
    calls: call it directly, never only as part of a larger sharded module.
    """
    from torch.distributed.fsdp import fully_shard

    # Our callers never modify a model's output in place (the FSDP runs match the all-reduce runs: tested).
    warnings.filterwarnings("ignore", message=r"FSDP2-wrapped module .* returned a view tensor")
    names = settings.layer_classes or tuple(getattr(module, "_no_split_modules", None) or ())
    layers = [m for m in module.modules() if m is not module and type(m).__name__ in names]
    if names and not layers and isinstance(module, _pretrained_model_class()):
        raise ValueError(
            f"{type(module).__name__} has no module of class {', '.join(names)} to shard as a layer: set "
            f"fsdp_transformer_layer_cls_to_wrap in the accelerate config to its decoder layer's class name"
        )
    with torch.no_grad():
        for tensor in [*module.parameters(), *module.buffers()]:
            torch.distributed.broadcast(tensor.data, src=0)
    for layer in layers:
        fully_shard(layer, reshard_after_forward=settings.reshard_after_forward)
    fully_shard(module, reshard_after_forward=settings.reshard_after_forward)
    return module


@contextlib.contextmanager
def gathered(modules: Iterable[nn.Module], settings: FSDPSettings) -> Iterator[None]:
    """Every FSDP unit in ``modules`` holds its whole weights inside the block, sharded again after.

    For acting: processes play episodes of different lengths, so a forward pass must not be a
    collective (as it is for a sharded layer). One all-gather per unit on entry, in the same
    order on every process; then the acting steps communicate nothing.
    """
    from torch.distributed.fsdp import FSDPModule

    units = list({id(m): m for module in modules for m in module.modules() if isinstance(m, FSDPModule)}.values())
    for unit in units:
        unit.unshard()
        unit.set_reshard_after_forward(False, recurse=False)
    try:
        yield
    finally:
        for unit in units:
            unit.reshard()
            unit.set_reshard_after_forward(settings.reshard_after_forward, recurse=False)


def _pretrained_model_class() -> type:
    from transformers import PreTrainedModel

    return PreTrainedModel


def is_sharded(tensor: torch.Tensor) -> bool:
    """Whether ``tensor`` is a DTensor (a parameter, gradient or optimizer state FSDP shards)."""
    from torch.distributed.tensor import DTensor

    return isinstance(tensor, DTensor)


def full_state(state: Any) -> Any:
    """``state`` with every sharded tensor replaced by the whole tensor, on the CPU.

    A collective: every process must call it on the same structure (one all-gather per
    sharded tensor, in order). Other values are returned as they are.
    """
    if is_sharded(state):
        return state.full_tensor().cpu()
    if isinstance(state, dict):
        return {k: full_state(v) for k, v in state.items()}
    if isinstance(state, (list, tuple)):
        return type(state)(full_state(v) for v in state)
    return state


def shard_state(state: dict[str, Any], template: dict[str, Any], params: Sequence[torch.Tensor]) -> dict[str, Any]:
    """A learner's whole (checkpoint) ``state`` cut into this process's shards, ready for ``load_state_dict``.

    ``template`` is the learner's current ``state_dict()``: a whole tensor takes the layout of
    the sharded tensor at the same place in it (the weights under ``"model"``). The optimizer's
    per-parameter state under ``"optimizer"`` (absent from the template before the first step)
    takes the layout of its parameter: ``params`` in the optimizer's order.
    """
    state = _shard_like(state, template)
    optimizer = state.get("optimizer")
    if isinstance(optimizer, dict) and "state" in optimizer:
        per_param = {}
        for index, values in optimizer["state"].items():
            p = params[index]
            per_param[index] = {
                k: _shard_as(v, p) if torch.is_tensor(v) and not is_sharded(v) and v.shape == p.shape else v
                for k, v in values.items()
            }
        state["optimizer"] = {**optimizer, "state": per_param}
    return state


def _shard_like(value: Any, template: Any) -> Any:
    if is_sharded(template) and torch.is_tensor(value) and not is_sharded(value):
        return _shard_as(value, template)
    if isinstance(value, dict) and isinstance(template, dict):
        return {k: _shard_like(v, template[k]) if k in template else v for k, v in value.items()}
    return value


def _shard_as(whole: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """This process's shard of ``whole``, laid out as the DTensor ``like`` (no communication)."""
    from torch.distributed.tensor import distribute_tensor

    whole = whole.to(device=like.device, dtype=like.dtype)
    return distribute_tensor(whole, like.device_mesh, like.placements, src_data_rank=None)
