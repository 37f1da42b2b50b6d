"""Did each run learn? A study's success rate at the end of training against its own start, seed by seed.

A study whose design says ``learning = true`` (:mod:`~cory_agents.evaluation.study`) asks of each arm whether
its team learned a game it starts at (Taboo, the signalling game), not whether it beats another arm. Per
seed, from the archived ``metrics.csv``: the success rate (the collective reward of a team game whose
reward is 1 for a success, the learners' task rewards summed) over the first ``final_window`` iterations
and over the last, each ``final_window x batch_size`` games, and a one-sided Fisher exact test that the
last window's rate is above the first's. A seed learned where that test's p is below the design's alpha;
the section says in how many seeds each arm learned, the start and end over seeds (each a rate's interval,
:func:`~cory_agents.evaluation.rl_statistics.rate_ci_over_seeds`), draws the curves (``learning.png`` in
the archive) and shows the first seed's dialogues of its last iteration (``samples.jsonl``).

Example:
    >>> learned_in(np.array([0.0, 0.25, 0.5]), games=8, window=1)["successes"]
    (0, 4)
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

from cory_agents.evaluation.benchmark_report import run_dir
from cory_agents.evaluation.report import markdown_table
from cory_agents.evaluation.rl_statistics import rate_ci_over_seeds
from cory_agents.training.metrics import SAMPLES_FILE, read_metrics

FIGURE = "learning.png"


def success_curve(folder: Path) -> np.ndarray:
    """A team run's success rate per iteration: its learners' task rewards summed (one of them scores a
    success; the other's own turn scores 0)."""
    df = read_metrics(folder).groupby("iteration").last().sort_index()  # a re-logged iteration counts once
    return df[[c for c in df.columns if c.endswith("/task_reward_mean")]].sum(axis=1).to_numpy()


def learned_in(curve: np.ndarray, games: int, window: int, alpha: float = 0.05) -> dict[str, Any]:
    """The first and last ``window`` iterations of a success-rate ``curve`` (``games`` per iteration) compared:
    their successes, rates, the one-sided Fisher exact p that the last window's rate is above the first's, and
    whether it is below ``alpha``. Raises :class:`ValueError` where the curve is not a success rate (a window's
    successes not a whole number of games)."""
    if curve.size < 2 * window:
        raise ValueError(f"a run of {curve.size} iterations has no two windows of {window} to compare")
    counts = []
    for part in (curve[:window], curve[-window:]):
        successes = float(part.sum() * games)
        if abs(successes - round(successes)) > 1e-6 * max(1.0, successes):
            raise ValueError(
                f"learning = true compares success rates, and {successes:g} successes in {window * games} games is "
                f"not a count: use it with a game whose reward is 1 for a success and 0 otherwise"
            )
        counts.append(int(round(successes)))
    trials = window * games
    start, end = counts
    p = float(stats.fisher_exact([[end, trials - end], [start, trials - start]], alternative="greater")[1])
    return {
        "successes": (start, end),
        "trials": trials,
        "rates": (start / trials, end / trials),
        "p": p,
        "learned": p < alpha,
    }


def learning_section(study: dict[str, Any], folder: Path, page: Path) -> str:
    """Each arm's learning, seed by seed, from the archive in ``folder`` (its ``report.json`` and runs)."""
    report = json.loads((folder / "report.json").read_text())
    design = study["design"]
    window, alpha = int(design.get("final_window", 5)), float(design.get("alpha", 0.05))
    games = int(report["settings"]["train"]["batch_size"])
    rows, lines, curves = [], [], {}
    for algo in report["algos"]:
        results = []
        for seed in report["seeds"]:
            curves[algo, seed] = success_curve(run_dir(folder, algo, seed))
            result = learned_in(curves[algo, seed], games, window, alpha)
            results.append(result)
            (start, end), (a, b) = result["successes"], result["rates"]
            rows.append(
                [algo, str(seed), f"{a:.3f} ({start}/{result['trials']})", f"{b:.3f} ({end}/{result['trials']})"]
                + [f"{result['p']:.2g}", "yes" if result["learned"] else "no"]
            )
        over = [rate_ci_over_seeds([r["rates"][i] for r in results], trials=window * games) for i in (0, 1)]
        lines.append(
            f"- **{algo}** learned in {sum(r['learned'] for r in results)} of {len(results)} seeds; success over "
            f"seeds: first {window} iterations {over[0][0]:.3f} [{over[0][1]:.3f}, {over[0][2]:.3f}], last "
            f"{window} {over[1][0]:.3f} [{over[1][1]:.3f}, {over[1][2]:.3f}] (95% interval of a rate over seeds)."
        )
    figure = _plot(curves, folder / FIGURE)
    first = (report["algos"][0], report["seeds"][0])
    return "\n".join(
        [
            f"Each seed's success over its first {window} iterations against its last {window} ({window * games} "
            f"games each): a one-sided Fisher exact test, learned where p < {alpha:g}.",
            "",
            *lines,
            "",
            markdown_table(["arm", "seed", f"first {window}", f"last {window}", "p", "learned"], rows),
            "",
            f"![success per iteration]({Path(os.path.relpath(figure, page.parent)).as_posix()})",
            "",
            f"Dialogues of {first[0]} seed {first[1]}, last iteration (the end of each prompt, then the answer):",
            "",
            *(dialogues(run_dir(folder, *first)) or ["(no samples archived)"]),
        ]
    )


def dialogues(folder: Path, shown: int = 4, tail: int = 160) -> list[str]:
    """The last iteration's sample dialogues of a run, conversation by conversation (the ``b``-th sample of
    each learner), in the chain's order: the end of each position's prompt, and its answer."""
    path = folder / SAMPLES_FILE
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
    if not records:
        return []
    last = max(r["iteration"] for r in records)
    by_learner: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        if r["iteration"] == last:
            by_learner.setdefault(r["learner"], []).append(r)
    lines = []
    for b, turns in enumerate(zip(*by_learner.values())):
        if b == shown:
            break
        turns = sorted(turns, key=lambda r: r["role"] != "pioneer")  # the chain's order: the pioneer first
        lines.append(f"{b + 1}. reward {turns[0]['reward']:.2f}:")
        for r in turns:
            context = json.dumps(r.get("context", r["query"])[-tail:], ensure_ascii=False)
            lines.append(f"    - {r['learner']} ({r['role']}): ...{context} -> {json.dumps(r['response'])}")
    return lines


def _plot(curves: dict[tuple[str, int], np.ndarray], path: Path) -> Path:
    from cory_agents.training.plots import arm_panels

    def draw(ax, algo: str) -> None:
        runs = {seed: c for (arm, seed), c in curves.items() if arm == algo}
        for seed, c in runs.items():
            ax.plot(np.arange(c.size), c, alpha=0.4, label=f"seed {seed}")
        length = min(c.size for c in runs.values())
        ax.plot(np.mean([c[:length] for c in runs.values()], axis=0), color="black", linewidth=2, label="mean")

    return arm_panels(path, list(dict.fromkeys(algo for algo, _ in curves)), "success rate", draw, legend_size=7)
