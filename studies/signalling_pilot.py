"""The signalling study's pilot: which settings make the game take off early and the seeds agree?

Each setting of the pilot is a cory-bench benchmark of CORY alone on the signalling game (batch 32, 40
iterations, 2 seeds), differing in the learning rate and the role-exchange period. This script archives
their records (``cory-bench --archive``, no checkpoints) under docs/multi-agent/signalling-study/pilot/,
draws every run's success curve (one panel per setting, the role exchanges marked) and writes the pilot's
section of docs/multi-agent-algorithms.md: per run the first iteration whose success reaches 0.8, the
success and KL over the last 10 iterations (both arrangements of the role exchange alike).

    python studies/signalling_pilot.py --runs ~/signal-study/pilot    # archive the finished settings, the page
    python studies/signalling_pilot.py                                 # the page from the archive
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python studies/signalling_pilot.py` from anywhere

from cory_agents.evaluation.archive import archive  # noqa: E402
from cory_agents.evaluation.report import markdown_table, write_sections  # noqa: E402
from cory_agents.training.metrics import read_metrics  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
ARCHIVE = REPO / "docs" / "multi-agent" / "signalling-study" / "pilot"
PAGE = REPO / "docs" / "multi-agent-algorithms.md"
FIGURE = "pilot.png"
MARKERS = ("<!-- pilot signalling: written by studies/signalling_pilot.py -->", "<!-- /pilot signalling -->")
TAKE_OFF, WINDOW, CHANCE = 0.8, 10, 0.25


def success(run: Path) -> np.ndarray:
    """The run's success rate each iteration: its learners' task rewards summed (the sender scores 0)."""
    df = read_metrics(run).groupby("iteration").last().sort_index()
    return df[[c for c in df.columns if c.endswith("/task_reward_mean")]].sum(axis=1).to_numpy()


def kl(run: Path) -> np.ndarray:
    df = read_metrics(run).groupby("iteration").last().sort_index()
    return df[[c for c in df.columns if c.endswith("/kl")]].mean(axis=1).to_numpy()


def settings(folder: Path) -> dict[str, list[Path]]:
    """setting -> its runs (``cory/seedN``), in the order of their names."""
    return {s.name: sorted((s / "cory").glob("seed*")) for s in sorted(folder.iterdir()) if (s / "cory").is_dir()}


def period(name: str) -> int:
    return int(name.rpartition("period")[2])


def figure(runs: dict[str, list[Path]], path: Path) -> None:
    fig = Figure(figsize=(4.2 * len(runs), 3.4))
    for ax, (name, seeds) in zip(fig.subplots(1, len(runs), sharey=True, squeeze=False)[0], runs.items()):
        for run in seeds:
            ax.plot(success(run), label=run.name)
        for swap in range(period(name), 40, period(name)):
            ax.axvline(swap, color="grey", alpha=0.2)
        ax.axhline(CHANCE, linestyle="--", color="grey", label="chance")
        ax.set(title=name.replace("_", ", "), xlabel="iteration", ylim=(-0.02, 1.02))
        ax.grid(alpha=0.3)
    ax.legend()
    fig.suptitle("Signalling pilot: CORY's success per iteration (role exchanges in grey)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def section(runs: dict[str, list[Path]]) -> str:
    rows = []
    for name, seeds in runs.items():
        for run in seeds:
            s, k = success(run), kl(run)
            first = next((i for i, v in enumerate(s) if v >= TAKE_OFF), None)
            rows.append(
                [
                    name,
                    run.name,
                    "never" if first is None else str(first),
                    f"{s[-WINDOW:].mean():.2f}",
                    f"{k[-WINDOW:].mean():.1f}",
                ]
            )
    table = markdown_table(
        [
            "setting",
            "seed",
            f"first iteration at success >= {TAKE_OFF}",
            f"success, last {WINDOW}",
            f"KL, last {WINDOW}",
        ],
        rows,
    )
    relative = ARCHIVE.relative_to(PAGE.parent).as_posix()
    return "\n".join(
        [
            f"Archived in `{ARCHIVE.relative_to(REPO).as_posix()}/` (each setting a cory-bench benchmark's record); "
            f"`python studies/signalling_pilot.py` rewrites this from it.",
            "",
            table,
            "",
            f"![pilot]({relative}/{FIGURE})",
        ]
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=Path, help="the pilot's benchmark folders: archive the finished ones first")
    parser.add_argument("--page", type=Path, default=PAGE)
    args = parser.parse_args(argv)
    if args.runs:
        for name, seeds in settings(args.runs).items():
            if seeds and all((run / "trained.json").is_file() for run in seeds):  # finished: cory-bench marked it
                archive(args.runs / name, ARCHIVE / name)
    runs = settings(ARCHIVE)
    figure(runs, ARCHIVE / FIGURE)
    write_sections(args.page, {MARKERS: section(runs)})
    print(f"wrote {args.page} and {ARCHIVE / FIGURE}")


if __name__ == "__main__":
    main()
