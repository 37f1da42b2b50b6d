"""The training configuration: :class:`TrainConfig`, its presets, :func:`resolve` and the rules of a resume.

Every field of :class:`TrainConfig` is a flag of ``cory-train`` (``examples/train_cory.py``),
its help text the field's; the fields come in sections, as TRL's configs do (task, model,
algorithm, generation, output, speed). What can be checked from the values alone is checked
when the config is made (``__post_init__``); everything else, once, by :func:`resolve`, before
anything is built: it fills in the preset, the task's defaults and the derived settings, and
checks the settings against each other and against the launcher. A run is then assembled from
the resolved config (:func:`cory_agents.training.build.assemble`); the config never looks back at
the build.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import json
import typing
from dataclasses import dataclass
from typing import Any, ClassVar

from cory_agents.distributed.data_parallel import DataParallel
from cory_agents.learners.difference import DifferenceConfig
from cory_agents.learners.grpo import GRPOConfig
from cory_agents.learners.happo import HAPPOConfig
from cory_agents.learners.lm import LMLearnerConfig, default_mini_batch_size
from cory_agents.learners.mappo import MAPPOConfig
from cory_agents.learners.ppo import PPOConfig
from cory_agents.training.chat_settings import check_chat_settings, in_chat_form
from cory_agents.training.devices import check_devices
from cory_agents.training.registry import TeamFactory, available_learners, learner_spec
from cory_agents.training.sections import (
    ALGOS,
    GameConfig,
    GenerationConfig,
    ModelConfig,
    OutputConfig,
    SpeedConfig,
    TaskConfig,
    check_numbers,
)
from cory_agents.training.trackers import resolve_report_to
from cory_env.errors import CoryError, UsageError
from cory_env.tasks import Task, custom_task, get_task
from cory_env.wrappers import learner_names


class PackageNotInstalledError(CoryError, ImportError):
    """A setting needs a package that is not installed (``--load-in-4bit``: bitsandbytes): install it, or drop the setting."""


@dataclass(kw_only=True)
class TrainConfig(
    SpeedConfig,
    OutputConfig,
    GenerationConfig,
    GRPOConfig,
    MAPPOConfig,
    DifferenceConfig,
    HAPPOConfig,
    PPOConfig,
    GameConfig,
    ModelConfig,
    TaskConfig,
):
    """Everything a run needs, composed of its sections; each field is a flag of ``cory-train``.

    The sections: :class:`TaskConfig`, :class:`ModelConfig`, :class:`GameConfig`, the learners'
    own configs (:class:`~cory_agents.learners.lm.LMLearnerConfig`'s shared settings,
    :class:`~cory_agents.learners.ppo.PPOConfig`'s, :class:`~cory_agents.learners.happo.HAPPOConfig`'s and
    :class:`~cory_agents.learners.grpo.GRPOConfig`'s), then
    :class:`GenerationConfig`, :class:`OutputConfig` and :class:`SpeedConfig`. A setting is defined
    once, in its section, with one name and one default: the learner's config is this config's
    fields of the same names (:meth:`learner_config`), not a translation. The command line parses
    the sections together, the learner's own chosen by ``--learner`` (``cory_agents.cli.train``).
    """

    _argument_group_name: ClassVar[str] = "cory-train"

    def __post_init__(self) -> None:
        """The checks that need no preset, task or machine: a bad value fails when the config is made."""
        if self.algo not in ALGOS:
            raise UsageError(f"algo must be one of {ALGOS}, got {self.algo!r}")
        spec = learner_spec(self.learner)  # an unknown learner fails naming the others
        missing = [f.name for f in dataclasses.fields(spec.config) if f.init and not hasattr(self, f.name)]
        if missing:
            raise UsageError(
                f"this config lacks --learner {self.learner}'s own settings ({', '.join(missing)}): make it with "
                f"TrainConfig.for_learner({self.learner!r})(...), or parse it (cory_agents.cli.train.parse_config)"
            )
        for name in ("iterations", "batch_size", "checkpoint_every", "keep_checkpoints", "role_exchange_period"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise UsageError(f"--{name.replace('_', '-')} must be at least 1, got {value}")
        super().__post_init__()  # the learners' sections
        check_numbers(self)
        if self.num_agents is not None and (isinstance(self.num_agents, bool) or self.num_agents < 1):
            raise UsageError(f"--num-agents must be at least 1, got {self.num_agents}")
        if self.algo == "ppo" and (self.num_agents or 1) > 1:
            raise UsageError(
                f"--algo ppo trains one agent, the pioneer alone; --num-agents {self.num_agents} needs --algo cory"
            )
        if self.algo == "cory" and self.num_agents == 1:
            raise UsageError(
                "--algo cory trains two or more agents that exchange roles, so --num-agents 1 cannot work: give "
                "--num-agents 2 or more, or --algo ppo for one agent alone"
            )
        models = self.model_list()
        if self.algo == "ppo" and len(models) > 1:
            raise UsageError(f"--algo ppo trains one agent, but --models lists {len(models)}: give one, or use --model")
        if models and self.algo == "cory" and self.num_agents is not None and len(models) != self.num_agents:
            raise UsageError(
                f"--models lists {len(models)} model(s) ({', '.join(models)}) for --num-agents {self.num_agents}: give one "
                f"per agent, llm_0 first, or drop --num-agents (it follows the list)"
            )
        if self.templates:
            self.template_list()  # a bad list fails now
        check_chat_settings(self)
        refusal = spec.supports.refusal(
            self.learner,
            rounds=self.rounds,
            turn_rewards=self.turn_rewards,
            agents=self.chain_length(),
            different_models=len(set(models)) > 1,
            lora=self.lora,
            compile=self.compile,
        )
        if refusal:
            raise UsageError(refusal)
        if self.rounds > 1 and getattr(self, "score_scaling", False):
            raise UsageError(
                f"--score-scaling with --rounds {self.rounds} would scale (and with --score-norm shift) the 0 that "
                f"every turn but the rewarded ones receives: drop --score-scaling"
            )

    def model_list(self) -> list[str]:
        """``--models`` as a list (empty without it)."""
        return [m.strip() for m in self.models.split(",") if m.strip()]

    def chain_length(self) -> int:
        """Agents in the chain: 1 for PPO; CORY's ``--num-agents``, or the length of ``--models``, or 2."""
        if self.algo == "ppo":
            return 1
        return self.num_agents or len(self.model_list()) or 2

    def learner_names(self) -> list[str]:
        """The learners: CORY's ``llm_0`` ... ``llm_{N-1}`` (the role exchange's names), PPO's ``pioneer``."""
        return list(learner_names(self.chain_length())) if self.algo == "cory" else ["pioneer"]

    def agent_models(self) -> dict[str, str]:
        """Each learner's model: ``--models`` in order (``__post_init__`` checked one per learner), or
        ``--model`` for all."""
        names = self.learner_names()
        return dict(zip(names, self.model_list() or [self.model] * len(names), strict=True))

    def template_list(self) -> list[str | list[str]] | None:
        """``--templates`` as a list, one entry per agent: a string, or with ``--rounds R`` a list of
        ``R`` strings, one per round (``None`` without it)."""
        if not self.templates:
            return None
        try:
            templates = json.loads(self.templates)
        except json.JSONDecodeError as exc:
            raise UsageError(
                f"--templates must be a JSON list of strings, one per agent, got {self.templates!r}: {exc}"
            ) from exc

        def one_entry(t: Any) -> bool:
            return isinstance(t, str) or (isinstance(t, list) and all(isinstance(x, str) for x in t))

        if not isinstance(templates, list) or not all(one_entry(t) for t in templates):
            raise UsageError(
                f"--templates must be a JSON list of strings, one per agent (with --rounds R an agent's entry may be "
                f"a list of R strings, one per round), got {self.templates!r}"
            )
        if len(templates) != self.chain_length():
            raise UsageError(
                f"--templates lists {len(templates)} template(s) for a chain of {self.chain_length()} agent(s): give one per agent"
            )
        return templates

    def check_batch(self) -> None:
        """The batch's shape, once presets and the task's defaults are in: minibatches and groups divide it."""
        mini = self.mini_batch(self.batch_size)
        if self.batch_size % mini:
            raise UsageError(f"--batch-size {self.batch_size} must be a multiple of --mini-batch-size {mini}")
        if (group_size := self.group_size_of_learner()) > 1:
            check_group_size(self.batch_size, group_size, self.learner)

    def group_size_of_learner(self) -> int:
        """Responses per prompt the learner compares: its section's ``group_size`` if it declares groups
        (:class:`~cory_agents.training.capabilities.Capabilities`), else 1. A team's is its own setting."""
        if not learner_spec(self.learner).supports.groups:
            return 1
        return int(getattr(self.learner_config(), "group_size", 1))

    @classmethod
    def for_learner(cls, *learners: str) -> type[TrainConfig]:
        """The config class holding the settings of ``learners`` (:func:`config_class`)."""
        return config_class(*learners)

    @classmethod
    def from_sections(cls, *sections: Any) -> TrainConfig:
        """The config of the sections a command line parsed (:func:`sections_for`), of the class that holds
        their learners' settings (:func:`config_class`); the settings of other learners keep their defaults."""
        values = {f.name: getattr(s, f.name) for s in sections for f in dataclasses.fields(s) if f.init}
        own = [getattr(s, "learner_name", None) for s in sections]
        return config_class(values.get("learner", cls.learner), *[n for n in own if n])(**values)

    def learner_config(self, section: type[LMLearnerConfig] | None = None) -> LMLearnerConfig:
        """The learner's own config (its :class:`~cory_agents.training.registry.LearnerSpec`'s section: ``PPOConfig``,
        ``GRPOConfig``, ...), or ``section`` (a learner you register that reuses PPO's, say), holding this run's
        values: its fields, read by name."""
        section = section or learner_section(self.learner)
        return section(**{f.name: getattr(self, f.name) for f in dataclasses.fields(section) if f.init})


@functools.cache
def _config_class(sections: tuple[type, ...]) -> type[TrainConfig]:
    name = "TrainConfig_" + "_".join(s.__name__ for s in sections)
    redeclared = []  # the sections' defaults win over TrainConfig's for a setting both have
    for section in sections:
        hints = typing.get_type_hints(section)
        for f in dataclasses.fields(section):
            if f.init:
                copy = dataclasses.field(default=f.default, default_factory=f.default_factory, metadata=f.metadata)
                redeclared.append((f.name, hints[f.name], copy))
    klass = dataclasses.make_dataclass(name, redeclared, bases=(TrainConfig, *sections), kw_only=True)
    klass.__module__ = __name__
    return klass


def config_class(*learners: str) -> type[TrainConfig]:
    """The config class that holds the settings of ``learners``: :class:`TrainConfig` for the built-in
    learners' sections (its own), else a subclass with the other learners' sections' fields (an installed
    learner's own flags), made once per set of sections."""
    extra = tuple(dict.fromkeys(s for s in map(learner_section, learners) if s not in TrainConfig.__mro__))
    return _config_class(extra) if extra else TrainConfig


def sections_for(learner: str) -> tuple[type, ...]:
    """The command line's sections for ``--learner learner``, in ``--help``'s order: the learner's
    own config (:class:`~cory_agents.training.registry.LearnerSpec`) between the game and the generation
    (under the learner's heading: its section's own ``_argument_group_name``, else ``Learner NAME``)."""
    return TaskConfig, ModelConfig, GameConfig, titled_section(learner), GenerationConfig, OutputConfig, SpeedConfig


def titled_section(learner: str) -> type:
    """``learner``'s section as the command line shows it: under its own heading, knowing its learner."""
    section = learner_section(learner)
    title = vars(section).get("_argument_group_name") or f"Learner {learner}: its own settings"
    return type(section.__name__, (section,), {"_argument_group_name": title, "learner_name": learner})


def learners_taking(arg: str) -> list[str]:
    """The learners (:func:`~cory_agents.training.registry.available_learners`) whose section has the flag
    ``arg`` (``--group-size``, ``--group_size=8``); none for a word that is not a flag.

    >>> learners_taking("--group-size=8"), learners_taking("--happo_factor_clip"), learners_taking("8")
    (['grpo', 'rloo'], ['happo'], [])
    """
    if not arg.startswith("--"):
        return []
    name = arg[2:].split("=")[0].replace("-", "_")
    taking = []
    for learner in available_learners():
        try:
            section = learner_section(learner)
        except UsageError:  # an installed learner that cannot load is reported when chosen
            continue
        if name in {f.name for f in dataclasses.fields(section)}:
            taking.append(learner)
    return taking


def learner_section(learner: str) -> type[LMLearnerConfig]:
    """``--learner learner``'s own config section (:class:`~cory_agents.training.registry.LearnerSpec`)."""
    return learner_spec(learner).config


def check_group_size(batch_size: int, group_size: int, learner: str) -> None:
    """Each prompt fills ``group_size`` conversations of the batch: the batch must hold whole groups."""
    if batch_size % group_size:
        raise UsageError(
            f"--batch-size {batch_size} must be a multiple of --group-size {group_size}: the {learner} learner "
            f"compares {group_size} responses per prompt, so each prompt fills {group_size} conversations"
        )


def resolve(config: TrainConfig, data_parallel: DataParallel | None = None) -> TrainConfig:
    """The settings a run is built from: every rewrite of ``config`` and every check across its fields, in one place.

    In order: the preset's values (:func:`apply_preset`), the task's defaults (:func:`with_task_defaults`),
    the minibatch size and the chain's length where they were left to follow, the batch's shape
    (:meth:`TrainConfig.check_batch`), the trackers (an unknown or uninstalled one fails now; the
    config keeps what it resolved to), then the checks against the launcher (``data_parallel``: FSDP
    and DeepSpeed ZeRO train full weights) and of the devices (:func:`check_devices`); accelerate's
    bf16 turns ``bf16`` on. Bad settings fail here, before a model is loaded. Resolving a resolved
    config changes nothing.
    """
    dp = data_parallel or DataParallel()
    task = get_task(config.task).in_chat_form() if in_chat_form(config) else get_task(config.task)
    config = with_task_defaults(apply_preset(config), task)
    if not task.min_agents <= config.chain_length() <= (task.max_agents or config.chain_length()):
        agents = f"{task.min_agents}" if task.max_agents == task.min_agents else f"at least {task.min_agents}"
        fix = "use --algo cory" if config.algo == "ppo" else f"give --num-agents {task.min_agents}"
        raise UsageError(
            f"--task {config.task} is a game of {agents} agents, but --algo {config.algo} plays "
            f"{config.chain_length()}: {fix}"
        )
    for name, game in (("num_secrets", "signal"), ("secret_words", "signal"), ("taboo_choices", "taboo")):
        if getattr(config, name) != TrainConfig.__dataclass_fields__[name].default and name not in task.prompt_options:
            raise UsageError(f"--{name.replace('_', '-')} is a setting of --task {game}, not of --task {config.task}")
    derived: dict[str, Any] = {}
    if config.mini_batch_size is None:  # it follows the batch size unless given
        derived["mini_batch_size"] = default_mini_batch_size(config.batch_size)
    if config.num_agents is None and config.algo == "cory":  # 2, or the length of --models
        derived["num_agents"] = config.chain_length()
    config = dataclasses.replace(config, **derived)
    config.check_batch()
    launch = "FSDP" if dp.fsdp is not None else "DeepSpeed ZeRO" if dp.zero is not None else ""
    refusal = learner_spec(config.learner).supports.refusal(
        config.learner,
        private_fields=bool(task.private_fields),
        group_size=int(getattr(config.learner_config(), "group_size", 1)),
        launch=launch or ("data parallel" if dp.is_distributed else ""),
    )
    if refusal:
        raise UsageError(refusal)
    config = dataclasses.replace(config, report_to=",".join(resolve_report_to(config.report_to)) or "none")
    if dp.fsdp is not None and config.lora:
        raise UsageError(
            "FSDP shards full fine-tuning only: --lora keeps one frozen base shared by two adapters. Drop --lora, "
            "or launch --lora with examples/accelerate/multi_gpu.yaml (data parallel)"
        )
    if dp.zero is not None and config.lora:
        raise UsageError(
            "DeepSpeed ZeRO is supported for full fine-tuning only: drop --lora, or launch --lora with "
            "examples/accelerate/multi_gpu.yaml (data parallel)"
        )
    if config.gradient_checkpointing_observer and (config.algo != "cory" or dp.sharded or dp.zero is not None):
        raise UsageError(
            "--gradient-checkpointing-observer applies to CORY's observer in a single process or data-parallel run; "
            "with --algo ppo, FSDP or DeepSpeed use --gradient-checkpointing (every update)"
        )
    if config.gradient_checkpointing_observer and isinstance(learner_spec(config.learner).factory, TeamFactory):
        raise UsageError(
            f"--gradient-checkpointing-observer recomputes activations in the observer's update; the team learner "
            f"{config.learner!r} runs its members' updates itself: use --gradient-checkpointing (every update)"
        )
    if config.compile and config.lora:
        raise UsageError(
            "--compile with --lora: the learners' adapters take turns on one shared model, and each switch would "
            "make torch.compile compile the decode step again; drop --compile, or train full copies without --lora"
        )
    if config.compile and (dp.sharded or dp.zero is not None):
        raise UsageError(
            "--compile decodes with whole weights in one process's static cache; under FSDP or DeepSpeed ZeRO the "
            "acting weights are gathered for each turn: drop --compile there, or launch data parallel "
            "(examples/accelerate/multi_gpu.yaml)"
        )
    check_devices(config, dp)
    if config.load_in_4bit and not config.lora:
        raise UsageError("--load-in-4bit needs --lora: bitsandbytes 4-bit weights are frozen, so only adapters train")
    if config.load_in_4bit and importlib.util.find_spec("bitsandbytes") is None:
        raise PackageNotInstalledError(
            "--load-in-4bit needs the bitsandbytes package, which is not installed: pip install bitsandbytes "
            "(on a machine with a CUDA GPU), or drop --load-in-4bit"
        )
    if dp.bf16 and not config.bf16:
        config = dataclasses.replace(config, bf16=True)
    return config


#: The paper's IMDB settings (tables 1-2); explicit flags still win.
PRESETS: dict[str, dict[str, Any]] = {
    "paper-imdb": dict(
        model="gpt2-large",
        reward="lvwerra/distilbert-imdb",
        prompt_source="imdb",
        iterations=100,
        batch_size=256,
        mini_batch_size=256,
        ppo_epochs=4,
        lr=1.41e-5,
        kl_coef=0.3,
        gamma=1.0,
        lam=0.95,
        cliprange=0.2,
        cliprange_value=0.2,
        vf_coef=0.1,
        role_exchange_period=5,
        min_new_tokens=4,
        max_new_tokens=15,
    ),
}


def apply_preset(config: TrainConfig) -> TrainConfig:
    """Fill the preset's values into fields still at their defaults."""
    if not config.preset:
        return config
    defaults = TrainConfig()
    changes = {k: v for k, v in PRESETS[config.preset].items() if getattr(config, k) == getattr(defaults, k)}
    return dataclasses.replace(config, **changes)


def build_task(config: TrainConfig) -> Task:
    """The task of ``--task``; with ``--task-file``, that file's prompts with the task's settings."""
    task = get_task(config.task)
    if config.task_file:
        task = custom_task(config.task_file, like=task, name="custom", query_field=config.query_field)
    task = task.in_chat_form() if in_chat_form(config) else task
    if task.prompt_options and not config.task_file:  # the task's own settings (--num-secrets), for its prompts
        options = {name: getattr(config, name) for name in task.prompt_options}
        task = dataclasses.replace(task, prompts=functools.partial(task.prompts, **options))
    return task


def with_task_defaults(config: TrainConfig, task: Task) -> TrainConfig:
    """Fill the fields left empty (reward, lengths, context) with the task's choices."""
    changes: dict[str, Any] = dict(
        reward=config.reward or task.default_reward,
        min_new_tokens=config.min_new_tokens or task.min_new_tokens,
        max_new_tokens=config.max_new_tokens or task.max_new_tokens,
        context_length=config.context_length or task.context_length,
    )
    if not config.min_new_tokens and changes["min_new_tokens"] > changes["max_new_tokens"]:
        changes["min_new_tokens"] = changes["max_new_tokens"]  # --max-new-tokens below the task's minimum
    return dataclasses.replace(config, **changes)
