"""``cory-bench --plan``: how many seeds a comparison needs, read from a pilot benchmark.

A pilot (a finished ``cory-bench`` folder, its ``report.json``) gives, for each ``--algos`` entry against the
first, the spread of the compared metric over seeds. From it :func:`plan` says, for the difference ``margin``
declared before the study (``--margin d``):

- what the pilot's seeds decide now (:func:`~cory_agents.evaluation.decisions.verdict`: "different",
  "equivalent within +-d", or "undecided (power p, smallest detectable difference m)");
- the seeds per learner that detect a difference of ``d`` with 80% power (Welch's test at ``alpha``,
  :func:`~cory_agents.evaluation.decisions.seeds_for_power`, from the pooled standard deviation);
- what the seeds still to run cost on this machine: the pilot's median seconds per iteration times the
  iterations, per run, for both learners of the pair.

The compared metric is the held-out task reward where the task has a held-out evaluation, else the
training metrics' collective reward (a game of several agents: the team's score), else the task reward; a
``--plan-metric`` names another of the report's metrics.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from cory_agents.evaluation.decisions import pooled_sd, seeds_for_power, verdict
from cory_agents.evaluation.report import MEAN_OF_LEARNERS, markdown_table
from cory_env.errors import UsageError


def compared_metric(report: dict[str, Any], metric: str = "") -> tuple[str, str]:
    """``(part, metric)`` of ``report`` to plan on: ``metric`` in the training or the held-out part (the
    held-out one first), or by default the held-out task reward, else the collective reward, else the task
    reward of the training metrics."""
    rows = report["summary"]
    present = {(part, m) for r in rows for part in ("eval", "train") for m in r.get(part) or {}}
    if metric:
        for part in ("eval", "train"):
            if (part, metric) in present:
                return part, metric
        names = sorted({m for _, m in present})
        raise UsageError(f"--plan-metric {metric!r} is not in the pilot's report: choose one of {', '.join(names)}")
    if report.get("held_out") and ("eval", "task_reward_mean") in present:
        return "eval", "task_reward_mean"
    if any(_finite(r["train"].get("collective_reward")) for r in rows):
        return "train", "collective_reward"
    return "train", "task_reward_mean"


def _finite(over_seeds: dict[str, Any] | None) -> bool:
    return bool(over_seeds) and bool(np.isfinite(np.asarray(over_seeds["values"], dtype=np.float64)).any())


def _row(report: dict[str, Any], algo: str) -> dict[str, Any]:
    """An entry's row: its mean-of-learners row when it has several learners, else its one learner's."""
    rows = [r for r in report["summary"] if r["algo"] == algo]
    return next((r for r in rows if r["learner"] == MEAN_OF_LEARNERS), rows[0])


def plan(
    report: dict[str, Any], margin: float, metric: str = "", power: float = 0.8, alpha: float = 0.05
) -> dict[str, Any]:
    """Each ``--algos`` entry of a pilot's ``report`` against the first: the verdict now, the seeds per learner
    that reach ``power`` for a difference of ``margin``, and the CPU seconds of the runs still to make."""
    if not (isinstance(margin, int | float) and margin > 0 and math.isfinite(margin)):
        raise UsageError(f"--margin must be a positive number (the difference that matters), got {margin!r}")
    part, name = compared_metric(report, metric)
    baseline = report["baseline"]
    seconds = report["seconds_per_iteration"]
    y = _values(_row(report, baseline), part, name)
    pairs = []
    for algo in report["algos"]:
        if algo == baseline:
            continue
        x = _values(_row(report, algo), part, name)
        sd = pooled_sd(x, y)
        needed = seeds_for_power(margin, sd, power, alpha) if sd > 0 else max(len(x), len(y))
        run_seconds = {a: seconds[a]["mean"] * report["iterations"] for a in (algo, baseline)}
        to_run = {a: max(0, needed - len(v)) for a, v in ((algo, x), (baseline, y))}
        pairs.append(
            {
                "algo": algo,
                "against": baseline,
                "seeds": [len(x), len(y)],
                "difference": float(np.mean(x) - np.mean(y)),
                "pooled_sd": sd,
                "verdict": str(verdict(x, y, margin, alpha, power)),
                "seeds_needed": needed,
                "cpu_seconds": float(sum(to_run[a] * run_seconds[a] for a in to_run)),
            }
        )
    return {"part": part, "metric": name, "margin": margin, "power": power, "alpha": alpha, "pairs": pairs}


def comparison_values(report: dict[str, Any], algo: str, part: str, metric: str) -> np.ndarray:
    """An entry's scores over seeds in ``report`` (its mean-of-learners row's, else its learner's), finite ones."""
    return _values(_row(report, algo), part, metric)


def _values(row: dict[str, Any], part: str, metric: str) -> np.ndarray:
    values = np.asarray((row.get(part) or {}).get(metric, {}).get("values", []), dtype=np.float64)
    return values[np.isfinite(values)]


def plan_from_folder(out: str | Path, margin: float, metric: str = "", power: float = 0.8) -> dict[str, Any]:
    """:func:`plan` of the benchmark in ``out`` (its ``report.json``; a pilot that has finished)."""
    path = Path(out) / "report.json"
    if not path.is_file():
        raise UsageError(
            f"--plan reads a finished benchmark's report, and {path} is not there: run the pilot first "
            f"(cory-bench --out {out} ...), or give its folder with --out"
        )
    return plan(json.loads(path.read_text()), margin, metric, power)


def format_plan(result: dict[str, Any]) -> str:
    """The plan as lines of text, a pair a line."""
    part = "held-out" if result["part"] == "eval" else "training"
    lines = [
        f"{result['metric']} ({part}), difference that matters: +-{result['margin']:g}; Welch's test at alpha "
        f"{result['alpha']:g}, power {result['power']:.0%}:"
    ]
    for p in result["pairs"]:
        hours = p["cpu_seconds"] / 3600
        lines.append(
            f"{p['algo']} against {p['against']} ({p['seeds'][0]} and {p['seeds'][1]} seeds): difference "
            f"{p['difference']:+.3g}, pooled sd {p['pooled_sd']:.3g}: {p['verdict']}; {p['seeds_needed']} seeds per "
            f"learner needed, {hours:.1f} CPU-hours more on this machine"
        )
    return "\n".join(lines)


def format_decisions(decisions: dict[str, Any] | None) -> list[str]:
    """The report's "Decisions" section (``--margin``): each entry against the baseline in one of the three
    wordings (:func:`~cory_agents.evaluation.decisions.verdict`), and the seeds a decision needs."""
    if not decisions:
        return []
    part = "held-out" if decisions["part"] == "eval" else "training"
    return [
        f"## Decisions: {decisions['metric']} ({part}), margin +-{decisions['margin']:g} declared before the runs",
        "",
        f"Welch's test of a difference and the two one-sided tests of equivalence, each at alpha "
        f"{decisions['alpha']:g}; the seeds per entry that detect a difference of {decisions['margin']:g} with "
        f"{decisions['power']:.0%} power, from these seeds' spread (`cory-bench --plan`).",
        "",
        markdown_table(
            ["entry", "against", "difference", "decision", "seeds needed"],
            [
                [p["algo"], p["against"], f"{p['difference']:+.3g}", p["verdict"], str(p["seeds_needed"])]
                for p in decisions["pairs"]
            ],
        ),
        "",
    ]
