"""The team-level learner interface: one object that learns for several agents at once.

A per-agent :class:`~cory_agents.learners.base.Learner` sees its own batch only. A *team learner*
sees the whole team's iteration: every member's :class:`~cory_agents.learners.base.Episode`, each
with the role it played, row ``b`` of every episode being conversation ``b`` (the same query,
and for a later agent the earlier agents' answers in its prompt). That is what multi-agent
algorithms need: sequential updates that weight one agent's advantage by the others' policy
change (:mod:`cory_agents.learners.happo`), credit for one agent's part in the collective reward
(:mod:`cory_agents.learners.difference`), a critic over the whole transcript.

A team learner has:

- ``members``: ``{learner name: Learner}``, one per agent (``llm_0``, ``llm_1``, ...). Each
  member acts for its agent and keeps its own ``state_dict``, so checkpoints, exported models,
  ``cory-eval`` and ``cory-bench`` see the members as they see the learners of CORY;
- ``learn(team_episode)``: called once per iteration with the :class:`TeamEpisode`; returns
  ``{learner name: {statistic: float}}`` (logged as ``<learner>/<statistic>``, as a per-agent
  learner's; another key, such as ``"team"``, is logged the same way);
- ``state_dict()`` / ``load_state_dict(state)``: the team's own state beyond its members'
  (its random generator, a shared critic, ...), saved under ``"team"`` in the checkpoint. In a
  data-parallel run the main process's is saved and every process loads it: keep it the same on
  every process (draw from generators seeded alike, average what you learn), whole (no FSDP shards).

A team learner may own modules of its own (a shared critic): its factory gets a :class:`TeamRun`, the
run's device, tokenizers, frozen references and processes, and hands each such module to
``run.own(name, module)``, which places it on the device with the same weights on every process
(sharded under FSDP), before building its optimizer and stepping it through ``run.optimizer_steps``
(the members' interface: gradients averaged over the processes, clipped, a non-finite step refused).
The trainer then saves the team's ``state_dict`` whole (gathered from FSDP shards) and loads it back
into the shards, and checks that an owned module's weights are the same on every process.

``act`` is the members'; the trainer calls ``members[agent].act``. The role schedule is the
environment's (:class:`~cory_env.RoleExchangeWrapper`): ``TeamEpisode.roles`` says who sat where.

:class:`IndependentLearners` is the team of per-agent learners that each learn alone (CORY:
independent PPO on the collective reward); the trainer wraps a per-agent ``--learner`` in it.
Register a team learner with a :class:`cory_agents.training.registry.TeamFactory` as its factory
(:func:`cory_agents.training.registry.register_learner`); see docs/plug-in-your-algorithm.md ("Team learners").
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch
from pettingzoo import AECEnv
from torch import nn

from cory_agents.distributed.data_parallel import DataParallel
from cory_agents.distributed.fsdp import is_sharded
from cory_agents.distributed.optimizer_step import OptimizerSteps, optimizer_steps
from cory_agents.learners.base import Episode, Learner


@dataclass
class TeamEpisode:
    """One iteration of the whole team: each member's episode and role, aligned by conversation.

    ``episodes[name]`` is learner ``name``'s :class:`~cory_agents.learners.base.Episode` (row ``b`` is
    conversation ``b`` in every one of them); ``roles[name]`` the chain position it played
    (``"pioneer"``, ``"observer"``, ``"observer_1"``, ...); ``env`` the unwrapped environment that
    played the episode (its ``possible_agents`` are the roles in chain order; a learner that
    replays part of the episode uses its ``reset(options={"answers": ...})`` on a copy);
    ``acting()`` the context in which the members may act again (under FSDP the whole weights are
    gathered in it, so that acting is not a collective: act only inside it); ``data_parallel`` the
    run's processes: in a data-parallel run each process holds its own conversations, so a statistic
    over the whole batch is taken with its ``mean`` or ``gather`` (on every process: a collective).
    """

    episodes: dict[str, Episode]
    roles: dict[str, str]
    env: AECEnv | None = None
    acting: Callable[[], contextlib.AbstractContextManager[None]] = contextlib.nullcontext
    data_parallel: DataParallel = field(default_factory=DataParallel)
    #: Each member's sampling generator state at the start of each of its turns in the episode (the
    #: trainer's rollout records it; :func:`~cory_agents.learners.replay.replay` reuses it for common random numbers).
    sampling_states: dict[str, list[torch.Tensor]] = field(default_factory=dict)

    @property
    def order(self) -> list[str]:
        """The learners in chain order this iteration, the pioneer first (without ``env``: the
        episodes' order, which the trainer gives in chain order)."""
        if self.env is not None:
            position = {role: k for k, role in enumerate(self.env.possible_agents)}
            return sorted(self.episodes, key=lambda name: position[self.roles[name]])
        return list(self.episodes)

    @property
    def collective_rewards(self) -> np.ndarray:
        """``(B,)`` the sum of the members' task rewards per conversation (CORY's collective reward)."""
        return np.sum([ep.task_rewards for ep in self.episodes.values()], axis=0)


@dataclass
class TeamRun:
    """What the trainer lends a team learner's factory (``build(config, members, seed=..., run=...)``): the run's
    main ``device``, each member's ``tokenizers`` and frozen ``references``, its ``data_parallel`` processes,
    and :meth:`own` for the modules the team trains itself (``modules``: what it owns, by name)."""

    device: torch.device
    tokenizers: dict[str, Any] = field(default_factory=dict)
    references: dict[str, nn.Module] = field(default_factory=dict)
    data_parallel: DataParallel = field(default_factory=DataParallel)
    modules: dict[str, nn.Module] = field(default_factory=dict)
    _optimizers: int = field(default=0, repr=False)

    def own(self, name: str, module: nn.Module) -> nn.Module:
        """Place a module the team trains (its trainable weights: ``requires_grad``): on the device, with the
        main process's weights on every process, sharded under FSDP (as one unit with its decoder layers; a module
        whose parts the caller sharded already, ``data_parallel.shard(part)``, is left as they are). Build its
        optimizer from the module returned, after this call."""
        if name in self.modules:
            raise ValueError(f"the team already owns a module named {name!r}")
        module = module.to(self.device)
        if self.data_parallel.sharded and not any(is_sharded(p) for p in module.parameters()):
            self.data_parallel.shard(module)
        self.data_parallel.broadcast_parameters(module.parameters())
        self.modules[name] = module
        return module

    def optimizer_steps(
        self, module: nn.Module, optimizer: torch.optim.Optimizer, max_grad_norm: float | None = None
    ) -> OptimizerSteps:
        """How ``optimizer`` (over an owned module's weights) steps in this run, as a member's does
        (:mod:`cory_agents.distributed.optimizer_step`): ``backward(loss)``, ``step()``, ``state_dict()``.

        Under FSDP the trainer re-shards a resumed team state as a member's: the owned modules' weights by name,
        and one optimizer's state, saved under the key ``"optimizer"`` of the team's ``state_dict``, over the
        owned modules' weights in the order :meth:`own` received them; so one optimizer per team there."""
        if self.data_parallel.sharded and self._optimizers:
            raise ValueError(
                "under FSDP a team steps one optimizer over all its owned modules (saved under 'optimizer' in its "
                "state_dict): build one optimizer over every module you own()"
            )
        self._optimizers += 1
        return optimizer_steps(module, optimizer, self.data_parallel, max_grad_norm)

    def trainable_parameters(self) -> list[nn.Parameter]:
        """The owned modules' trainable weights, in order (the trainer loads a sharded checkpoint into them)."""
        return [p for module in self.modules.values() for p in module.parameters() if p.requires_grad]


@runtime_checkable
class TeamLearner(Protocol):
    """A learner for several agents at once (see the module docstring for the contract)."""

    members: dict[str, Learner]

    def learn(self, team: TeamEpisode) -> dict[str, dict[str, float]]:
        """Update every member from the team's iteration; return each one's statistics."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """The team's own state, beyond its members' (``{}`` when it has none)."""
        ...

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""
        ...


class IndependentLearners:
    """Per-agent learners, each learning alone from its own episode (in chain order): CORY's
    independent PPO, or any per-agent ``--learner`` (:func:`~cory_agents.training.registry.learner_spec`).

    ``around(name, role)``, if given, is a context manager each member's update runs in
    (``--gradient-checkpointing-observer``: the trainer's)."""

    def __init__(
        self,
        members: dict[str, Learner],
        around: Callable[[str, str], contextlib.AbstractContextManager[None]] | None = None,
    ):
        self.members = members
        self.around = around or (lambda name, role: contextlib.nullcontext())

    def learn(self, team: TeamEpisode) -> dict[str, dict[str, float]]:
        stats = {}
        for name in team.order:
            with self.around(name, team.roles[name]):
                stats[name] = self.members[name].learn(team.episodes[name])
        return stats

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass
