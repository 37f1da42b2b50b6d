"""The ``--learner`` registry: each learner's factory, its own settings and what it supports.

A learner is registered as a :class:`LearnerSpec` (:func:`register_learner`): its factory, its config
section (a dataclass of its own settings, each a flag of ``cory-train``) and its
:class:`~cory_agents.training.capabilities.Capabilities`. An installed package registers its learners
for every command (``cory-train``, ``cory-eval``, ``cory-export``, ``cory-bench``) with an entry point
of the group :data:`ENTRY_POINT_GROUP` naming a :class:`LearnerSpec`::

    [project.entry-points."cory_env.learners"]
    magrpo = "magrpo_learner:MAGRPO"

:func:`learner_spec` finds a name among the registered learners and the entry points (loading only the
one asked for); a name that two packages declare is refused naming both.

A factory is called once per learner when a run is assembled (:func:`cory_agents.training.build.assemble`)::

    factory(config, *, policy, reference, seed, sampling, device)

``config`` is the run's resolved :class:`~cory_agents.training.config.TrainConfig` (its
``learner_config()``: the learner's own section, :attr:`LearnerSpec.config`), ``policy`` this
learner's trainable causal LM (full copy or LoRA adapter view, on ``device``), ``reference``
its frozen reference (learners on one device share it), ``sampling`` LMActor's keyword
arguments. Under ``accelerate launch`` the factory also gets ``data_parallel``
(:class:`~cory_agents.distributed.data_parallel.DataParallel`): the learner must then average its
gradients over the processes (``data_parallel.average_gradients``) so that their weights stay
equal, and under FSDP shard any module it adds to ``policy`` (``data_parallel.shard``) before
building its optimizer (``policy`` and ``reference`` come sharded).

A *team learner* (:mod:`cory_agents.learners.team`: one object that learns for all the agents at once
from the whole team's episodes) has a :class:`TeamFactory` as its factory: its members are built by
the per-agent factory of the learner ``member``, one per agent as above, then ``build(config, members,
seed=config.seed)`` makes the team (a ``build`` that takes ``run`` also gets the run's
:class:`~cory_agents.learners.team.TeamRun`, to own modules). ``happo`` (:mod:`cory_agents.learners.happo`),
``difference`` (:mod:`cory_agents.learners.difference`) and ``mappo`` (:mod:`cory_agents.learners.mappo`) are team
learners over PPO members. See docs/plug-in-your-algorithm.md. This module reads the config only
through the factories' argument, so the config can name the registry's choices without importing the
rest of the build.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from cory_agents.learners.base import Learner
from cory_agents.learners.difference import DifferenceConfig, DifferenceRewards
from cory_agents.learners.grpo import GRPOConfig, GRPOLearner, RLOOConfig
from cory_agents.learners.happo import HAPPO, HAPPOConfig
from cory_agents.learners.lm import LMLearnerConfig
from cory_agents.learners.mappo import MAPPO, MAPPOConfig, build_critic
from cory_agents.learners.ppo import PPOConfig, PPOLearner
from cory_agents.learners.team import TeamLearner, TeamRun
from cory_agents.learners.value_model import CausalLMWithValueHead
from cory_agents.speed import padding_free
from cory_agents.speed.cpu_linear import use_cpu_linear
from cory_agents.speed.scoring_reuse import reuse_scoring_pass
from cory_agents.training.capabilities import Capabilities
from cory_env.errors import UsageError
from cory_env.models import load_causal_lm

LearnerFactory = Callable[..., Learner]


def ppo_learner(config, *, policy, reference, seed, sampling, device, data_parallel=None) -> PPOLearner:
    """PPO-LLM: the policy gets a value head (critic)."""
    model = CausalLMWithValueHead(policy).to(device)
    if config.padding_free:  # the value head packs once, around the LM (cory_agents.speed.padding_free)
        padding_free.enable(model)
    if data_parallel is not None:
        data_parallel.shard(model.v_head)  # FSDP: the value head is a unit of its own (the LM is one already)
    learner = PPOLearner(model, reference, config.learner_config(), seed, sampling, data_parallel=data_parallel)
    return reuse_scoring_pass(learner) if config.reuse_scoring_pass else learner


def grpo_learner(config, *, policy, reference, seed, sampling, device, data_parallel=None) -> GRPOLearner:
    """GRPO: group-normalised advantages, k3 KL term in the loss; no value head."""
    return GRPOLearner(policy, reference, config.learner_config(), seed, sampling, data_parallel=data_parallel)


def rloo_learner(config, *, policy, reference, seed, sampling, device, data_parallel=None) -> GRPOLearner:
    """RLOO: leave-one-out baseline, KL penalty in the reward; no value head."""
    return GRPOLearner(policy, reference, config.learner_config(), seed, sampling, data_parallel=data_parallel)


@dataclass(frozen=True)
class TeamFactory:
    """How ``--learner NAME`` builds a team learner: ``member`` names the per-agent factory of
    :data:`LEARNERS` that builds each member (with this learner's config section), then
    ``build(config, members, seed=...)`` returns the :class:`~cory_agents.learners.team.TeamLearner`."""

    member: str
    build: Callable[..., TeamLearner]


def happo_team(config, members, *, seed) -> HAPPO:
    """HAPPO: the members updated one after another, in a random order each iteration."""
    return HAPPO(members, seed=seed, factor_clip=config.happo_factor_clip)


def difference_team(config, members, *, seed) -> DifferenceRewards:
    """Difference rewards: each member learns from its own contribution (a counterfactual rollout)."""
    c = config.learner_config()
    return DifferenceRewards(members, replays=c.difference_replays, common_random_numbers=c.common_random_numbers)


def mappo_team(config, members, *, seed, run: TeamRun) -> MAPPO:
    """MAPPO: PPO members and one critic over the global state, a fresh copy of the run's model that the team owns."""
    model = config.agent_models()[next(iter(members))]  # one model for the whole team (the config checked)
    critic = build_critic(load_causal_lm(model, device=run.device))
    if config.padding_free:
        padding_free.enable(critic)
    if config.cpu_linear and run.device.type == "cpu":
        use_cpu_linear(critic.lm)
    if config.gradient_checkpointing:
        critic.lm.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    run.data_parallel.shard(critic.lm)  # FSDP: as a member's policy, the LM by its decoder layers, the head alone
    run.data_parallel.shard(critic.v_head)
    critic = run.own("critic", critic)
    tokenizer = run.tokenizers[next(iter(members))]
    return MAPPO(members, critic, tokenizer, run, config.learner_config(), seed=seed)


@dataclass(frozen=True)
class LearnerSpec:
    """What ``--learner NAME`` builds: its ``factory`` (per-agent, or a :class:`TeamFactory`), its ``config``
    section (its own settings: a dataclass of :func:`~cory_agents.learners.lm.flag` fields, usually a subclass of
    :class:`~cory_agents.learners.lm.LMLearnerConfig`; a team's members get the team's) and what it
    ``supports``. ``origin``: the distribution that declared it (entry points), for messages."""

    factory: LearnerFactory | TeamFactory
    config: type = LMLearnerConfig
    supports: Capabilities = field(default_factory=Capabilities)
    origin: str = ""


PPO_SUPPORTS = Capabilities.all()
GROUP_SUPPORTS = Capabilities.all(rounds=False, turn_rewards=False)
TEAM_SUPPORTS = Capabilities.all(groups=False)

#: The learners by name, built-in and registered (:func:`register_learner`); installed packages' are found
#: through :data:`ENTRY_POINT_GROUP` by :func:`learner_spec` and kept here once loaded.
LEARNERS: dict[str, LearnerSpec] = {
    "ppo": LearnerSpec(ppo_learner, PPOConfig, Capabilities.all(groups=False)),
    "grpo": LearnerSpec(grpo_learner, GRPOConfig, GROUP_SUPPORTS),
    "rloo": LearnerSpec(rloo_learner, RLOOConfig, GROUP_SUPPORTS),
    "happo": LearnerSpec(TeamFactory("ppo", happo_team), HAPPOConfig, TEAM_SUPPORTS),
    "difference": LearnerSpec(TeamFactory("ppo", difference_team), DifferenceConfig, TEAM_SUPPORTS),
    "mappo": LearnerSpec(
        TeamFactory("ppo", mappo_team), MAPPOConfig, Capabilities.all(groups=False, different_models=False)
    ),
}
BUILT_IN = frozenset(LEARNERS)
_CHECKED: set[str] = set()  # names checked against the installed packages' entry points

#: The entry-point group installed packages declare learners in (rewards: ``cory_env.rewards``).
ENTRY_POINT_GROUP = "cory_env.learners"


def register_learner(
    name: str,
    factory: LearnerFactory | TeamFactory,
    *,
    config: type | None = None,
    supports: Capabilities | None = None,
) -> LearnerSpec:
    """Make ``--learner name`` build ``factory``, with its own ``config`` section (default: a team's
    member's, else :class:`~cory_agents.learners.lm.LMLearnerConfig`) and what it ``supports`` (default: a
    plain per-agent learner's, :class:`~cory_agents.training.capabilities.Capabilities`). Register before the
    command line is parsed. A name registered already is refused: :func:`unregister_learner` it first."""
    if name in LEARNERS:
        raise ValueError(f"a learner named {name!r} is registered already: unregister_learner({name!r}) first")
    LEARNERS[name] = spec = LearnerSpec(factory, config or default_config(factory), supports or Capabilities())
    return spec


def unregister_learner(name: str) -> None:
    """Forget a learner :func:`register_learner` added (a built-in stays)."""
    if name not in BUILT_IN:
        LEARNERS.pop(name, None)
        _CHECKED.discard(name)


def _entry_points() -> dict[str, list[importlib.metadata.EntryPoint]]:
    """The group's entry points by name, one per declaring distribution."""
    found: dict[str, dict[str, importlib.metadata.EntryPoint]] = {}
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        found.setdefault(ep.name, {}).setdefault(_distribution(ep), ep)  # a distribution seen twice on sys.path
    return {name: list(by_dist.values()) for name, by_dist in found.items()}


def _distribution(entry_point: importlib.metadata.EntryPoint) -> str:
    return getattr(entry_point.dist, "name", None) or "an installed package"


def available_learners() -> list[str]:
    """Every ``--learner`` name, without importing anything: the registered ones in their order (the built-in
    ones first), then installed packages' entry points."""
    return [*LEARNERS, *sorted(set(_entry_points()) - set(LEARNERS))]


def learner_spec(name: str) -> LearnerSpec:
    """The :class:`LearnerSpec` of ``--learner name``: a registered learner, or an installed package's entry point
    (loaded now, then kept). A name declared by two packages (or by a package and cory-env) is refused naming
    both; an unknown name lists the others."""
    known = LEARNERS.get(name)
    if known is not None and not isinstance(known, LearnerSpec):  # LEARNERS[name] = factory: a plain registration
        known = LEARNERS[name] = LearnerSpec(known, default_config(known))
    if known is not None and name in _CHECKED:
        return known
    declared = [ep for ep in _entry_points().get(name, []) if known is None or known.origin != _distribution(ep)]
    owners = ([("cory-env" if name in BUILT_IN else known.origin or "this program")] if known else []) + [
        _distribution(ep) for ep in declared
    ]
    if len(owners) > 1:
        raise UsageError(
            f"--learner {name} is declared by {' and by '.join(owners)}: uninstall one of them (pip uninstall), "
            f"or rename its entry point in the group {ENTRY_POINT_GROUP!r}"
        )
    if known is not None:
        _CHECKED.add(name)
        return known
    if not declared:
        raise UsageError(
            f"--learner {name!r} is not a learner: choose one of {', '.join(available_learners())}, register yours "
            f"(register_learner), or install a package that declares it (entry point group {ENTRY_POINT_GROUP!r})"
        )
    LEARNERS[name] = spec = _load(declared[0])
    return spec


def default_config(factory: LearnerFactory | TeamFactory) -> type:
    """The config section of a learner registered without one: a team's member's, else the shared
    :class:`~cory_agents.learners.lm.LMLearnerConfig`."""
    return learner_spec(factory.member).config if isinstance(factory, TeamFactory) else LMLearnerConfig


def _load(entry_point: importlib.metadata.EntryPoint) -> LearnerSpec:
    dist = _distribution(entry_point)
    where = f"{dist} (entry point {entry_point.name} = {entry_point.value!r} in the group {ENTRY_POINT_GROUP!r})"
    try:
        spec = entry_point.load()
    except Exception as exc:  # noqa: BLE001 - reported with where it came from
        raise UsageError(
            f"--learner {entry_point.name}, declared by {where}, cannot be loaded: {type(exc).__name__}: {exc}"
        ) from exc
    if not isinstance(spec, LearnerSpec):
        raise UsageError(
            f"--learner {entry_point.name}, declared by {where}, is a {type(spec).__name__}: the entry point must "
            f"name a cory_agents.training.registry.LearnerSpec (LearnerSpec(factory, config=..., supports=...))"
        )
    return LearnerSpec(spec.factory, spec.config, spec.supports, origin=dist)


class LearnerNames:
    """The ``--learner`` choices as argparse reads them (``in``, iteration): :func:`available_learners`, live."""

    def __iter__(self) -> Iterator[str]:
        return iter(available_learners())

    def __contains__(self, name: object) -> bool:
        return name in available_learners()

    def __len__(self) -> int:
        return len(available_learners())
