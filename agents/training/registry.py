"""The ``--learner`` registry: :data:`LEARNERS`, the factories that build one learner each.

A factory is called once per learner when a run is assembled (:func:`cory_agents.training.build.assemble`)::

    factory(config, *, policy, reference, seed, sampling, device)

``config`` is the run's resolved :class:`~cory_agents.training.config.TrainConfig` (its
``learner_config()``: the learner's own config, :data:`LEARNER_CONFIGS`), ``policy`` this
learner's trainable causal LM (full copy or LoRA adapter view, on ``device``), ``reference``
its frozen reference (learners on one device share it), ``sampling`` LMActor's keyword
arguments. Under ``accelerate launch`` the factory also gets ``data_parallel``
(:class:`~cory_agents.distributed.data_parallel.DataParallel`): the learner must then average its
gradients over the processes (``data_parallel.average_gradients``) so that their weights stay
equal, and under FSDP shard any module it adds to ``policy`` (``data_parallel.shard``) before
building its optimizer (``policy`` and ``reference`` come sharded).

A *team learner* (:mod:`cory_agents.learners.team`: one object that learns for all the agents at once
from the whole team's episodes) is registered as a :class:`TeamFactory`: its members are built by
the per-agent factory ``LEARNERS[member]``, one per agent as above, then ``build(config, members,
seed=config.seed)`` makes the team (a ``build`` that takes ``run`` also gets the run's
:class:`~cory_agents.learners.team.TeamRun`, to own modules). ``happo`` (:mod:`cory_agents.learners.happo`),
``difference`` (:mod:`cory_agents.learners.difference`) and ``mappo`` (:mod:`cory_agents.learners.mappo`) are team
learners over PPO members.

Register another algorithm with ``LEARNERS["name"] = factory`` (or a ``TeamFactory``) before the
config is made (or the command-line parser built): see docs/plug-in-your-algorithm.md. This
module reads the config only through the factories' argument, so the config can name the
registry's choices without importing the rest of the build.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

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


#: ``--learner`` choices, by name: a per-agent factory, or a :class:`TeamFactory`.
LEARNERS: dict[str, LearnerFactory | TeamFactory] = {
    "ppo": ppo_learner,
    "grpo": grpo_learner,
    "rloo": rloo_learner,
    "happo": TeamFactory("ppo", happo_team),
    "difference": TeamFactory("ppo", difference_team),
    "mappo": TeamFactory("ppo", mappo_team),
}

#: Each learner's own config: its section of the command line (``cory-train --learner NAME --help``)
#: and what ``TrainConfig.learner_config()`` gives its factory (a team's members get the team's). A
#: learner registered without one gets the shared :class:`~cory_agents.learners.lm.LMLearnerConfig`
#: section; its factory reads any other setting from the run's config.
LEARNER_CONFIGS: dict[str, type[LMLearnerConfig]] = {
    "ppo": PPOConfig,
    "grpo": GRPOConfig,
    "rloo": RLOOConfig,
    "happo": HAPPOConfig,
    "difference": DifferenceConfig,
    "mappo": MAPPOConfig,
}
