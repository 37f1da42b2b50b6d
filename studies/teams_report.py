"""The Teams experiment's report: does a third agent change CORY's reward and KL?

Reads the runs of ``studies/reproduce.py --configs cory,cory-3-agents`` (the reproduction
study's settings; the same ``--root``) and writes, in ``--report`` (default docs/teams):

    curves.png          task reward, KL and combined reward over training, mean ± std over seeds
                        (each run the mean over its learners)
    positions.png       the task reward of each chain position over training (the learner
                        sitting there), mean over seeds
    runs/<configuration>-seed<N>/metrics.csv, config.json

and rewrites the experiment section of docs/teams.md (between its ``<!-- experiment -->``
markers): the final values (mean of the last ``--final-window`` iterations, then over seeds,
with 95% t-intervals), Welch's test of N = 3 against N = 2, and the final task reward by
chain position. Where a run of the chain of two is missing from ``--root`` its copy in
docs/reproduction/runs is used (the reproduction study's CORY runs).

    python -m studies.teams_report
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from cory_agents.evaluation.report import write_sections
from cory_agents.evaluation.statistics import mean_ci, welch_test
from cory_agents.training.metrics import read_metrics
from cory_agents.training.plots import learner_columns, plot_comparison
from studies.reproduce import METRICS, REPO, copy_runs, curve, difference, iterations_done, run_dir

CONFIGS = {"cory": "CORY, 2 agents", "cory-3-agents": "CORY, 3 agents"}
BEGIN, END = "<!-- experiment -->", "<!-- /experiment -->"


def run_folder(root: Path, config: str, seed: int) -> Path | None:
    """The run's folder in ``root``, or the reproduction study's copy of it."""
    for folder in (run_dir(root, config, seed), REPO / "docs" / "reproduction" / "runs" / f"{config}-seed{seed}"):
        if iterations_done(folder):
            return folder
    return None


def by_position(df: pd.DataFrame, metric: str = "task_reward_mean") -> pd.DataFrame:
    """``metric`` of the learner at each chain position, per iteration (columns 0 .. N-1)."""
    roles, values = learner_columns(df, "role"), learner_columns(df, metric)
    rows = []
    for _, row in df.iterrows():
        rows.append({int(row[roles[learner]]): row[values[learner]] for learner in roles})
    return pd.DataFrame(rows, index=df["iteration"].to_numpy()).sort_index(axis=1)


def interval(values: list[float]) -> str:
    if not values:
        return "n/a"
    if len(values) == 1:
        return f"{values[0]:.3f} (one seed)"
    mean, low, high = mean_ci(values, 0.95)
    return f"{mean:.3f} [{low:.3f}, {high:.3f}]"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--root",
        default=str(Path.home() / ".cache" / "cory_env" / "reproduce"),
        help="where studies/reproduce.py keeps the runs",
    )
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--final-window", type=int, default=5, help="iterations at the end that the finals average")
    parser.add_argument("--report", default=str(REPO / "docs" / "teams"))
    parser.add_argument("--page", default=str(REPO / "docs" / "teams.md"), help="the page whose section is rewritten")
    args = parser.parse_args(argv)
    root, report, w = Path(args.root).expanduser(), Path(args.report), args.final_window
    seeds = [int(s) for s in args.seeds.split(",")]
    folders = {c: {s: f for s in seeds if (f := run_folder(root, c, s)) is not None} for c in CONFIGS}
    frames = {c: {s: read_metrics(f) for s, f in fs.items()} for c, fs in folders.items()}
    report.mkdir(parents=True, exist_ok=True)

    finals = {
        c: {m: [float(curve(df, m).iloc[-w:].mean()) for df in dfs.values()] for m in METRICS}
        for c, dfs in frames.items()
    }
    lines = [
        f"Final values: the mean of the last {w} iterations of each run (the mean over its learners), then "
        f"over seeds, with 95% t-intervals; the difference is Welch's test of 3 agents against 2.",
        "",
        "| | " + " | ".join(METRICS.values()) + " |",
        "|---|" + "---|" * len(METRICS),
    ]
    for c, label in CONFIGS.items():
        done = [f"{s}: {len(df)}" for s, df in frames[c].items()]
        lines.append(
            f"| {label} (seeds: iterations {', '.join(done) or 'none'}) | "
            + " | ".join(interval(finals[c][m]) for m in METRICS)
            + " |"
        )
    lines.append(
        "| 3 agents - 2 agents | "
        + " | ".join(difference(welch_test(finals["cory-3-agents"][m], finals["cory"][m], 0.95)) for m in METRICS)
        + " |"
    )
    lines += [
        "",
        f"Final task reward by chain position (whichever learner sits there), mean of the last {w} "
        "iterations, then over seeds:",
        "",
    ]
    positions = {c: [by_position(df).iloc[-w:].mean() for df in dfs.values()] for c, dfs in frames.items()}
    width = max((len(p[0]) for p in positions.values() if p), default=0)
    lines += [
        "| | " + " | ".join(["pioneer", *[f"observer {k}" for k in range(1, width)]]) + " |",
        "|---|" + "---|" * width,
    ]
    for c, label in CONFIGS.items():
        cells = [
            interval([float(p[k]) for p in positions[c]]) if positions[c] and k < len(positions[c][0]) else ""
            for k in range(width)
        ]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines += ["", "![curves](teams/curves.png)", "", "![positions](teams/positions.png)"]

    plot_comparison(
        {CONFIGS[c]: list(fs.values()) for c, fs in folders.items() if fs}, report / "curves.png", metrics=list(METRICS)
    )
    plot_positions(frames, report / "positions.png")
    copy_runs(report / "runs", {f"{c}-seed{s}": folder for c, fs in folders.items() for s, folder in fs.items()})
    page = Path(args.page)
    if BEGIN in (text := page.read_text()) and END in text:
        write_sections(page, {(BEGIN, END): "\n".join(lines)})
    print("\n".join(lines))


def plot_positions(frames: dict[str, dict[int, pd.DataFrame]], path: Path) -> None:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 4), layout="constrained")
    axes = fig.subplots(1, len(CONFIGS), sharey=True, squeeze=False)[0]
    for ax, (c, label) in zip(axes, CONFIGS.items()):
        tables = [by_position(df) for df in frames[c].values()]
        if not tables:
            continue
        mean = sum(tables) / len(tables)
        for k in mean.columns:
            name = "pioneer" if k == 0 else "observer" if len(mean.columns) == 2 else f"observer {k}"
            ax.plot(mean.index, mean[k].rolling(5, min_periods=1).mean(), label=name)
        ax.set_title(f"{label}: task reward by position")
        ax.set_xlabel("iteration")
        ax.legend()
    axes[0].set_ylabel("task reward (5-iteration mean)")
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
