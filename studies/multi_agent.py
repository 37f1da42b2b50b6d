"""Multi-agent algorithms compared: CORY (independent PPO), HAPPO and difference rewards, through cory-bench.

Every run is a cory-bench run (``cory_agents.evaluation.reward_benchmark``) at the training defaults on
the embedded model, on the sentiment task, one ``--algos`` entry per algorithm, CORY first (the
baseline every other is tested against):

    cory-bench --algos cory cory:happo cory:difference --seeds 3 --out ~/.cache/cory_env/multi-agent

This script runs that benchmark seed by seed (``--seeds 1``, then 2, then 3, each a ``--resume``
of the last: a stopped study continues where it stopped, with the runs' own checkpoints), and after
each seed archives what it has: each finished run's metrics.csv, config.json and evaluation.json in
docs/multi-agent/<algo>/seed<N>/ (cory/, cory-happo/, cory-difference/), then cory-bench's report (report.md, report.json and plots,
written from the archived runs) in docs/multi-agent/, a per-learner figure, and the results section
of docs/multi-agent-algorithms.md. The report covers the seeds every algorithm has finished.

    python studies/multi_agent.py                  # run what is missing, archive, the page
    python studies/multi_agent.py --report-only    # the page from the archived runs

Flags it does not know pass through to cory-bench (``--device cuda``, ``--num-agents 3``, ...) and
are recorded in the archived benchmark.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python studies/multi_agent.py` from anywhere

from cory_agents.evaluation import reward_benchmark  # noqa: E402
from cory_agents.evaluation.benchmark_report import format_report, run_dir, write_report  # noqa: E402
from cory_agents.evaluation.report import (  # noqa: E402
    MEAN_OF_LEARNERS,  # noqa: E402
    fmt,
    write_sections,
)
from cory_agents.training.metrics import read_metrics  # noqa: E402
from cory_agents.training.plots import learner_columns  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
ARMS = ("cory", "cory:happo", "cory:difference")
NAMES = {"cory": "CORY (independent PPO)", "cory:happo": "HAPPO", "cory:difference": "difference rewards"}
SEEDS = 3
DEFAULT_ROOT = Path.home() / ".cache" / "cory_env" / "multi-agent"
ARCHIVE = REPO / "docs" / "multi-agent"
ARCHIVED = ("metrics.csv", "config.json", "evaluation.json")
PAGE = REPO / "docs" / "multi-agent-algorithms.md"
MARKERS = ("<!-- results: written by studies/multi_agent.py -->", "<!-- /results -->")
PER_LEARNER_PLOT = "per_learner_task_reward.png"
CONFIDENCE = 0.95


def archive(root: Path, folder: Path, seeds: int, arms: Sequence[str] = ARMS) -> int:
    """Copy every finished run (its evaluation written) from ``root`` to ``folder``; return how many seeds
    every algorithm has finished."""
    for arm in arms:
        for seed in range(seeds):
            run = run_dir(root, arm, seed)
            if (run / "evaluation.json").exists():
                target = run_dir(folder, arm, seed)
                target.mkdir(parents=True, exist_ok=True)
                for name in ARCHIVED:
                    shutil.copyfile(run / name, target / name)
    if (root / "benchmark.json").exists():
        shutil.copyfile(root / "benchmark.json", folder / "benchmark.json")
    return finished_seeds(folder, arms)


def finished_seeds(folder: Path, arms: Sequence[str] = ARMS) -> int:
    seeds = 0
    while all((run_dir(folder, arm, seeds) / "evaluation.json").exists() for arm in arms):
        seeds += 1
    return seeds


def report(folder: Path, seeds: int) -> dict:
    """cory-bench's report of the archived runs (their first ``seeds`` seeds)."""
    saved = json.loads((folder / "benchmark.json").read_text())
    train, bench = reward_benchmark.parse_args(["--out", str(folder)])
    train = dataclasses.replace(train, **{k: v for k, v in saved["train"].items() if hasattr(train, k)})
    bench = dataclasses.replace(bench, **{**saved["benchmark"], "out": str(folder), "seeds": seeds, "seed": 0})
    return write_report(folder, train, bench, {**saved, "benchmark": dataclasses.asdict(bench)})


def plot_per_learner(folder: Path, seeds: int) -> Path:
    """Each learner's task reward (mean over seeds), one panel per algorithm."""
    fig = Figure(figsize=(5 * len(ARMS), 4))
    for ax, arm in zip(fig.subplots(1, len(ARMS), squeeze=False)[0], ARMS):
        frames = [read_metrics(run_dir(folder, arm, s)) for s in range(seeds)]
        for learner in learner_columns(frames[0], "task_reward_mean"):
            curves = [df.groupby("iteration")[f"{learner}/task_reward_mean"].last() for df in frames]
            ax.plot(np.mean(curves, axis=0), label=learner)
        ax.set(xlabel="iteration", ylabel="task reward", title=f"{NAMES[arm]} ({seeds} seeds)")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    path = folder / PER_LEARNER_PLOT
    fig.savefig(path, dpi=100)
    return path


def findings(result: dict) -> list[str]:
    """One line per algorithm against CORY: the mean of its learners, in training and held out."""
    lines = []
    for test in result["comparisons"]:
        if test["learner"] != MEAN_OF_LEARNERS:
            continue
        parts = []
        for part, where in (("train", "last training iteration"), ("eval", "held out, each model alone")):
            cells = []
            for metric, label in (("task_reward_mean", "task reward"), ("kl", "KL")):
                w = test[part][metric]
                p = w["p_value"]
                p = "n/a" if p is None or not np.isfinite(p) else f"{p:.2f}"
                cells.append(f"{label} {fmt(w['difference'])} [{fmt(w['ci_low'])}, {fmt(w['ci_high'])}], p {p}")
            parts.append(f"{where}: {'; '.join(cells)}")
        lines.append(f"- **{NAMES[test['algo']]} - CORY**, mean of the learners: " + ". ".join(parts) + ".")
    return lines


def write_page(result: dict, seeds: int, planned: int = SEEDS, page: Path = PAGE) -> None:
    """The results section of the page (between MARKERS): the findings, the cost, the plots, the report."""
    cost = result["seconds_per_iteration"]
    base = cost["cory"]["mean"]
    relative = ", ".join(f"{NAMES[a]} {cost[a]['mean'] / base:.2f}x" for a in ARMS[1:] if a in cost)
    body = "\n".join(
        [
            "",
            f"{seeds} of {planned} seeds archived (docs/multi-agent/). Differences against CORY over seeds, "
            f"[{CONFIDENCE:.0%} interval], Welch's p (an interval that holds 0 is no detected difference):",
            "",
            *findings(result),
            "",
            f"Cost per iteration, against CORY's, measured side by side in these runs: {relative} "
            "(seconds in docs/benchmarks.md).",
            "",
            f"![per-learner task reward](multi-agent/{PER_LEARNER_PLOT})",
            "",
            "cory-bench's report of the archived runs, as it wrote it:",
            "",
            format_report(result).split("\n", 1)[1].replace("](", "](multi-agent/"),
        ]
    )
    write_sections(page, {MARKERS: body})


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, default=DEFAULT_ROOT, help="where the runs train (outside the tree)")
    parser.add_argument("--archive", type=Path, default=ARCHIVE, help="where the finished runs and report go")
    parser.add_argument("--seeds", type=int, default=SEEDS)
    parser.add_argument("--report-only", action="store_true", help="the report and page from the archived runs")
    parser.add_argument("--page", type=Path, default=PAGE, help="the page whose results section is written")
    args, passthrough = parser.parse_known_args(argv)
    args.archive.mkdir(parents=True, exist_ok=True)
    if not args.report_only:
        for seeds in range(1, args.seeds + 1):
            flags = ["--algos", *ARMS, "--seeds", str(seeds), "--out", str(args.root), *passthrough]
            reward_benchmark.main([*flags, "--resume"] if (args.root / "benchmark.json").exists() else flags)
            archive(args.root, args.archive, args.seeds)
    seeds = finished_seeds(args.archive)
    if not seeds:
        print(f"no finished seed of every algorithm in {args.archive} yet")
        return
    result = report(args.archive, seeds)
    plot_per_learner(args.archive, seeds)
    write_page(result, seeds, args.seeds, args.page)
    print(f"report of {seeds} seed(s): {args.archive / 'report.md'}")


if __name__ == "__main__":
    main()
