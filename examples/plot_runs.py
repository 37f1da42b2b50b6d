"""Plot training curves of several methods over seeds, as in the paper's figures.

Each --run gives a label and its run folders (one per seed, each holding the
metrics.csv written by MetricsLogger). Every metric gets a subplot with the mean over
seeds and a ±std band; a CORY run counts as the mean over its two learners.

    python examples/plot_runs.py --run PPO=runs/ppo_s0,runs/ppo_s1 --run CORY=runs/cory_s0 --out comparison.png
    python examples/plot_runs.py --run CORY=runs/cory_s0 --per-run   # also each run's own curves
"""

from __future__ import annotations

import argparse
from pathlib import Path

from cory_agents.cli.errors import add_debug_flag, one_line_errors
from cory_agents.training.metrics import METRICS_FILE
from cory_agents.training.plots import plot_comparison, plot_run


def build_parser() -> argparse.ArgumentParser:
    """The command line (also rendered in docs/cli.md)."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--run",
        action="append",
        required=True,
        metavar="LABEL=DIR[,DIR...]",
        help="a method's label and its run folders, comma separated (repeat for each method)",
    )
    p.add_argument("--out", type=Path, default=Path("comparison.png"), help="PNG file to write")
    p.add_argument(
        "--metrics",
        nargs="+",
        default=["task_reward_mean", "kl", "combined_reward"],
        help="per-learner metric names to plot, one subplot each",
    )
    p.add_argument(
        "--per-run",
        action="store_true",
        help="also write task_reward.png, kl.png, combined_reward.png in every run folder",
    )
    return add_debug_flag(p)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = build_parser()
    args = p.parse_args(argv)
    args.runs = {}
    for spec in args.run:
        label, sep, dirs = spec.partition("=")
        run_dirs = [Path(d) for d in dirs.split(",") if d]
        if not sep or not label or not run_dirs:
            p.error(f"--run {spec!r}: expected LABEL=DIR[,DIR...]")
        for d in run_dirs:
            if not (d / METRICS_FILE).is_file():
                p.error(f"--run {spec!r}: no {METRICS_FILE} in {d}")
        args.runs[label] = run_dirs
    return args


@one_line_errors  # a full disk: one line, exit 1 (cory_agents.cli.errors)
def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.per_run:
        for run_dirs in args.runs.values():
            for d in run_dirs:
                for path in plot_run(d):
                    print(path)
    print(plot_comparison(args.runs, args.out, metrics=args.metrics))


if __name__ == "__main__":
    main()
