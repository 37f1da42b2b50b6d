"""Building a run from its resolved :class:`~cory_agents.training.config.TrainConfig`: :func:`assemble`.

:func:`assemble` is the whole of it, top to bottom: the task, the devices, the tokenizers, the
prompts and the reward, the models, one learner per agent (``--learner``'s factory,
:mod:`cory_agents.training.registry`), and the game they play. Its parts:

- :func:`select_devices`: the main device and each learner's (``--device``, ``--learner-devices``,
  or each process's own under ``accelerate launch``);
- :func:`build_models`: each learner's trainable causal LM and frozen reference: full copies
  (one reference per device), LoRA adapters on one shared base (``--lora``, 4-bit with
  ``--load-in-4bit``), or FSDP shards, with the speed switches applied to the base first;
- :func:`build_team`: the learners as one team learner (:mod:`cory_agents.learners.team`): a team
  ``--learner``'s own, or the per-agent learners each learning alone.

The config comes resolved (:func:`cory_agents.training.config.resolve`): nothing here rewrites it.
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import logging
import os
import random
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from pettingzoo import AECEnv

from cory_agents.distributed.data_parallel import DataParallel
from cory_agents.distributed.fsdp import full_state, is_sharded
from cory_agents.learners.base import Learner
from cory_agents.learners.dropout import disable_dropout
from cory_agents.learners.lm import LMLearner
from cory_agents.learners.team import IndependentLearners, TeamLearner, TeamRun
from cory_agents.speed import padding_free
from cory_agents.speed.attention_kinds import sliding_windows
from cory_agents.speed.cpu_linear import use_cpu_linear
from cory_agents.speed.host_memory import retain_freed_memory
from cory_agents.training.chat_settings import in_chat_form, task_chat_form
from cory_agents.training.config import TrainConfig, build_task, check_group_size
from cory_agents.training.devices import learner_devices, parse_device
from cory_agents.training.registry import TeamFactory, learner_spec
from cory_env import CollectiveRewardWrapper, RoleExchangeWrapper, env
from cory_env.errors import UsageError
from cory_env.models import hugging_face_model, load_causal_lm, load_tokenizer
from cory_env.prompts import PromptSource, repeat_each
from cory_env.rewards import get_reward
from cory_env.rewards.base import RewardFunction
from cory_env.tasks import Task

logger = logging.getLogger(__name__)


@dataclass
class Assembly:
    """What a run is made of, by learner name where there is one per learner (:func:`assemble`)."""

    task: Task  #: the task: its templates, its prompts (``--task``, ``--task-file``)
    device: torch.device  #: the main device: models are loaded there, the reward model runs there
    tokenizers: dict[str, Any]  #: each learner's tokenizer (learners of one model share one)
    reward: RewardFunction  #: the task reward, called with a timeout; a stop request can abandon a call
    policies: dict[str, torch.nn.Module]  #: what each learner acts with: its trainable causal LM
    learners: dict[str, Learner]  #: the learners, llm_0 ... (CORY) or pioneer (PPO): the team's members
    team: TeamLearner  #: what learns each iteration, from all the learners' episodes
    team_run: TeamRun  #: what the run lent the team learner: the modules it owns, if any
    game: AECEnv  #: the environment; under CORY in its collective-reward and role-exchange wrappers


def assemble(
    config: TrainConfig,
    data_parallel: DataParallel,
    prompts: PromptSource | Sequence[str] | None = None,
    reward_fn: RewardFunction | None = None,
) -> Assembly:
    """Build a run from its resolved ``config``: ``prompts`` and ``reward_fn`` override the task's
    prompt source and ``config.reward``. The steps keep one order, on which the random draws of a
    run depend: the same config gives the same initial weights and the same episodes."""
    dp, names = data_parallel, config.learner_names()
    task = build_task(config)  # a bad --task-file fails before anything is loaded
    device, learner_devices = select_devices(config, names, dp)
    if config.retain_freed_memory and any(d.type == "cpu" for d in learner_devices.values()):
        retain_freed_memory()
    if config.bf16 and dp.is_main_process and (slow := emulated_bfloat16(learner_devices.values())):
        logger.warning(
            "--bf16 on %s, which has no bfloat16 arithmetic: autocast emulates it, many times slower "
            "than float32 (docs/benchmarks.md). Drop --bf16 on this machine",
            slow,
        )
    seed_everything(config.seed)  # the same on every process: the initial weights must be equal
    models = config.agent_models()  # each learner's model; a team of different models has a tokenizer each
    loaded = {m: load_tokenizer(m) for m in dict.fromkeys(models.values())}
    tokenizers = {n: loaded[models[n]] for n in names}
    # The task's data and reward before the models: a bad --task-file or --reward fails fast.
    if prompts is None:  # the first learner's tokenizer selects the prompts
        prompts = task.prompts(tokenizers[names[0]], split="train", seed=config.seed, source=config.prompt_source)
    reward = get_reward(reward_fn if reward_fn is not None else config.reward, device, timeout=config.reward_timeout)
    references, policies = build_models(config, names, device, learner_devices, dp)
    learners = build_learners(config, names, references, policies, learner_devices, dp)
    team_run = TeamRun(device, tokenizers, references, dp)
    team = build_team(config, learners, team_run)
    if dp.is_distributed:  # after the initial weights, each process draws its own data
        seed_everything(dp.seed(config.seed))
    group_size = config.group_size_of_learner()  # the learner's own setting, if it declares groups
    check_group_size(config.batch_size, group_size, config.learner)
    if stray := {n: g for n, learner in learners.items() if (g := getattr(learner, "group_size", 1)) != group_size}:
        raise UsageError(
            f"--learner {config.learner} built learners with group_size {stray} but the run plays groups of "
            f"{group_size}: the group size is the learner's setting, group_size in its config section, and needs "
            f"supports=Capabilities(groups=True) where the learner is registered"
        )
    if group_size > 1:  # each prompt group_size times in a row: groups of responses to compare
        prompts = repeat_each(prompts, group_size)
    game = env(
        tokenizer=[tokenizers[n] for n in names],  # agents of one model share one speaker
        prompts=prompts,
        reward_fn=reward,
        pioneer_template=config.pioneer_template or task.pioneer_template,
        observer_template=config.observer_template or task.observer_template,
        templates=config.template_list(),
        num_agents=len(names),
        num_conversations=config.batch_size,
        max_new_tokens=(config.min_new_tokens, config.max_new_tokens),
        context_length=config.context_length,
        knowledge_transfer=not config.no_knowledge_transfer,
        rounds=config.rounds,
        later_templates=None
        if config.template_list() or task.chat is not None and in_chat_form(config)
        else task.later_templates,
        prompt_fields=task.prompt_fields if not config.task_file else None,
        private_fields=task.private_fields,
        turn_rewards=config.turn_rewards,
        chat=task_chat_form(config, task, [w for model in policies.values() for w in sliding_windows(model)]),
    )
    game.check_prompts()  # a prompt too long for --context-length fails now, not at the episode that draws it
    if config.algo == "cory":
        period = None if config.no_role_exchange else config.role_exchange_period
        game = RoleExchangeWrapper(CollectiveRewardWrapper(game), period=period)
    return Assembly(task, device, tokenizers, reward, policies, learners, team, team_run, game)


def build_learners(
    config: TrainConfig,
    names: list[str],
    references: dict[str, torch.nn.Module],
    policies: dict[str, torch.nn.Module],
    devices: dict[str, torch.device],
    dp: DataParallel,
) -> dict[str, Learner]:
    """One learner per name, from the factory of ``--learner`` (a team learner's: its members', from
    its ``member``'s), each :class:`~cory_agents.learners.lm.LMLearner` named as the run names it (its
    ``name``); in a data-parallel run every process starts from process 0's weights (value heads included)."""
    sampling = dict(do_sample=True, temperature=config.temperature, top_k=config.top_k, top_p=config.top_p)
    if config.compile:  # a static cache of a turn's length, at most the context window
        sampling |= dict(cache_length=config.context_length, max_new_tokens=config.max_new_tokens)
    extra = {"data_parallel": dp} if dp.is_distributed or dp.sharded else {}
    factory = learner_spec(config.learner).factory
    if isinstance(factory, TeamFactory):
        factory = learner_spec(factory.member).factory
    learners: dict[str, Learner] = {}
    for i, name in enumerate(names):
        learner = factory(
            config,
            policy=policies[name],
            reference=references[name],
            seed=dp.seed(config.seed) * 1000 + i,
            sampling=sampling,
            device=devices[name],
            **extra,
        )
        if not isinstance(learner, Learner):
            raise TypeError(
                f"learner {config.learner!r} built a {type(learner).__name__}, which lacks act, learn, "
                f"state_dict or load_state_dict (see cory_agents.learners.base.Learner)"
            )
        if isinstance(learner, LMLearner):  # its messages name it as the run does
            learner.name = name
        learners[name] = learner
    if dp.sharded:
        check_sharded(learners)
    dp.broadcast_parameters(p for learner in learners.values() for p in trainable_parameters(learner))
    return learners


def build_team(config: TrainConfig, learners: dict[str, Learner], run: TeamRun) -> TeamLearner:
    """The learners as one team learner: ``--learner``'s factory when it is a
    :class:`~cory_agents.training.registry.TeamFactory`, else :class:`~cory_agents.learners.team.IndependentLearners`
    (each learner alone, its update recomputing activations as the observer with
    ``--gradient-checkpointing-observer``). A factory's ``build`` that takes ``run`` gets it (:class:`TeamRun`:
    the device, tokenizers, references, processes, and the modules the team owns)."""
    factory = learner_spec(config.learner).factory
    if not isinstance(factory, TeamFactory):
        return IndependentLearners(learners, around=observer_recomputation(config, learners))
    takes_run = any(
        p.name == "run" or p.kind is p.VAR_KEYWORD for p in inspect.signature(factory.build).parameters.values()
    )
    lent = {"run": run} if takes_run else {}
    team = factory.build(config, learners, seed=config.seed, **lent)  # the same on every process
    if not isinstance(team, TeamLearner):
        raise TypeError(
            f"learner {config.learner!r} built a {type(team).__name__}, which lacks members, learn, state_dict "
            f"or load_state_dict (see cory_agents.learners.team.TeamLearner)"
        )
    return team


def observer_recomputation(
    config: TrainConfig, learners: dict[str, Learner]
) -> Callable[[str, str], contextlib.AbstractContextManager[None]]:
    """``--gradient-checkpointing-observer``: a context manager in which learner ``name``'s update
    recomputes activations when it played the observer (with ``--gradient-checkpointing`` they are
    recomputed in every update already)."""

    @contextlib.contextmanager
    def recomputing(name: str, role: str) -> Iterator[None]:
        if not (config.gradient_checkpointing_observer and role != "pioneer") or config.gradient_checkpointing:
            yield
            return
        layers = hugging_face_model(learners[name].model)  # under LoRA: the shared base
        recompute_activations(layers, True)
        try:
            yield
        finally:
            recompute_activations(layers, False)

    return recomputing


def select_devices(
    config: TrainConfig, names: list[str], dp: DataParallel
) -> tuple[torch.device, dict[str, torch.device]]:
    """The main device (models are loaded there; the reward model runs there) and each learner's
    (:func:`~cory_agents.training.config.resolve` checked the flags against each other and the launcher)."""
    if dp.is_distributed:
        return dp.device, dict.fromkeys(names, dp.device)
    if not config.learner_devices:
        device = resolve_device(config.device)
        return device, dict.fromkeys(names, device)
    devices = learner_devices(config)
    for d in devices:
        _check_available(d, "--learner-devices")
    return devices[0], dict(zip(names, devices))


def resolve_device(spec: str) -> torch.device:
    """``--device``: ``auto`` (CUDA when torch sees a GPU, else the CPU), or a device this torch can
    use; anything else fails with a UsageError (a ValueError) saying why."""
    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = parse_device(spec, "--device")
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
    model: str,
    config: TrainConfig,
    names: list[str],
    device: torch.device,
    devices: dict[str, torch.device],
    dp: DataParallel,
) -> tuple[dict[str, torch.nn.Module], dict[str, torch.nn.Module]]:
    """The references and trainable LMs of the learners ``names``, which all fine-tune ``model``."""
    kwargs: dict[str, Any] = {}
    if config.load_in_4bit:
        if device.type != "cuda":
            raise UsageError(f"--load-in-4bit needs a CUDA device (bitsandbytes), not {device}")
        from transformers import BitsAndBytesConfig

        kwargs["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch.bfloat16
        )
    base = load_causal_lm(model, device=None if config.load_in_4bit else device, **kwargs)
    check_position_window(config.context_length, base, names)
    disable_dropout(base)  # layers, functional rates and config fields (OPT, Falcon)
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

    from cory_agents.training.adapters import AdapterView, shared_lora_model

    lora = LoraConfig(
        r=config.lora_r,
        lora_alpha=config.lora_alpha,
        lora_dropout=0.0,
        target_modules=_target_modules(config.lora_target_modules),
        task_type="CAUSAL_LM",
    )
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
        logger.warning(
            "--context-length %d is beyond %s's model (%s) window of %d positions, on which it was "
            "trained (its rotary positions run on past it)",
            context_length,
            who,
            name,
            window,
        )
        return
    raise UsageError(
        f"--context-length {context_length} does not fit {who}'s model ({name}), whose window is {window} "
        f"positions: lower --context-length to {window} or less, or shorten the prompts"
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
