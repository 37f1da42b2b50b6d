"""The games study: does the embedded model learn the signalling game, and how does a second round train?

Runs (each ``examples/train_cory.py`` at the training defaults on the embedded model, 3 seeds):

- ``signal``: ``--task signal`` (K = 4 colours, chance 0.25), CORY's chain of two;
- ``sentiment-2-rounds``: ``--task sentiment --rounds 2`` (each agent revises after reading the other).

A run is resumed from its checkpoints when the study is started again (``--root``, outside the
work tree by default), skipped once finished. The report goes to docs/games.md between its
markers: per run kind the start and end of the curve over seeds (mean and 95% t-interval), a
figure of the curves (docs/games/<run>.png) and sample dialogues of the last iteration.

    python studies/games.py                      # run what is missing, then the report
    python studies/games.py --runs signal        # one kind
    python studies/games.py --report-only        # the report from what has run so far
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python studies/games.py` from anywhere

from cory_agents.evaluation.learning import dialogues  # noqa: E402
from cory_agents.evaluation.report import fmt, write_sections  # noqa: E402
from cory_agents.evaluation.rl_statistics import binomial_test_against_chance, rate_ci_over_seeds  # noqa: E402
from cory_agents.training.metrics import read_metrics  # noqa: E402
from studies.reproduce import Stopped, iterations_done, over_seeds, run_dir, train  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
DEFAULT_ROOT = Path.home() / ".cache" / "cory_env" / "games"
PAGE = REPO / "docs" / "games.md"
FIGURES = REPO / "docs" / "games"
MARKERS = ("<!-- results: written by studies/games.py -->", "<!-- /results -->")
SEEDS = (0, 1, 2)
#: run kind -> (its flags, iterations, what its curve shows)
RUNS: dict[str, tuple[list[str], int, str]] = {
    "signal": (["--algo", "cory", "--task", "signal", "--batch-size", "32"], 60, "success rate"),
    "sentiment-2-rounds": (["--algo", "cory", "--task", "sentiment", "--rounds", "2"], 30, "collective reward"),
}
COMMON = ["--checkpoint-every", "5", "--report-to", "none", "--save-model", "false", "--samples-per-iteration", "4"]
WINDOW = 5  # iterations averaged at the start and the end of a curve
SIGNAL_BATCH, SIGNAL_CHANCE = 32, 0.25  # the signalling runs' games per iteration, and chance (K = 4)
#: The frontier study's archived runs at the training defaults (KL coefficient 0.05, 60 iterations), read
#: over the same iterations as the two-round runs (a round costs a turn's time: two rounds, twice an iteration's).
FRONTIER_RUNS = REPO / "docs" / "frontier" / "runs"


def curve(out: Path) -> np.ndarray:
    """The run's curve: the collective reward each iteration (the mean of its learners' ``reward_mean``;
    in the signalling game the success rate, the sender scoring 0)."""
    df = read_metrics(out)
    columns = [c for c in df.columns if c.endswith("/reward_mean")]
    return df[columns].mean(axis=1).to_numpy()


def summary(root: Path, kind: str) -> dict:
    """Start and end of the curve over the finished seeds, and the curves."""
    iterations = RUNS[kind][1]
    curves = [curve(run_dir(root, kind, s)) for s in SEEDS if iterations_done(run_dir(root, kind, s)) >= iterations]
    starts = [float(c[:WINDOW].mean()) for c in curves]
    ends = [float(c[-WINDOW:].mean()) for c in curves]
    if kind != "signal":
        return {
            "seeds": len(curves),
            "start": over_seeds(starts),
            "end": over_seeds(ends),
            "ends": ends,
            "curves": curves,
        }
    # A success rate: intervals inside [0, 1] (logit over seeds), each seed's exact test against chance.
    trials = SIGNAL_BATCH * WINDOW
    rate = {
        k: dict(zip(("mean", "low", "high"), rate_ci_over_seeds(v, trials=trials)))
        for k, v in (("start", starts), ("end", ends))
    }
    exact = [binomial_test_against_chance(round(v * trials), trials, SIGNAL_CHANCE) for v in ends]
    return {"seeds": len(curves), **rate, "ends": ends, "exact_p": exact, "curves": curves}


def learner_mean(out: Path, metric: str, iterations: int) -> float:
    """The mean over a run's learners of ``metric`` over the last :data:`WINDOW` of its first ``iterations``."""
    df = read_metrics(out).head(iterations)
    columns = [c for c in df.columns if c.endswith(f"/{metric}")]
    return float(df[columns].tail(WINDOW).mean(axis=1).mean())


def observer_mean(out: Path, metric: str, iterations: int) -> float:
    """``metric`` of the learner in the observer's seat (position 1) each iteration, over the last
    :data:`WINDOW` of a one-round CORY run's first ``iterations``: the answer that revises another's."""
    df = read_metrics(out).head(iterations).tail(WINDOW)
    learners = sorted({c.split("/")[0] for c in df.columns if c.endswith("/role")})
    return float(np.mean([row[f"{n}/{metric}"] for _, row in df.iterrows() for n in learners if row[f"{n}/role"] == 1]))


def frontier_point(root: Path) -> str:
    """The two-round sentiment game's end point beside one-round CORY's and PPO's at the training
    defaults (the frontier study's runs, at the same iteration): the final turn's task reward and the
    KL per turn, the last :data:`WINDOW` iterations, over seeds."""
    iterations = RUNS["sentiment-2-rounds"][1]
    rows = []
    for name, folder, reward, kl in (
        ("PPO, 1 round", lambda s: FRONTIER_RUNS / f"ppo-kl0.05-seed{s}", "task_reward_mean", "kl"),
        ("CORY, 1 round", lambda s: FRONTIER_RUNS / f"cory-kl0.05-seed{s}", "task_reward_mean", "kl"),
        ("CORY, 1 round, the observer's answer", lambda s: FRONTIER_RUNS / f"cory-kl0.05-seed{s}", "observer", "kl"),
        (
            "CORY, 2 rounds",
            lambda s: run_dir(root, "sentiment-2-rounds", s),
            "final_turn_task_reward_mean",
            "kl_per_turn",
        ),
    ):
        runs = [folder(s) for s in SEEDS if iterations_done(folder(s)) >= iterations]
        if not runs:
            continue
        if reward == "observer":  # the seat, whichever learner sits there
            r = over_seeds([observer_mean(out, "task_reward_mean", iterations) for out in runs])
            k = over_seeds([observer_mean(out, kl, iterations) for out in runs])
        else:
            r = over_seeds([learner_mean(out, reward, iterations) for out in runs])
            k = over_seeds([learner_mean(out, kl, iterations) for out in runs])
        rows.append(
            f"| {name} | {len(runs)} | {fmt(r['mean'])} [{fmt(r['low'])}, {fmt(r['high'])}] "
            f"| {fmt(k['mean'])} [{fmt(k['low'])}, {fmt(k['high'])}] |"
        )
    rows += matched_kl(root, iterations)
    head = [
        f"Beside one round at the same settings (the frontier study's runs at KL coefficient 0.05, their first "
        f"{iterations} iterations): the last answer's task reward and the KL per answer, iterations "
        f"{iterations - WINDOW}-{iterations - 1}, mean of the learners, 95% interval over seeds.",
        "",
        "| game | seeds | task reward of the last answer | KL per answer |",
        "|---|---|---|---|",
    ]
    return "\n".join([*head, *rows, ""])


def matched_kl(root: Path, iterations: int) -> list[str]:
    """The one-round frontier at the two-round game's KL per answer: each method's best KL coefficient
    there among the frontier study's runs (``studies/frontier.py``'s rule: the reward where the
    smoothed KL first reaches the budget, every seed reaching it), as table rows."""
    from studies import frontier

    runs = [run_dir(root, "sentiment-2-rounds", s) for s in SEEDS]
    runs = [out for out in runs if iterations_done(out) >= iterations]
    if not runs:
        return []
    budget = float(np.mean([learner_mean(out, "kl_per_turn", iterations) for out in runs]))
    groups = frontier.group(frontier.load_runs(REPO / "docs" / "frontier", 60), "frontier")
    rows = []
    for method, name in (("ppo", "PPO"), ("cory", "CORY")):
        coefficient, rewards = frontier.best_at(groups, method, budget)
        if rewards:
            r = over_seeds(rewards)
            rows.append(
                f"| {name}, 1 round, where its KL first reaches {fmt(budget)} (its best KL coefficient there: "
                f"{coefficient:g}) | {len(rewards)} | {fmt(r['mean'])} [{fmt(r['low'])}, {fmt(r['high'])}] "
                f"| {fmt(budget)} |"
            )
        else:
            rows.append(f"| {name}, 1 round, at KL {fmt(budget)} | 0 | no coefficient reaches it with 2 seeds | |")
    return rows


def plot(kind: str, result: dict, path: Path, chance: float | None) -> None:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6, 3.5))
    ax = fig.add_subplot()
    for seed, c in zip(SEEDS, result["curves"]):
        ax.plot(np.arange(len(c)), c, alpha=0.4, label=f"seed {seed}")
    if result["curves"]:
        ax.plot(np.mean(result["curves"], axis=0), color="black", linewidth=2, label="mean")
    if chance is not None:
        ax.axhline(chance, linestyle="--", color="grey", label="chance")
    ax.set_xlabel("iteration")
    ax.set_ylabel(RUNS[kind][2])
    ax.set_title(kind)
    ax.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)


def report(root: Path, kinds: list[str]) -> str:
    parts = []
    for kind in kinds:
        flags, iterations, what = RUNS[kind]
        result = summary(root, kind)
        chance = 0.25 if kind == "signal" else None
        if result["seeds"]:
            plot(kind, result, FIGURES / f"{kind}.png", chance)
        s, e = result["start"], result["end"]
        parts += [
            f"### {kind}",
            "",
            f"`python examples/train_cory.py {' '.join(flags)} --iterations {iterations} --seed S` "
            f"(seeds {', '.join(map(str, SEEDS))}; {result['seeds']} finished).",
            "",
            f"| {what} | mean | 95% interval |",
            "|---|---|---|",
            f"| first {WINDOW} iterations | {fmt(s['mean'])} | [{fmt(s['low'])}, {fmt(s['high'])}] |",
            f"| last {WINDOW} iterations | {fmt(e['mean'])} | [{fmt(e['low'])}, {fmt(e['high'])}] |",
            "",
            f"Last {WINDOW} iterations by seed: {', '.join(fmt(v) for v in result['ends']) or 'none yet'}"
            + (
                f" (chance {fmt(chance)}: {sum(v > chance for v in result['ends'])} of {result['seeds']} above; exact "
                f"binomial p against chance over the window's {SIGNAL_BATCH * WINDOW} games, by seed: "
                f"{', '.join(f'{p:.2g}' for p in result['exact_p'])})."
                if chance
                else "."
            ),
            "",
        ]
        if result["seeds"]:
            parts += [f"![{kind}](games/{kind}.png)", "", "Sample dialogues (seed 0, last iteration):", ""]
            parts += dialogues(run_dir(root, kind, SEEDS[0]), tail=110) + [""]
        if kind == "sentiment-2-rounds" and result["seeds"]:
            parts.append(frontier_point(root))
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", type=Path, default=DEFAULT_ROOT, help="where the runs are (resumed from there)")
    parser.add_argument("--runs", nargs="+", choices=list(RUNS), default=list(RUNS), help="which kinds of run")
    parser.add_argument("--report-only", action="store_true", help="write the report from the runs done")
    args = parser.parse_args(argv)
    if not args.report_only:
        try:
            for kind in args.runs:
                flags, iterations, _ = RUNS[kind]
                for seed in SEEDS:
                    train(kind, seed, iterations, args.root, COMMON, "games", configs={kind: flags})
        except Stopped as stop:
            raise SystemExit(stop.code) from None
    write_sections(PAGE, {MARKERS: report(args.root, list(RUNS))})
    print(f"report: {PAGE}")


if __name__ == "__main__":
    main()
