"""Multi-agent algorithms on games where they can matter: CORY, HAPPO, difference rewards and MAPPO, via cory-bench.

Two games (docs/games.md), each a cory-bench benchmark of the four learners on the embedded model, CORY
first (the baseline every other is tested against), 3 seeds:

- ``signal``: the signalling game (``--task signal``: the sender alone sees a secret colour, the receiver
  must name it; success is the collective reward, chance 0.25), batch 32, 40 iterations;
- ``sentiment-2-rounds``: movie reviews over two rounds (``--rounds 2``: each agent revises after reading
  the other), batch 16, 20 iterations.

    cory-bench --task signal --algos cory cory:happo cory:difference cory:mappo --seeds 3 \\
        --iterations 40 --batch-size 32 --final-window 5 --out ~/.cache/cory_env/multi-agent-games/signal

This script runs each benchmark seed by seed (``--seeds 1``, then 2, then 3, each a ``--resume`` of the
last: a stopped study continues where it stopped, from the runs' own checkpoints), and after each seed
archives every finished run's metrics.csv and config.json (and evaluation.json where there is one) in
docs/multi-agent/games/<game>/, then cory-bench's report of the archived runs, a per-learner figure and
the game's results section of docs/multi-agent-algorithms.md. A report covers the seeds every learner has
finished.

    python studies/multi_agent_games.py                          # run what is missing, archive, the page
    python studies/multi_agent_games.py --games signal           # one game
    python studies/multi_agent_games.py --report-only            # the page from the archived runs
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import sys
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python studies/multi_agent_games.py` anywhere

from cory_agents.evaluation import benchmark_runs, reward_benchmark  # noqa: E402
from cory_agents.evaluation.benchmark_report import format_report, run_dir, write_report  # noqa: E402
from cory_agents.evaluation.decisions import pooled_sd, smallest_detectable_difference  # noqa: E402
from cory_agents.evaluation.report import (  # noqa: E402
    MEAN_OF_LEARNERS,  # noqa: E402
    fmt,
    write_sections,
)
from cory_agents.training.metrics import read_metrics  # noqa: E402
from cory_agents.training.ownership import remove_checkpoints  # noqa: E402
from cory_agents.training.plots import learner_columns  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
ARMS = ("cory", "cory:happo", "cory:difference", "cory:mappo")
NAMES = {"cory": "CORY", "cory:happo": "HAPPO", "cory:difference": "difference rewards", "cory:mappo": "MAPPO"}
#: game -> (its cory-bench flags, what its collective reward is)
GAMES: dict[str, tuple[list[str], str]] = {
    "signal": (
        [
            "--task",
            "signal",
            "--reward",
            "signal",
            "--prompt-source",
            "auto",
            "--batch-size",
            "32",
            "--iterations",
            "40",
        ],
        "success rate",
    ),
    "sentiment-2-rounds": (
        ["--task", "sentiment", "--rounds", "2", "--batch-size", "16", "--iterations", "20"],
        "collective reward (four answers)",
    ),
}
COMMON = ["--final-window", "5", "--checkpoint-every", "5", "--keep-checkpoints", "1", "--report-to", "none"]
SEEDS = 3
DEFAULT_ROOT = Path.home() / ".cache" / "cory_env" / "multi-agent-games"
ARCHIVE = REPO / "docs" / "multi-agent" / "games"
PAGE = REPO / "docs" / "multi-agent-algorithms.md"
PER_LEARNER_PLOT = "per_learner_task_reward.png"


def markers(game: str) -> tuple[str, str]:
    return f"<!-- results {game}: written by studies/multi_agent_games.py -->", f"<!-- /results {game} -->"


def finished(run: Path, iterations: int) -> bool:
    """Finished as cory-bench marks it: evaluated (a game with a held-out evaluation), or trained (one without)."""
    if (run / "evaluation.json").exists():
        return json.loads((run / "evaluation.json").read_text())["policy"].get("iterations_trained") == iterations
    return benchmark_runs.trained(run) >= iterations


def archive(root: Path, folder: Path, iterations: int, seeds: int) -> int:
    """Copy every finished run from ``root`` to ``folder`` and delete its checkpoints there (GBs each: cory-bench
    knows it finished without them); return how many seeds every learner has finished."""
    for arm in ARMS:
        for seed in range(seeds):
            run = run_dir(root, arm, seed)
            if finished(run, iterations):
                target = run_dir(folder, arm, seed)
                target.mkdir(parents=True, exist_ok=True)
                for name in ("metrics.csv", "config.json", "evaluation.json", benchmark_runs.TRAINED):
                    if (run / name).exists():
                        shutil.copyfile(run / name, target / name)
                remove_checkpoints(run / "checkpoints")
    if (root / "benchmark.json").exists():
        shutil.copyfile(root / "benchmark.json", folder / "benchmark.json")
    return archived_seeds(folder)


def archived_seeds(folder: Path) -> int:
    done = 0
    while all((run_dir(folder, arm, done) / "metrics.csv").exists() for arm in ARMS):
        done += 1
    return done


def report(folder: Path, seeds: int) -> dict:
    """cory-bench's report of the archived runs (their first ``seeds`` seeds)."""
    saved = json.loads((folder / "benchmark.json").read_text())
    train, bench = reward_benchmark.parse_args(["--out", str(folder), "--algos", *ARMS])
    train = dataclasses.replace(train, **{k: v for k, v in saved["train"].items() if hasattr(train, k)})
    bench = dataclasses.replace(bench, **{**saved["benchmark"], "out": str(folder), "seeds": seeds, "seed": 0})
    return write_report(folder, train, bench, {**saved, "benchmark": dataclasses.asdict(bench)})


def plot_per_learner(folder: Path, seeds: int, game: str) -> Path:
    """Each learner's task reward and the collective reward (mean over seeds), one panel per algorithm."""
    fig = Figure(figsize=(4.5 * len(ARMS), 3.8))
    for ax, arm in zip(fig.subplots(1, len(ARMS), sharey=True, squeeze=False)[0], ARMS):
        frames = [read_metrics(run_dir(folder, arm, s)).groupby("iteration").last() for s in range(seeds)]
        learners = learner_columns(frames[0].reset_index(), "task_reward_mean")
        for learner in learners:
            ax.plot(np.mean([df[f"{learner}/task_reward_mean"] for df in frames], axis=0), label=learner)
        collective = [sum(df[f"{n}/task_reward_mean"] for n in learners) for df in frames]
        ax.plot(np.mean(collective, axis=0), color="black", label="collective")
        ax.set(xlabel="iteration", title=f"{NAMES[arm]} ({seeds} seeds)")
        ax.grid(alpha=0.3)
    ax.legend()
    fig.suptitle(f"{game}: each learner's task reward and the collective reward, mean over seeds")
    fig.tight_layout()
    path = folder / PER_LEARNER_PLOT
    fig.savefig(path, dpi=100)
    return path


def findings(result: dict, what: str) -> list[str]:
    """One line per learner against CORY, the collective reward and the learners' mean KL, in the three wordings'
    terms: "different" (Welch's p below 0.05), else "undecided" with the smallest difference these seeds detect
    with 80% power (no margin was declared before these runs, so nothing is called equivalent)."""
    lines = []
    rows = {(r["algo"], r["learner"]): r for r in result["summary"]}
    for test in result["comparisons"]:
        if test["learner"] != MEAN_OF_LEARNERS:
            continue
        cells = []
        for metric, label in (("collective_reward", what), ("kl", "KL (mean of the learners)")):
            w = test["train"][metric]
            x = rows[(test["algo"], MEAN_OF_LEARNERS)]["train"][metric]["values"]
            y = rows[(test["baseline"]["algo"], MEAN_OF_LEARNERS)]["train"][metric]["values"]
            sd, n = pooled_sd(x, y), 2 / (1 / len(x) + 1 / len(y))
            p = w["p_value"]
            words = (
                "different"
                if p is not None and p < 0.05
                else f"undecided (smallest detectable difference {smallest_detectable_difference(sd, n):.2g})"
            )
            p_text = "n/a" if p is None or not np.isfinite(p) else f"{p:.2f}"
            cells.append(
                f"{label} {fmt(w['difference'])} [{fmt(w['ci_low'])}, {fmt(w['ci_high'])}], p {p_text}: {words}"
            )
        lines.append(f"- **{NAMES[test['algo']]} - CORY**: " + "; ".join(cells) + ".")
    return lines


def write_page(result: dict, seeds: int, game: str, planned: int = SEEDS, page: Path = PAGE) -> None:
    """The game's results section of the page: the findings, the cost, the plots, cory-bench's report."""
    cost = result["seconds_per_iteration"]
    base = cost["cory"]["mean"]
    relative = ", ".join(f"{NAMES[a]} {cost[a]['mean'] / base:.2f}x" for a in ARMS[1:] if a in cost)
    rows = {(r["algo"], r["learner"]): r for r in result["summary"]}
    level = [
        f"{NAMES[a]} {fmt(c['mean'])} [{fmt(c['ci_low'])}, {fmt(c['ci_high'])}]"
        for a in ARMS
        if (c := rows[(a, MEAN_OF_LEARNERS)]["train"]["collective_reward"])
    ]
    prefix = f"multi-agent/games/{game}/"
    body = "\n".join(
        [
            "",
            f"{seeds} of {planned} seeds archived (docs/multi-agent/games/{game}/). {GAMES[game][1].capitalize()}, "
            f"mean of the last {result['final_window']} iterations over seeds (the window aligned to the role "
            f"exchange: both arrangements alike) [95% interval]: {'; '.join(level)}.",
            "",
            'Differences against CORY over seeds, [95% interval], Welch\'s p, and what they decide: "different", or '
            '"undecided" with the smallest difference these seeds detect with 80% power (an interval that holds 0 '
            "detects nothing; it does not show equivalence):",
            "",
            *findings(result, GAMES[game][1]),
            "",
            f"Cost per iteration, against CORY's, measured side by side in these runs: {relative}.",
            "",
            f"![per-learner task reward]({prefix}{PER_LEARNER_PLOT})",
            "",
            "<details><summary>cory-bench's report of the archived runs, as it wrote it</summary>",
            "",
            format_report(result).split("\n", 1)[1].replace("](", f"]({prefix}"),
            "",
            "</details>",
        ]
    )
    write_sections(page, {markers(game): body})


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--games", nargs="+", choices=sorted(GAMES), default=list(GAMES))
    parser.add_argument("--root", type=Path, default=DEFAULT_ROOT, help="where the runs train (outside the tree)")
    parser.add_argument("--archive", type=Path, default=ARCHIVE, help="where the finished runs and reports go")
    parser.add_argument("--seeds", type=int, default=SEEDS)
    parser.add_argument("--report-only", action="store_true", help="the reports and page from the archived runs")
    parser.add_argument("--page", type=Path, default=PAGE, help="the page whose results sections are written")
    args, passthrough = parser.parse_known_args(argv)
    for game in args.games:
        flags, _ = GAMES[game]
        root, folder = args.root / game, args.archive / game
        folder.mkdir(parents=True, exist_ok=True)
        given = [*flags, *passthrough]  # a later --iterations (passed through) wins, as in cory-bench
        iterations = int(given[len(given) - 1 - given[::-1].index("--iterations") + 1])
        if not args.report_only:
            for seeds in range(1, args.seeds + 1):
                bench = [*flags, *COMMON, "--algos", *ARMS, "--seeds", str(seeds), "--out", str(root), *passthrough]
                reward_benchmark.main([*bench, "--resume"] if (root / "benchmark.json").exists() else bench)
                archive(root, folder, iterations, args.seeds)
        seeds = archive(root, folder, iterations, args.seeds) if root.exists() else archived_seeds(folder)
        if not seeds:
            print(f"{game}: no finished seed of every learner in {folder} yet")
            continue
        result = report(folder, seeds)
        plot_per_learner(folder, seeds, game)
        write_page(result, seeds, game, args.seeds, args.page)
        print(f"{game}: report of {seeds} seed(s) in {folder / 'report.md'}")


if __name__ == "__main__":
    main()
