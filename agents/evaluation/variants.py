"""A study's variants compared: each arm under a variant's settings against the same arm under the first's.

A study file's ``[variants]`` (:mod:`~cory_agents.evaluation.study`) runs the same arms under other settings
(the chat form against the raw form), each variant a benchmark of its own with the same seeds and held-out
prompts. :func:`compare_variants` reads their archives and, for each arm and each later variant, says how the
variant changes where the arm starts and ends and at what KL:

- **start**: the training task reward (its learners' mean) over the first :data:`START` iterations, a
  seed's value each, over seeds;
- **end**: the study's metric (the held-out task reward unless ``[design] metric`` says otherwise), decided
  against the first variant's runs of the arm: "different", "equivalent within +-margin" or "undecided
  (power p, ...)" (:func:`~cory_agents.evaluation.decisions.verdict`), never "no difference";
- **KL**: the final policies' KL to their reference, in the metric's part (held-out or the final window).

A figure (``variants.png`` in the archive) draws each arm's training reward per variant, the mean over seeds
with the band of one standard deviation.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from cory_agents.evaluation.benchmark_report import run_dir
from cory_agents.evaluation.decisions import verdict
from cory_agents.evaluation.plan import compared_metric, comparison_values
from cory_agents.evaluation.report import markdown_table
from cory_agents.training.metrics import read_metrics

#: Iterations averaged for where a run starts.
START = 3
FIGURE = "variants.png"


def reward_curve(folder: Path) -> np.ndarray:
    """A run's training task reward per iteration, the mean of its learners' (``*/task_reward_mean``)."""
    df = read_metrics(folder).groupby("iteration").last().sort_index()  # a re-logged iteration counts once
    return df[[c for c in df.columns if c.endswith("/task_reward_mean")]].mean(axis=1).to_numpy()


def _curves(folder: Path, report: dict[str, Any], algo: str) -> list[np.ndarray]:
    return [reward_curve(run_dir(folder, algo, seed)) for seed in report["seeds"]]


def _cell(values: np.ndarray) -> str:
    """Mean and the spread over seeds (population standard deviation), as the plots' bands."""
    return f"{np.mean(values):.3f} +- {np.std(values):.3f}" if values.size else "-"


def compare_variants(study: dict[str, Any], folders: dict[str, Path], page: Path) -> str:
    """The study's comparison of its variants (their archives in ``folders``, the reference first), for ``page``."""
    design = study["design"]
    reports = {v: json.loads((f / "report.json").read_text()) for v, f in folders.items()}
    reference = next(iter(folders))
    part, metric = compared_metric(reports[reference], design.get("metric", ""))
    margin, alpha = float(design.get("margin", 0) or 0), float(design.get("alpha", 0.05))
    rows, curves = [], {}
    for algo in reports[reference]["algos"]:
        base = comparison_values(reports[reference], algo, part, metric)
        for variant, report in reports.items():
            curves[algo, variant] = _curves(folders[variant], report, algo)
            starts = np.array([c[:START].mean() for c in curves[algo, variant]])
            end = comparison_values(report, algo, part, metric)
            kl = comparison_values(report, algo, part, "kl")
            decision = "reference"
            if variant != reference:
                decision = str(verdict(end, base, margin, alpha)) if margin > 0 else "no margin declared"
                decision += f" (difference {np.mean(end) - np.mean(base):+.3f})"
            rows.append([algo, variant, str(end.size), _cell(starts), _cell(end), _cell(kl), decision])
    figure = Path(next(iter(folders.values()))).parent / FIGURE
    _plot(curves, figure)
    where = "the final policies' held-out evaluation" if part == "eval" else "the final window of training"
    return "\n".join(
        [
            f"Each arm in each variant against the same arm in **{reference}**: where it starts (the training task "
            f"reward over the first {START} iterations), where it ends ({metric}, {where}) with the decision "
            f"within +-{margin:g} (alpha {alpha:g}), and its KL to the reference model ({where}); mean +- standard "
            "deviation over seeds.",
            "",
            markdown_table(["arm", "variant", "seeds", "start", f"end ({metric})", "KL", "decision"], rows),
            "",
            f"![training reward per variant]({Path(os.path.relpath(figure, page.parent)).as_posix()})",
        ]
    )


def _plot(curves: dict[tuple[str, str], list[np.ndarray]], path: Path) -> Path:
    from cory_agents.training.plots import arm_panels

    def draw(ax, algo: str) -> None:
        for (arm, variant), runs in curves.items():
            if arm != algo or not runs:
                continue
            length = min(len(c) for c in runs)
            stack = np.stack([c[:length] for c in runs])
            mean, std = stack.mean(0), stack.std(0)
            (line,) = ax.plot(np.arange(length), mean, label=f"{variant} ({len(runs)} seeds)")
            ax.fill_between(np.arange(length), mean - std, mean + std, color=line.get_color(), alpha=0.2, linewidth=0)

    return arm_panels(path, list(dict.fromkeys(algo for algo, _ in curves)), "training task reward", draw)
