"""Building a run: its devices, its models and its learners, from a :class:`~agents.training.config.TrainConfig`.

- :func:`select_devices`: the main device and each learner's (``--device``, ``--learner-devices``,
  or each process's own under ``accelerate launch``);
- :func:`build_models`: each learner's trainable causal LM and frozen reference: full copies
  (one reference per device), LoRA adapters on one shared base (``--lora``, 4-bit with
  ``--load-in-4bit``), or FSDP shards, with the speed switches applied to the base first;
- :data:`LEARNERS`: the ``--learner`` factories (PPO, GRPO, RLOO, and any you register).
"""

from __future__ import annotations

import copy
import logging
import os
import random
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from trl.trainer.utils import disable_dropout_in_model

from agents.distributed.data_parallel import DataParallel
from agents.distributed.fsdp import full_state, is_sharded
from agents.learners.base import Learner
from agents.learners.grpo import GRPOLearner
from agents.learners.ppo import PPOLearner
from agents.learners.value_model import CausalLMWithValueHead
from agents.speed import padding_free
from agents.speed.cpu_linear import use_cpu_linear
from agents.speed.scoring_reuse import reuse_scoring_pass
from cory_env.errors import UsageError
from cory_env.models import load_causal_lm

logger = logging.getLogger(__name__)

if TYPE_CHECKING:
    from agents.training.config import TrainConfig


#: Builds one learner: ``factory(config, *, policy, reference, seed, sampling, device)``, where
#: ``policy`` is this learner's trainable causal LM (full copy or LoRA adapter view, on ``device``),
#: ``reference`` its frozen reference (learners on one device share it), ``sampling`` LMActor's
#: keyword arguments. Under ``accelerate launch`` the factory also gets ``data_parallel``
#: (:class:`~agents.distributed.data_parallel.DataParallel`): the learner must then average its gradients
#: over the processes (``data_parallel.average_gradients``) so that their weights stay equal,
#: and under FSDP shard any module it adds to ``policy`` (``data_parallel.shard``) before
#: building its optimizer (``policy`` and ``reference`` come sharded).
LearnerFactory = Callable[..., Learner]


def ppo_learner(config: TrainConfig, *, policy, reference, seed, sampling, device, data_parallel=None) -> PPOLearner:
    """PPO-LLM: the policy gets a value head (critic)."""
    model = CausalLMWithValueHead(policy).to(device)
    if data_parallel is not None:
        data_parallel.shard(model.v_head)  # FSDP: the value head is a unit of its own (the LM is one already)
    learner = PPOLearner(model, reference, config.ppo_config(), seed, sampling, data_parallel=data_parallel)
    return reuse_scoring_pass(learner) if config.reuse_scoring_pass else learner


def grpo_learner(config: TrainConfig, *, policy, reference, seed, sampling, device, data_parallel=None) -> GRPOLearner:
    """GRPO: group-normalised advantages, k3 KL term in the loss; no value head."""
    return GRPOLearner(policy, reference, config.grpo_config("grpo"), seed, sampling, data_parallel=data_parallel)


def rloo_learner(config: TrainConfig, *, policy, reference, seed, sampling, device, data_parallel=None) -> GRPOLearner:
    """RLOO: leave-one-out baseline, KL penalty in the reward; no value head."""
    return GRPOLearner(policy, reference, config.grpo_config("rloo"), seed, sampling, data_parallel=data_parallel)


#: ``--learner`` choices. Register another algorithm with ``LEARNERS["name"] = factory``
#: before building the Trainer (or the command-line parser): see docs/plug-in-your-algorithm.md.
LEARNERS: dict[str, LearnerFactory] = {"ppo": ppo_learner, "grpo": grpo_learner, "rloo": rloo_learner}


def select_devices(config: TrainConfig, names: list[str], dp: DataParallel) -> tuple[torch.device, dict[str, torch.device]]:
    """The main device (models are loaded there; the reward model runs there) and each learner's."""
    if dp.is_distributed:
        if config.learner_devices:
            raise UsageError(
                "--learner-devices is for a single process; under accelerate launch each process uses its own "
                "device (drop --learner-devices, or run without accelerate launch)"
            )
        if config.device != "auto" and torch.device(config.device).type != dp.device.type:
            raise UsageError(
                f"--device {config.device} conflicts with the launcher's device {dp.device}: drop --device "
                f"(CUDA_VISIBLE_DEVICES= runs the processes on CPUs)"
            )
        return dp.device, dict.fromkeys(names, dp.device)
    if not config.learner_devices:
        device = resolve_device(config.device)
        return device, dict.fromkeys(names, device)
    specs = [s.strip() for s in config.learner_devices.split(",") if s.strip()]
    if len(specs) != len(names):
        raise UsageError(
            f"--learner-devices lists {len(specs)} device(s) for {len(names)} learner(s) ({', '.join(names)}): "
            f"give one per learner, e.g. --learner-devices {','.join(f'cuda:{i}' for i in range(len(names)))}"
        )
    try:
        devices = [torch.device(s) for s in specs]
    except RuntimeError as exc:
        raise UsageError(f"--learner-devices {config.learner_devices!r}: {exc}") from exc
    for d in devices:
        _check_available(d, "--learner-devices")
    if config.lora and len(set(devices)) > 1:
        raise UsageError("--learner-devices with different devices needs full fine-tuning: --lora shares one base")
    if config.device != "auto":
        raise UsageError("give either --device or --learner-devices, not both")
    return devices[0], dict(zip(names, devices))


def resolve_device(spec: str) -> torch.device:
    """``--device``: ``auto`` (CUDA when torch sees a GPU, else the CPU), or a device this torch can
    use; anything else fails with a UsageError (a ValueError) saying why."""
    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(spec)
    except RuntimeError as exc:
        raise UsageError(f"--device {spec!r}: {exc} (give cpu, cuda, cuda:N or auto)") from exc
    _check_available(device, "--device")
    return device


def _check_available(device: torch.device, flag: str) -> None:
    """A CUDA ``device`` that this torch cannot use fails here, naming ``flag`` and what torch sees."""
    if device.type != "cuda" or (torch.cuda.is_available() and (device.index or 0) < torch.cuda.device_count()):
        return
    if torch.version.cuda is None:
        why = f"this PyTorch ({torch.__version__}) is a CPU build: install a CUDA build (pytorch.org/get-started)"
    else:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "unset")
        why = f"torch sees {torch.cuda.device_count()} GPU(s) (CUDA_VISIBLE_DEVICES={visible})"
    raise UsageError(f"{flag}: {device} is not available: {why}; or run on the CPU")


def emulated_bfloat16(devices: Iterable[torch.device]) -> str:
    """The first of ``devices`` without bfloat16 arithmetic (a CPU without AVX512-BF16 or AMX, a GPU
    before Ampere), described; empty if they all have it."""
    for d in devices:
        if d.type == "cpu" and not (torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()):
            return f"this CPU ({torch.backends.cpu.get_cpu_capability()})"
        if d.type == "cuda" and not torch.cuda.is_bf16_supported(including_emulation=False):
            return f"{torch.cuda.get_device_name(d)}"
    return ""


def build_models(
    config: TrainConfig, names: list[str], device: torch.device, devices: dict[str, torch.device], dp: DataParallel
) -> tuple[dict[str, torch.nn.Module], dict[str, torch.nn.Module]]:
    """Each learner's frozen reference and trainable causal LM (its factory adds a value head if needed).

    Learners of the same model (``--model``, or the same entry of ``--models``) are built
    together: full fine-tuning copies the model per learner, on the learner's device, and
    learners on the same device share one reference; ``--lora`` puts one adapter per learner
    on a single shared base whose adapter-free forward is the reference. Each distinct model
    of a team has its own reference.
    """
    models = config.agent_models()
    references: dict[str, torch.nn.Module] = {}
    lms: dict[str, torch.nn.Module] = {}
    for model in dict.fromkeys(models[n] for n in names):
        group = [n for n in names if models[n] == model]
        refs, trained = _build_models_of(model, config, group, device, devices, dp)
        references.update(refs)
        lms.update(trained)
    return {n: references[n] for n in names}, {n: lms[n] for n in names}


def _build_models_of(
    model: str, config: TrainConfig, names: list[str], device: torch.device, devices: dict[str, torch.device],
    dp: DataParallel,
) -> tuple[dict[str, torch.nn.Module], dict[str, torch.nn.Module]]:
    """The references and trainable LMs of the learners ``names``, which all fine-tune ``model``."""
    kwargs: dict[str, Any] = {}
    if config.load_in_4bit:
        if not config.lora or device.type != "cuda":
            raise UsageError("--load-in-4bit needs --lora and a CUDA device (bitsandbytes 4-bit weights are frozen)")
        from transformers import BitsAndBytesConfig

        kwargs["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch.bfloat16
        )
    base = load_causal_lm(model, device=None if config.load_in_4bit else device, **kwargs)
    check_position_window(config.context_length, base, names)
    disable_dropout_in_model(base)
    base.requires_grad_(False)
    if config.cpu_linear and device.type == "cpu":  # before the copies, which keep the class
        use_cpu_linear(base)
    if config.padding_free:  # before the copies, which keep the attention implementation
        padding_free.enable(base)
    if dp.sharded:
        lms = {n: copy.deepcopy(base).requires_grad_(True) for n in names}
        checkpoint_activations(config, *lms.values())
        for lm in lms.values():
            dp.shard(lm)
        dp.shard(base, frozen=True)  # the shared frozen reference
        return dict.fromkeys(names, base), lms
    if not config.lora:
        on_device = {device: base}  # one frozen reference per device of this model's learners
        for d in dict.fromkeys(devices[n] for n in names):
            on_device.setdefault(d, copy.deepcopy(base).to(d))
        lms = {n: copy.deepcopy(on_device[devices[n]]).requires_grad_(True) for n in names}
        checkpoint_activations(config, *lms.values())
        references = {n: on_device[devices[n]] for n in names}
        return references, lms
    from peft import LoraConfig

    from agents.training.adapters import AdapterView, shared_lora_model

    lora = LoraConfig(
        r=config.lora_r, lora_alpha=config.lora_alpha, lora_dropout=0.0,
        target_modules=_target_modules(config.lora_target_modules), task_type="CAUSAL_LM",
    )  # fmt: skip
    checkpoint_activations(config, base)
    shared = shared_lora_model(base, names, lora)
    return dict.fromkeys(names, AdapterView(shared, None)), {n: AdapterView(shared, n) for n in names}


def _target_modules(spec: str) -> str | list[str]:
    return spec if spec == "all-linear" else [m.strip() for m in spec.split(",") if m.strip()]


def checkpoint_activations(config: TrainConfig, *models: torch.nn.Module) -> None:
    """``--gradient-checkpointing``: recompute activations in the backward pass, in every update."""
    if config.gradient_checkpointing:
        for model in models:
            recompute_activations(model, True)


def recompute_activations(model: torch.nn.Module, on: bool) -> None:
    """Switch a Hugging Face model's decoder layers to recomputing their activations in the
    backward pass (non-reentrant), or back. Only active in training mode, so rollouts keep their KV cache."""
    if on:
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    else:
        model.activation_checkpointing_disable()


def check_position_window(context_length: int, model: torch.nn.Module, names: list[str]) -> None:
    """The model of the learners ``names`` must hold ``--context-length`` positions: one with learned
    absolute positions (GPT-2) has no position beyond its ``max_position_embeddings`` and fails here; a
    rotary one (Llama) runs past its trained window, untrained there, so it gets a warning (once per model)."""
    config = getattr(model, "config", None)
    window = getattr(config, "max_position_embeddings", None)
    if not isinstance(window, int) or context_length <= window:
        return
    who, name = ", ".join(names), getattr(config, "name_or_path", "") or type(model).__name__
    if any(getattr(config, a, None) is not None for a in ("rope_theta", "rope_parameters", "rope_scaling")):
        logger.warning("--context-length %d is beyond %s's model (%s) window of %d positions, on which it was "
                       "trained (its rotary positions run on past it)", context_length, who, name, window)  # fmt: skip
        return
    raise UsageError(
        f"--context-length {context_length} does not fit {who}'s model ({name}), whose window is {window} "
        f"positions: lower --context-length to {window} or less, or shorten the prompts"
    )


def check_group_size(batch_size: int, group_size: int, learner: str) -> None:
    if batch_size % group_size:
        raise UsageError(
            f"--batch-size {batch_size} must be a multiple of --group-size {group_size}: the {learner} learner "
            f"compares {group_size} responses per prompt, so each prompt fills {group_size} conversations"
        )


def trainable_parameters(learner: Learner) -> list[torch.nn.Parameter]:
    """What a learner's optimizer updates (or, lacking one, its model's trainable weights)."""
    optimizer = getattr(learner, "optimizer", None)
    if optimizer is not None:
        return [p for group in optimizer.param_groups for p in group["params"]]
    return [p for p in learner.model.parameters() if p.requires_grad]


def named_trainable(learner: Learner, gather: bool = False) -> dict[str, torch.Tensor]:
    """A learner's trainable weights by position (for a learner whose state has no ``"model"``);
    ``gather``: whole tensors of sharded ones (a collective)."""
    named = {str(i): p for i, p in enumerate(trainable_parameters(learner))}
    return full_state(named) if gather else named


def check_sharded(learners: dict[str, Learner]) -> None:
    """Under FSDP every trainable weight must be sharded (a learner shards what it adds to its policy)."""
    for name, learner in learners.items():
        plain = [p for p in trainable_parameters(learner) if not is_sharded(p)]
        if plain:
            raise ValueError(
                f"learner {name!r} trains {len(plain)} parameter(s) that FSDP does not shard (shapes "
                f"{[tuple(p.shape) for p in plain[:3]]}): a learner must pass every module it adds to the policy "
                f"through data_parallel.shard(module) before building its optimizer (see agents/distributed/fsdp.py)"
            )


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
