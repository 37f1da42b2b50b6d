"""The sweep that chose the embedded model's training defaults: does PPO raise the task reward?

Each setting is an ordinary ``examples/train_cory.py`` run (one subprocess each, so every run
starts from a clean process) at a fixed seed; the table says, per run and learner, whether the
task reward rose: the mean of the last 3 iterations against the first 3, in standard errors of
that difference from the batches' reward std (:func:`cory_agents.evaluation.statistics.reward_rise`; the
criterion is a rise of at least 2). Runs live under ``--root``, outside the work tree: a
finished run is read, not rerun, and a stopped one continues from its newest checkpoint, so
the sweep can be stopped and started again.

    python studies/learning_sweep.py --settings kl0.05,lr3e-6 --seeds 0 --iterations 36
    python studies/learning_sweep.py --list                 # the settings and their flags
    python studies/learning_sweep.py --settings b32-epochs1-lr3e-5 --seeds 0,1,2 --iterations 60 --report docs/sweep

Every setting shares ``COMMON`` (the single-agent PPO baseline on the embedded default); a
setting's own flags come after it and win. docs/why-it-learns.md reports what it measured.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from cory_agents.evaluation.statistics import reward_rise
from cory_agents.training.metrics import read_metrics
from cory_agents.training.plots import plot_comparison

ROOT = Path(__file__).resolve().parents[1]

#: Flags of every run: single-agent PPO, checkpoints often enough to resume, no model export.
COMMON = ["--algo", "ppo", "--checkpoint-every", "5", "--save-model", "false", "--report-to", "none"]

#: name -> flags (after COMMON), each spelled out in full so that a later change of the defaults
#: leaves the sweep as it was. All use a fixed response length of 12 tokens: a length limit drawn
#: per batch (4-15) moves a whole batch's VADER score with it, which swamps a trend. The defaults
#: of examples/train_cory.py are "b32-epochs1-lr3e-5" (and CORY's, "cory-b32-epochs1-lr3e-5").
LENGTH = ["--min-new-tokens", "12", "--max-new-tokens", "12"]
B16 = ["--batch-size", "16", "--mini-batch-size", "8", "--ppo-epochs", "4", *LENGTH]
B32 = ["--batch-size", "32", "--mini-batch-size", "16", *LENGTH]
SETTINGS: dict[str, list[str]] = {
    "kl0.05": [*B16, "--lr", "1.41e-5", "--kl-coef", "0.05"],
    "lr3e-6": [*B16, "--lr", "3e-6", "--kl-coef", "0.05"],
    "lr3e-6-vlr5e-5": [*B16, "--lr", "3e-6", "--kl-coef", "0.05", "--value-lr", "5e-5"],
    "b32-epochs1": [*B32, "--ppo-epochs", "1", "--lr", "1.41e-5", "--kl-coef", "0.05"],
    "b32-epochs1-lr3e-5": [*B32, "--ppo-epochs", "1", "--lr", "3e-5", "--kl-coef", "0.05"],
    "cory-b32-epochs1-lr3e-5": [*B32, "--ppo-epochs", "1", "--lr", "3e-5", "--kl-coef", "0.05", "--algo", "cory"],
}


def run_dir(root: Path, name: str, seed: int) -> Path:
    return root / name / f"seed{seed}"


def finished(out: Path, iterations: int) -> bool:
    metrics = out / "metrics.csv"
    return metrics.exists() and len(read_metrics(metrics)) >= iterations


def train(name: str, seed: int, iterations: int, root: Path) -> None:
    """Train one setting at one seed to ``iterations`` (continue it if it was stopped)."""
    out = run_dir(root, name, seed)
    if finished(out, iterations):
        return
    resume = ["--resume"] if (out / "checkpoints").exists() else ["--overwrite"]
    cmd = [
        sys.executable,
        str(ROOT / "examples" / "train_cory.py"),
        *COMMON,
        *SETTINGS[name],
        "--iterations",
        str(iterations),
        "--seed",
        str(seed),
        "--out",
        str(out),
        *resume,
    ]
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with open(out / "train.log", "a") as log:
        subprocess.run(cmd, check=True, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
    print(f"{name} seed {seed}: trained in {time.perf_counter() - start:.0f} s", flush=True)


def summarise(name: str, seed: int, root: Path) -> list[dict[str, float | str]]:
    """One row per learner of a finished run: the reward rise and what moved the policy."""
    out = run_dir(root, name, seed)
    df = read_metrics(out / "metrics.csv")
    batch = json.loads((out / "config.json").read_text())["batch_size"]
    rows = []
    for learner in sorted({c.split("/")[0] for c in df.columns if c.endswith("/task_reward_mean")}):
        col = lambda k, learner=learner: df[f"{learner}/{k}"].to_numpy(dtype=float)
        rise = reward_rise(col("task_reward_mean"), col("task_reward_std"), batch)
        rows.append(
            dict(
                setting=name,
                seed=seed,
                learner=learner,
                iterations=len(df),
                first=rise["first"],
                last=rise["last"],
                z=rise["z"],
                kl_end=float(np.mean(col("kl")[-3:])),
                approx_kl=float(np.mean(col("approx_kl"))),
                clipfrac=float(np.mean(col("clipfrac"))),
                explained_variance=float(np.mean(col("explained_variance")[-3:])),
                entropy_end=float(np.mean(col("entropy")[-3:])),
                minutes=float(df["seconds"].sum()) / 60,
            )
        )
    return rows


def markdown(rows: list[dict[str, float | str]]) -> str:
    head = [
        "setting",
        "seed",
        "learner",
        "iterations",
        "first",
        "last",
        "z",
        "kl_end",
        "approx_kl",
        "clipfrac",
        "explained_variance",
        "entropy_end",
        "minutes",
    ]
    cell = lambda v: f"{v:.3f}" if isinstance(v, float) else str(v)  # noqa: E731
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(cell(r[h]) for h in head) + " |" for r in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--settings", default=",".join(SETTINGS), help="comma-separated names of SETTINGS")
    parser.add_argument("--seeds", default="0", help="comma-separated seeds")
    parser.add_argument("--iterations", type=int, default=40, help="iterations per run")
    parser.add_argument(
        "--root",
        default=str(Path.home() / ".cache" / "cory_env" / "sweeps"),
        help="where the runs live (outside the work tree; reused on a rerun)",
    )
    parser.add_argument(
        "--report",
        default="",
        help="also write to this folder: table.md, curves.png (task reward and KL by setting, mean "
        "over seeds) and every run's metrics.csv and config.json in <setting>-seed<N>/",
    )
    parser.add_argument("--list", action="store_true", help="print the settings and their flags, then exit")
    args = parser.parse_args(argv)
    if args.list:
        for name, flags in SETTINGS.items():
            print(f"{name}: {' '.join(COMMON + flags)}")
        return
    names = [n.strip() for n in args.settings.split(",") if n.strip()]
    unknown = [n for n in names if n not in SETTINGS]
    if unknown:
        parser.error(f"unknown setting(s) {', '.join(unknown)}: choose from {', '.join(SETTINGS)}")
    seeds = [int(s) for s in args.seeds.split(",")]
    root = Path(args.root).expanduser()
    rows = []
    for name in names:
        for seed in seeds:
            train(name, seed, args.iterations, root)
            rows += summarise(name, seed, root)
    table = markdown(rows)
    print(table)
    if args.report:
        report = Path(args.report)
        report.mkdir(parents=True, exist_ok=True)
        (report / "table.md").write_text(table + "\n")
        for name in names:
            for seed in seeds:
                (report / f"{name}-seed{seed}").mkdir(exist_ok=True)
                for file in ("metrics.csv", "config.json"):
                    shutil.copyfile(run_dir(root, name, seed) / file, report / f"{name}-seed{seed}" / file)
        runs = {name: [run_dir(root, name, s) for s in seeds] for name in names}
        plot_comparison(runs, report / "curves.png", metrics=["task_reward_mean", "kl"])
        print(f"report: {report}")


if __name__ == "__main__":
    main()
