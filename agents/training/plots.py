"""Training curves from ``metrics.csv``: one run, or several methods over seeds as in the paper.

- ``plot_run(out_dir)``: ``task_reward.png``, ``kl.png``, ``combined_reward.png`` next to
  the run's ``metrics.csv``, one line per learner (``llm_0``, ``llm_1``, ...), with a light
  ±std band where a ``<learner>/<metric>_std`` column exists (``task_reward_std``).
- ``plot_comparison({"PPO": [...], "CORY": [...]}, "comparison.png")``: one subplot per
  metric, mean over seeds with a ±std band (population std over seeds). A run with several
  learners (CORY's ``llm_0`` and ``llm_1``) counts as the mean over its learners at each
  iteration, so PPO and CORY are compared one curve per seed each.
- ``plot_kl_vs_reward({"PPO": [df, ...], "CORY": [...]}, "kl_vs_reward.png")``: the
  trade-off as a trajectory, KL on x and task reward on y, one line per method and learner
  (and the mean of a run's learners), each point the mean over seeds at one iteration. The
  paper's claim reads off it: a line further left reaches a reward at a lower KL.
- ``arm_panels(path, arms, ylabel, draw)``: one panel per arm of a study, drawn by the caller (a study's
  variants and learning curves: :mod:`cory_agents.evaluation.variants`, :mod:`cory_agents.evaluation.learning`).

Figures are ``matplotlib.figure.Figure`` objects rendered by the Agg canvas: no display and
no pyplot global state, so plotting works on headless machines and inside training jobs. Each
file is written whole or not at all (:func:`save_figure`): a full disk leaves the plot before it
as it was, and ends in one line (:class:`~cory_env.write_failures.OutOfSpaceError`).
"""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from cory_agents.training.metrics import read_metrics
from cory_env.write_failures import write_whole, writing

# metric key -> (axis label, file name written by plot_run)
RUN_PLOTS = {
    "task_reward_mean": ("task reward", "task_reward.png"),
    "kl": ("KL to reference", "kl.png"),
    "combined_reward": ("combined reward (task reward - eta * KL)", "combined_reward.png"),
}


def learner_columns(df: pd.DataFrame, metric: str) -> dict[str, str]:
    """Each learner's column for ``metric``: ``{"llm_0": "llm_0/kl", "llm_1": "llm_1/kl"}``."""
    return {col.rpartition("/")[0]: col for col in df.columns if "/" in col and col.rpartition("/")[2] == metric}


def plot_run(out_dir: str | Path) -> list[Path]:
    """Write one PNG per metric in ``RUN_PLOTS`` found in ``out_dir/metrics.csv``; return their paths."""
    out_dir = Path(out_dir)
    try:
        df = read_metrics(out_dir)
    except (FileNotFoundError, pd.errors.EmptyDataError):  # a run stopped before its first iteration ended
        return []
    paths = []
    for metric, (label, filename) in RUN_PLOTS.items():
        columns = learner_columns(df, metric)
        if not columns:
            continue
        fig = Figure(figsize=(6, 4))
        ax = fig.subplots()
        for learner, col in columns.items():
            curve = df[["iteration", col]].dropna()
            (line,) = ax.plot(curve["iteration"], curve[col], label=learner)
            std_col = f"{learner}/{metric.removesuffix('_mean')}_std"
            if std_col in df:
                band = df[["iteration", col, std_col]].dropna()
                low, high = band[col] - band[std_col], band[col] + band[std_col]
                ax.fill_between(band["iteration"], low, high, color=line.get_color(), alpha=0.2, linewidth=0)
        ax.set(xlabel="iteration", ylabel=label, title=f"{label}: {out_dir.name}")
        ax.grid(alpha=0.3)
        ax.legend()
        fig.tight_layout()
        paths.append(save_figure(fig, out_dir / filename))
    return paths


def save_figure(fig: Figure, path: str | Path, dpi: int = 100) -> Path:
    """Write ``fig`` to ``path`` (its format from the suffix, PNG by default), making the folders above it:
    rendered in memory, then written whole (a failed write leaves the file before it as it was). A full disk
    or the file-size limit is an :class:`~cory_env.write_failures.OutOfSpaceError` naming the file."""
    path = Path(path)
    image = io.BytesIO()
    fig.savefig(image, format=path.suffix.lstrip(".").lower() or None, dpi=dpi)
    with writing(path, image.tell()):
        path.parent.mkdir(parents=True, exist_ok=True)
        write_whole(path, image.getvalue())
    return path


def arm_panels(
    path: str | Path,
    arms: Sequence[str],
    ylabel: str,
    draw: Callable[[Axes, str], None],
    legend_size: float | None = None,
) -> Path:
    """Write a PNG of one panel per study arm side by side (the y axis shared, x the iteration), each drawn by
    ``draw(axes, arm)``, with its legend; return its path."""
    fig = Figure(figsize=(5 * len(arms), 3.6))
    for ax, arm in zip(np.atleast_1d(fig.subplots(1, len(arms), sharey=True)), arms):
        draw(ax, arm)
        ax.set(title=arm, xlabel="iteration")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=legend_size)
    fig.axes[0].set_ylabel(ylabel)
    fig.tight_layout()
    return save_figure(fig, path)


def plot_comparison(
    run_dirs: dict[str, Sequence[str | Path]],
    out_path: str | Path,
    metrics: Sequence[str] = ("task_reward_mean", "kl", "combined_reward"),
) -> Path:
    """Overlay methods: for each metric, the mean over seeds of each label's runs with a ±std band.

    ``run_dirs`` maps a label ("PPO", "CORY") to its run folders, one per seed. A run with
    several learners contributes the mean over its learners (said in the legend).
    """
    frames = {label: [read_metrics(d) for d in dirs] for label, dirs in run_dirs.items()}
    fig = Figure(figsize=(5 * len(metrics), 4))
    axes = fig.subplots(1, len(metrics), squeeze=False)[0]
    for ax, metric in zip(axes, metrics):
        for label, dfs in frames.items():
            curves, n_learners = [], 0
            for df in dfs:
                columns = list(learner_columns(df, metric).values())
                if columns:
                    n_learners = max(n_learners, len(columns))
                    per_iteration = df.set_index("iteration")[columns].mean(axis=1)
                    curves.append(per_iteration.groupby(level=0).last())  # a re-logged iteration counts once
            if not curves:
                continue
            seeds = pd.concat(curves, axis=1).sort_index()
            mean, std = seeds.mean(axis=1), seeds.std(axis=1, ddof=0)
            legend = f"{label} ({len(curves)} seed{'s' * (len(curves) > 1)}"
            legend += f", mean of {n_learners} learners)" if n_learners > 1 else ")"
            (line,) = ax.plot(mean.index, mean, label=legend)
            ax.fill_between(mean.index, mean - std, mean + std, color=line.get_color(), alpha=0.2, linewidth=0)
        label = RUN_PLOTS.get(metric, (metric,))[0]
        ax.set(xlabel="iteration", ylabel=label, title=label)
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend()
    fig.suptitle("mean ± std over seeds")
    fig.tight_layout()
    return save_figure(fig, out_path)


def _per_iteration(df: pd.DataFrame, columns: Sequence[str]) -> pd.Series:
    """The mean of ``columns`` at each iteration; a re-logged iteration counts once (its last row)."""
    return df.set_index("iteration")[list(columns)].mean(axis=1).groupby(level=0).last()


def plot_kl_vs_reward(
    runs: dict[str, Sequence[pd.DataFrame]],
    out_path: str | Path,
    x: str = "kl",
    y: str = "task_reward_mean",
) -> Path:
    """KL against task reward over training: one line per label and learner, mean over seeds.

    ``runs`` maps a label ("PPO", "CORY") to its runs' metrics (``read_metrics``), one per
    seed. Each line joins the iterations in order, at (mean over seeds of ``x``, mean over
    seeds of ``y``); a circle marks the first iteration, a square the last. A run with several
    learners gets a line per learner and a thicker one for the mean of its learners.
    """
    fig = Figure(figsize=(6, 4.5))
    ax = fig.subplots()
    for label, dfs in runs.items():
        learners = sorted({name for df in dfs for name in learner_columns(df, x) if f"{name}/{y}" in df})
        lines = {learner: [learner] for learner in learners}
        if len(learners) > 1:
            lines[f"mean of {len(learners)} learners"] = learners
        for name, members in lines.items():
            seeds_x, seeds_y = [], []
            for df in dfs:
                if all(f"{m}/{x}" in df and f"{m}/{y}" in df for m in members):
                    seeds_x.append(_per_iteration(df, [f"{m}/{x}" for m in members]))
                    seeds_y.append(_per_iteration(df, [f"{m}/{y}" for m in members]))
            if not seeds_x:
                continue
            curve = (
                pd.DataFrame(
                    {
                        "x": pd.concat(seeds_x, axis=1).mean(axis=1),
                        "y": pd.concat(seeds_y, axis=1).mean(axis=1),
                    }
                )
                .sort_index()
                .dropna()
            )
            if curve.empty:
                continue
            n = len(seeds_x)
            legend = f"{label} {name} ({n} seed{'s' * (n > 1)})"
            whole = len(members) == len(learners)  # the run's one learner, or the mean of all
            style = {"linewidth": 2.2} if whole else {"linewidth": 1.0, "linestyle": "--"}
            (line,) = ax.plot(curve["x"], curve["y"], label=legend, **style)
            ax.plot(curve["x"].iloc[0], curve["y"].iloc[0], "o", color=line.get_color())
            ax.plot(curve["x"].iloc[-1], curve["y"].iloc[-1], "s", color=line.get_color())
    ax.set(
        xlabel=RUN_PLOTS.get(x, (x,))[0],
        ylabel=RUN_PLOTS.get(y, (y,))[0],
        title="mean over seeds per iteration (circle: first, square: last)",
    )
    ax.grid(alpha=0.3)
    if ax.lines:
        ax.legend(fontsize="small")
    fig.tight_layout()
    return save_figure(fig, out_path)
