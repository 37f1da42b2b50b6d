"""HAPPO's weight clipped: ``--happo-factor-clip 2`` against the unclipped HAPPO runs of the multi-agent comparison.

HAPPO's weight ``M`` (cory_agents.learners.happo) is the product of the earlier agents' probability ratios of
their whole answers. In the comparison's HAPPO runs on the embedded model (docs/multi-agent/cory-happo)
it reached 10^5-10^6 on some conversations: one conversation's advantage then outweighs the batch's.
This study trains the same runs with the weight clipped to [1/2, 2]:

    cory-bench --algos cory:happo --iterations 45 --happo-factor-clip 2 --seeds 3 --out ~/.cache/cory_env/happo-clip2

the training defaults on the embedded model, seeds 0-2, the settings of the comparison's HAPPO runs but
the clip (their first member's first update is the same, bit for bit). It runs seed by seed (each a
``--resume`` of the last), archives each finished run's metrics.csv, config.json and evaluation.json in
docs/multi-agent/happo-clip/cory-happo/seed<N>/, and writes its section of docs/multi-agent-algorithms.md
and a figure.

    python studies/happo_clip.py                  # run what is missing, archive, the page
    python studies/happo_clip.py --report-only    # the page from the archived runs

The rule, fixed before the runs (the comparison's): clipped - unclipped differs when the 95% Welch
interval over seeds excludes 0.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python studies/happo_clip.py` from anywhere

from cory_agents.evaluation import reward_benchmark  # noqa: E402
from cory_agents.evaluation.benchmark_report import (  # noqa: E402
    MEAN_OF_LEARNERS,
    TRAIN_METRICS,
    final_training_metrics,
    reward_rise_k,
    reward_rises,
    run_dir,
    with_mean_of_learners,
)
from cory_agents.evaluation.report import fmt, write_json, write_sections  # noqa: E402
from cory_agents.evaluation.statistics import mean_ci, welch_test  # noqa: E402
from cory_agents.training.metrics import read_metrics  # noqa: E402
from studies import multi_agent  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
ARM = "cory:happo"
CLIP = 2.0
ITERATIONS = 45
SEEDS = 3
DEFAULT_ROOT = Path.home() / ".cache" / "cory_env" / f"happo-clip{CLIP:g}"
UNCLIPPED = REPO / "docs" / "multi-agent"  # the comparison's archive: its cory-happo/seed<N> runs
ARCHIVE = REPO / "docs" / "multi-agent" / "happo-clip"
PAGE = REPO / "docs" / "multi-agent-algorithms.md"
MARKERS = ("<!-- happo-clip: written by studies/happo_clip.py -->", "<!-- /happo-clip -->")
PLOT = "task_reward.png"
CONFIDENCE = 0.95
#: What is compared, per run: name -> how it is read (the mean of the two learners).
COMPARED = (
    "held-out task reward",
    "held-out KL",
    "training task reward, last iteration",
    "training KL, last iteration",
    "reward rise z",
)


def finished_seeds(folder: Path) -> int:
    return multi_agent.finished_seeds(folder, [ARM])


def run_values(folder: Path) -> dict[str, float]:
    """One run's compared values (the mean of its learners) and its weight statistics."""
    df = read_metrics(folder)
    batch_size = json.loads((folder / "config.json").read_text())["batch_size"]
    held_out = json.loads((folder / "evaluation.json").read_text())["learners"]
    final = with_mean_of_learners(final_training_metrics(df), TRAIN_METRICS)[MEAN_OF_LEARNERS]
    rise = reward_rises(df, batch_size, reward_rise_k(df["iteration"].nunique()))[MEAN_OF_LEARNERS]
    factor = df.filter(like="/happo_factor_max").to_numpy()
    clipped = df.filter(like="/happo_factor_clipped").to_numpy()
    return {
        "held-out task reward": float(np.mean([v["task_reward_mean"] for v in held_out.values()])),
        "held-out KL": float(np.mean([v["kl"] for v in held_out.values()])),
        "training task reward, last iteration": final["task_reward_mean"],
        "training KL, last iteration": final["kl"],
        "reward rise z": rise["z"],
        "largest weight": float(factor.max()),
        "typical largest weight": float(np.median(factor.max(axis=1))),  # median over iterations
        # The later agent's share of clipped weights (the first agent's weight is 1), when there is a clip.
        "clipped share": float(clipped.max(axis=1).mean()) if clipped.size else float("nan"),
    }


def compare(archive: Path, unclipped_folder: Path) -> dict:
    """Each compared value over seeds for both, and the Welch difference clipped - unclipped."""
    clipped = [run_values(run_dir(archive, ARM, s)) for s in range(finished_seeds(archive))]
    unclipped = [run_values(run_dir(unclipped_folder, ARM, s)) for s in range(finished_seeds(unclipped_folder))]
    result = {"seeds": len(clipped), "clipped": clipped, "unclipped": unclipped, "tests": {}}
    for name in COMPARED:
        a, b = [r[name] for r in clipped], [r[name] for r in unclipped]
        result["tests"][name] = {"clipped": mean_ci(a, CONFIDENCE), "unclipped": mean_ci(b, CONFIDENCE)}
        if len(a) >= 2:
            result["tests"][name]["difference"] = welch_test(a, b, CONFIDENCE)
    return result


def verdict(test: dict) -> str:
    if "difference" not in test:
        return "no test (fewer than 2 seeds)"
    w = test["difference"]
    return "differs" if w["ci_low"] > 0 or w["ci_high"] < 0 else "no detected difference"


def plot(archive: Path, unclipped: Path, path: Path) -> None:
    """Task reward (mean of the learners, mean over seeds) per iteration, with and without the clip."""
    fig = Figure(figsize=(6, 4))
    ax = fig.subplots()
    for label, folder in (("unclipped", unclipped), (f"clip {CLIP:g}", archive)):
        n, curves = finished_seeds(folder), []
        for seed in range(n):
            df = read_metrics(run_dir(folder, ARM, seed)).groupby("iteration").last().sort_index()
            curves.append(df.filter(like="/task_reward_mean").to_numpy().mean(axis=1))
        ax.plot(np.mean(curves, axis=0), label=f"HAPPO {label} ({n} seeds)")
    ax.set(xlabel="iteration", ylabel="task reward (mean of the learners)", title="HAPPO with and without the clip")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def section(result: dict) -> str:
    seeds, reference = result["seeds"], len(result["unclipped"])
    rows = []
    for name in COMPARED:
        test = result["tests"][name]
        cells = [f"{fmt(m)} [{fmt(lo)}, {fmt(hi)}]" for m, lo, hi in (test["unclipped"], test["clipped"])]
        w = test.get("difference")
        diff = (
            f"{fmt(w['difference'])} [{fmt(w['ci_low'])}, {fmt(w['ci_high'])}], p {fmt(w['p_value'], digits=2)}"
            if w
            else "-"
        )
        rows.append(f"| {name} | {cells[0]} | {cells[1]} | {diff} | {verdict(test)} |")
    weights = []
    for label, runs in (("unclipped", result["unclipped"]), (f"clip {CLIP:g}", result["clipped"])):
        largest = ", ".join(f"{r['largest weight']:.3g}" for r in runs)
        median = ", ".join(f"{r['typical largest weight']:.3g}" for r in runs)
        line = f"- {label}: largest weight per seed {largest}; median over iterations of the largest, {median}"
        if label != "unclipped":
            line += "; share of the later agent's weights the clip changed " + ", ".join(
                f"{r['clipped share']:.2f}" for r in runs
            )
        weights.append(line)
    return "\n".join(
        [
            "",
            f"{seeds} of {SEEDS} seeds with the clip (docs/multi-agent/happo-clip/), against the comparison's "
            f"{reference} HAPPO seeds without it. Mean of the two learners, mean [{CONFIDENCE:.0%} interval] over seeds; "
            "clipped - unclipped by Welch's test:",
            "",
            f"| | HAPPO unclipped | HAPPO, clip {CLIP:g} | clipped - unclipped | verdict |",
            "|---|---|---|---|---|",
            *rows,
            "",
            "The weights each agent learned with (`happo_factor_max`, `happo_factor_clipped`):",
            "",
            *weights,
            "",
            f"![HAPPO with and without the clip](multi-agent/happo-clip/{PLOT})",
            "",
        ]
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, default=DEFAULT_ROOT, help="where the runs train (outside the tree)")
    parser.add_argument("--archive", type=Path, default=ARCHIVE, help="where the finished runs, figure and numbers go")
    parser.add_argument("--unclipped", type=Path, default=UNCLIPPED, help="the archive of the unclipped HAPPO runs")
    parser.add_argument("--page", type=Path, default=PAGE, help="the page whose happo-clip section is written")
    parser.add_argument("--seeds", type=int, default=SEEDS)
    parser.add_argument("--report-only", action="store_true", help="the page from the archived runs")
    args, passthrough = parser.parse_known_args(argv)
    if not args.report_only:
        for seeds in range(1, args.seeds + 1):
            flags = ["--algos", ARM, "--iterations", str(ITERATIONS), "--happo-factor-clip", str(CLIP)]
            flags += ["--seeds", str(seeds), "--out", str(args.root), *passthrough]
            reward_benchmark.main([*flags, "--resume"] if (args.root / "benchmark.json").exists() else flags)
            multi_agent.archive(args.root, args.archive, args.seeds, [ARM])
    if not finished_seeds(args.archive):
        print(f"no finished run in {args.archive} yet")
        return
    result = compare(args.archive, args.unclipped)
    plot(args.archive, args.unclipped, args.archive / PLOT)
    write_json(args.archive / "comparison.json", result)
    write_sections(args.page, {MARKERS: section(result)})
    print(section(result))


if __name__ == "__main__":
    main()
