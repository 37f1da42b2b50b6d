"""``cory-bench``'s own flags (the training flags are cory-train's): what runs, how it is decided, how it is run.

- **What runs**: ``--algos`` (the first the baseline), ``--seeds`` from ``--seed``, ``--out``, ``--resume`` /
  ``--overwrite``, the held-out evaluation's ``--eval-*`` settings.
- **How it is decided**: ``--final-window`` (aligned to the role exchange: never cut by a swap,
  :func:`~cory_agents.evaluation.rl_statistics.aligned_window`), the ``--margin`` declared before the runs,
  ``--alpha``; ``--plan`` (:mod:`~cory_agents.evaluation.plan`) reads a pilot, ``--sequential`` adds seeds in
  ``--stages`` until every comparison is decided or ``--budget-hours`` is spent
  (:mod:`~cory_agents.evaluation.sequential`).
- **How it is run**: ``--jobs`` runs in parallel processes (one thread each).
- **What is kept**: ``--archive``, ``--report-only``, ``--export marl-eval`` (:mod:`~cory_agents.evaluation.archive`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from cory_agents.learners.lm import flag
from cory_agents.training.config import ALGOS
from cory_agents.training.registry import available_learners
from cory_env.errors import UsageError

#: ``--algos`` by default: the single-agent baseline and CORY.
DEFAULT_ALGOS = ("ppo", "cory")
#: ``--sequential``'s alpha-spending functions (Lan and DeMets, 1983).
SPENDING = ("obrien-fleming", "pocock")


@dataclass
class BenchmarkConfig:
    """The benchmark's own flags; the training flags come from TrainConfig."""

    out: str = flag("runs/reward-benchmark", "benchmark folder: runs, report.md, report.json, plots")
    seeds: int = flag(3, "seeds per algorithm (the paper: 3)")
    seed: int = flag(0, "first seed; the runs use seed, seed + 1, ... (the same seeds for every entry: paired)")
    algos: list[str] = field(
        default_factory=lambda: list(DEFAULT_ALGOS),
        metadata={"help": "algorithms to compare, the first the baseline: ppo, cory, or ALGO:LEARNER (cory:happo)"},
    )
    resume: bool = flag(False, "continue the benchmark in --out: skip finished runs, resume half-finished ones")
    overwrite: bool = flag(False, "start over in an --out that already holds a benchmark (deletes its runs)")
    eval_prompts: int = flag(64, "held-out prompts each final policy answers")
    eval_samples_per_prompt: int = flag(1, "answers per held-out prompt (k of pass@k)")
    eval_split: str = flag("test", "held-out split of the task's prompts", choices=["train", "test"])
    eval_batch_size: int = flag(32, "conversations generated together in the evaluation")
    eval_seed: int = flag(0, "seed of the held-out prompts and sampling, the same for every run")
    final_window: int = flag(
        1,
        "training iterations averaged for the final training metrics (1: the last); with role exchanges, rounded "
        "up to a multiple of twice the period so that both arrangements count alike",
    )
    progress: bool = flag(True, "show progress bars")
    delete_checkpoints: bool = flag(
        False,
        "delete each run's checkpoints (GBs) once it is trained and evaluated: its record stays, and a finished run "
        "is never trained again",
    )
    jobs: int = flag(1, "runs trained at once, each in its own process with one thread (1: one run, all threads)")
    plan: bool = flag(
        False,
        "train nothing: read the finished pilot in --out and print the seeds per learner a difference of --margin needs (agents/evaluation/plan.py)",
    )
    margin: float = flag(
        0.0,
        "the difference that matters, declared before the study (e.g. 0.15 of a success rate): the report then "
        "words each comparison 'different', 'equivalent within +-d' or 'undecided (power p, ...)'",
    )
    alpha: float = flag(0.05, "the comparisons' error rate (two-sided; with --sequential, spent over the stages)")
    plan_metric: str = flag(
        "",
        "the report's metric the decisions and --plan read (default: the held-out task reward, else the collective reward)",
    )
    sequential: str = flag(
        "",
        "add seeds in --stages until every entry is decided against the first, spending --alpha over the stages",
        choices=["", *SPENDING],
    )
    stages: list[int] = field(
        default_factory=list,
        metadata={"help": "--sequential: seeds per entry at each look, increasing (e.g. 3 6 10 15)"},
    )
    budget_hours: float = flag(
        0.0, "--sequential: stop before a stage whose runs would take the study past these hours of training (0: none)"
    )

    report_only: bool = flag(
        False, "train nothing: rewrite the report of the benchmark (or archive) in --out from its runs' files"
    )
    archive: str = flag(
        "",
        "train nothing: copy the record of every run in --out (metrics, settings, samples, evaluation, code; no "
        "checkpoints) to this folder and write the report there from the copies alone",
    )
    study: str = flag(
        "",
        "run the study a file declares (TOML: arms, settings, design, archive, page; agents/evaluation/study.py), "
        "archive it and write its page section; with --report-only, the section from the archive",
    )
    export: str = flag(
        "",
        "train nothing: write --out/marl-eval.json, the runs in the MARL evaluation protocol's format (marl-eval)",
        choices=["", "marl-eval"],
    )

    def __post_init__(self) -> None:
        unknown = [a for a in self.algos if not _is_arm(a)]
        if unknown or not self.algos:
            raise UsageError(
                f"--algos {' '.join(self.algos)}: choose among {', '.join(ALGOS)}, each alone (with --learner) or as "
                f"ALGO:LEARNER, LEARNER one of {', '.join(available_learners())} (cory:happo)"
            )
        if len(set(self.algos)) < len(self.algos):
            raise UsageError(f"--algos {' '.join(self.algos)} names an algorithm twice: give each once")
        for name in ("seeds", "eval_prompts", "eval_samples_per_prompt", "eval_batch_size", "final_window", "jobs"):
            if getattr(self, name) < 1:  # the evaluation's, checked now: it runs after the first training run
                raise UsageError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")
        if not (math.isfinite(self.margin) and self.margin >= 0):
            raise UsageError(f"--margin must be a positive number (the difference that matters), got {self.margin}")
        if not 0 < self.alpha < 1:
            raise UsageError(f"--alpha must be between 0 and 1 (e.g. 0.05), got {self.alpha}")
        if (self.plan or self.sequential) and not self.margin > 0:
            flag_name = "--plan" if self.plan else "--sequential"
            raise UsageError(
                f"{flag_name} needs --margin, the difference that matters (e.g. --margin 0.15), got {self.margin}"
            )
        if self.sequential:
            if len(self.stages) < 2 or any(b <= a for a, b in zip(self.stages, self.stages[1:])) or self.stages[0] < 2:
                raise UsageError(
                    f"--stages {' '.join(map(str, self.stages)) or '(none)'}: --sequential needs at least two looks, "
                    f"seeds per entry increasing from at least 2 (e.g. --stages 3 6 10 15)"
                )
        elif self.stages or self.budget_hours:
            raise UsageError(
                "--stages and --budget-hours are --sequential's: add --sequential obrien-fleming (or pocock)"
            )
        if not (math.isfinite(self.budget_hours) and self.budget_hours >= 0):
            raise UsageError(f"--budget-hours must be a number of hours at least 0 (0: none), got {self.budget_hours}")
        modes = [
            f
            for f, on in (
                ("--plan", self.plan),
                ("--report-only", self.report_only and not self.study),
                ("--archive", self.archive),
                ("--export", self.export),
                ("--sequential", self.sequential),
                ("--study", self.study),
            )
            if on
        ]
        if len(modes) > 1:
            raise UsageError(f"{' and '.join(modes)} are different commands: give one")
        if self.resume and self.overwrite:
            raise UsageError("--resume continues a benchmark and --overwrite starts it over: give one")


def _is_arm(arm: str) -> bool:
    algo, colon, learner = arm.partition(":")
    return algo in ALGOS and (not colon or learner in available_learners())
