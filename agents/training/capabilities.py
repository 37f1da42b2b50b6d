"""What a learner supports, declared with it: :class:`Capabilities`, and the refusals they make.

A learner is registered with what it can learn from and how it can be run
(:func:`cory_agents.training.registry.register_learner`, ``supports=``). The command line checks a run's
settings against them before anything is built, and a refusal names the capability, the learner and
the way out, so no check anywhere lists learners by name. What a learner does not declare it does
not get: the defaults are what any learner of the :class:`~cory_agents.learners.base.Learner`
interface can do.

Example:
    >>> caps = Capabilities(rounds=True)
    >>> caps.refusal("magrpo", rounds=2, turn_rewards=True, agents=2, different_models=False)
    '--turn-rewards with --rounds 2 needs a learner that supports a score at each turn (Capabilities.turn_rewards), and --learner magrpo does not declare it: drop --turn-rewards, or choose a learner that does'
"""

from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass(frozen=True)
class Capabilities:
    """What a learner declares it supports; each field says what the run may then ask of it.

    The defaults are those of a plain per-agent learner: one turn per agent, any chain length, any
    models, LoRA adapters (it trains the ``policy`` it is given), private prompt fields (the
    environment keeps them), one process, eager decoding.
    """

    #: ``--rounds R > 1``: learns from several turns per agent (``Episode.turns > 1``, rows turn-major).
    rounds: bool = False
    #: ``--turn-rewards`` over several rounds: learns from a score at each turn's end (``Episode.scores`` per row).
    turn_rewards: bool = False
    #: ``--group-size G``: compares G responses to each prompt; the trainer repeats each prompt G times in a row
    #: (the learner's config section has the field ``group_size``).
    groups: bool = False
    #: The most agents in a chain (``--num-agents``); ``None``: any.
    max_agents: int | None = None
    #: ``--models`` with different models for the agents (each its own tokenizer and reference).
    different_models: bool = True
    #: ``--lora``: trains the adapter view of one shared frozen base it is given as ``policy``.
    lora: bool = True
    #: Tasks with private prompt fields (``--task signal``: what only some agents see).
    private_fields: bool = True
    #: ``accelerate launch`` data parallel: averages its gradients over the processes (``data_parallel``).
    data_parallel: bool = False
    #: FSDP and DeepSpeed ZeRO: trains sharded weights (implies ``data_parallel``).
    sharded: bool = False
    #: ``--compile``: acts through :class:`~cory_agents.acting.actor.LMActor` with the ``sampling`` it is given.
    compile: bool = False

    @classmethod
    def all(cls, **except_: object) -> Capabilities:
        """Every capability (any chain length), but those given: the built-in learners' declarations."""
        every = {f.name: True for f in fields(cls) if f.name != "max_agents"}
        return cls(**{**every, "max_agents": None, **except_})

    def refusal(
        self,
        learner: str,
        *,
        rounds: int = 1,
        turn_rewards: bool = False,
        agents: int = 1,
        different_models: bool = False,
        lora: bool = False,
        private_fields: bool = False,
        group_size: int = 1,
        launch: str = "",
        compile: bool = False,
    ) -> str:
        """Why a run with these settings cannot train ``learner`` ("" when it can): the first capability it needs
        and the learner does not declare. ``launch``: ``""`` (one process), ``"data parallel"``, ``"FSDP"`` or
        ``"DeepSpeed ZeRO"``."""
        needs = [
            (
                rounds > 1 and not self.rounds,
                f"--rounds {rounds}",
                "several turns per agent",
                "rounds",
                "use --rounds 1",
            ),
            (
                rounds > 1 and turn_rewards and not self.turn_rewards,
                f"--turn-rewards with --rounds {rounds}",
                "a score at each turn",
                "turn_rewards",
                "drop --turn-rewards",
            ),
            (group_size > 1 and not self.groups, f"--group-size {group_size}", "groups of responses", "groups", ""),
            (
                self.max_agents is not None and agents > self.max_agents,
                f"a chain of {agents} agents",
                f"at most {self.max_agents} agents",
                "max_agents",
                f"use --num-agents {self.max_agents}",
            ),
            (
                different_models and not self.different_models,
                "--models with different models",
                "a team of different models",
                "different_models",
                "give one --model",
            ),
            (lora and not self.lora, "--lora", "LoRA adapters on a shared base", "lora", "drop --lora"),
            (private_fields and not self.private_fields, "this task", "private prompt fields", "private_fields", ""),
            (
                launch == "data parallel" and not (self.data_parallel or self.sharded),
                "accelerate launch",
                "gradients averaged over processes",
                "data_parallel",
                "run in one process",
            ),
            (
                launch in ("FSDP", "DeepSpeed ZeRO") and not self.sharded,
                launch,
                "sharded weights",
                "sharded",
                "launch data parallel",
            ),
            (compile and not self.compile, "--compile", "LMActor's static-cache decode", "compile", "drop --compile"),
        ]
        for needed, setting, what, name, fix in needs:
            if needed:
                return (
                    f"{setting} needs a learner that supports {what} (Capabilities.{name}), and --learner {learner} "
                    f"does not declare it: {fix + ', or ' if fix else ''}choose a learner that does"
                )
        return ""
