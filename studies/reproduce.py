"""The reproduction study of the paper's IMDB claims, on the embedded default: one command.

It trains four configurations, each an ordinary ``examples/train_cory.py`` run (one subprocess
each) at that script's training defaults, for ``--iterations`` (default 60; the paper's 100
would nearly double the cost) at every seed of ``--seeds`` (default 0,1,2):

| configuration | flags                                    | what it tests                         |
|---------------|------------------------------------------|---------------------------------------|
| ppo           | --algo ppo                               | single-agent PPO, the baseline        |
| cory          | --algo cory                              | CORY: pioneer, observer, role exchange|
| cory-no-kt    | --algo cory --no-knowledge-transfer      | ablation: the observer sees the query |
| cory-no-rex   | --algo cory --no-role-exchange           | ablation: the roles never change      |

Every run also gets ``--checkpoint-every 5 --report-to none --save-model false`` (its last
checkpoint holds the policies; examples/export_model.py writes them out) and any flag this
command does not know (``--lr 1e-5``, ``--batch-size 64``, ...), which passes through to every
run, as in cory-bench. The runs live under ``--root`` (outside the work tree) as
``<configuration>/seed<N>/``: a finished run (its metrics.csv holds ``--iterations`` rows) is
skipped, a stopped one continues from its newest checkpoint (``--resume``), a missing one
starts (``--overwrite``). They go one at a time, seed by seed (the four configurations at the
first seed, then at the next), so a study stopped early still compares all four. Ctrl-C, or
SIGTERM to this command, lets the running run finish its iteration and write a checkpoint;
the same command then continues.

Cost: 12 runs at 3 seeds, 3 of PPO and 9 of CORY. A CORY iteration does a little more than
twice the work of a PPO iteration (two learners, and the observer's prompt holds the query
and the pioneer's answer), so the study costs about as much as 3 + 9 x 2 = 21 PPO runs of
``--iterations``; docs/benchmarks.md measures an iteration on a 2-core CPU.

The report, in ``--report`` (default docs/reproduction of this repository):

    results.md          the runs and their state; a verdict for each claim (supported, not
                        supported, inconclusive) with its numbers and rule; the final table
                        (the mean of the last --final-window iterations of each run, then over
                        seeds, with 95% t-intervals) and Welch's tests against PPO and CORY;
                        the first seed's generated samples at the last iteration
    curves.png          task reward, KL and combined reward: mean ± std over seeds
    kl_vs_reward.png    each configuration's trajectory, KL against task reward
    runs/<configuration>-seed<N>/metrics.csv, config.json
                        the runs' numbers, to redraw the figures (rewritten every time)

CORY counts as the mean of its two learners at each iteration, in the figures and the tables.

    python studies/reproduce.py                          # the whole study, then the report
    python studies/reproduce.py --seeds 0,1,2,3,4        # more seeds: the runs done are kept
    python studies/reproduce.py --report-only            # the report from what has run so far
    python studies/reproduce.py --list                   # every configuration's flags
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from cory_agents.evaluation.statistics import mean_ci, welch_test
from cory_agents.training.metrics import SAMPLES_FILE, read_metrics
from cory_agents.training.plots import learner_columns, plot_comparison, plot_kl_vs_reward

REPO = Path(__file__).resolve().parents[1]
TRAIN_SCRIPT = REPO / "examples" / "train_cory.py"

#: configuration -> its own flags; every run adds COMMON after them.
CONFIGS: dict[str, list[str]] = {
    "ppo": ["--algo", "ppo"],
    "cory": ["--algo", "cory"],
    "cory-no-kt": ["--algo", "cory", "--no-knowledge-transfer"],
    "cory-no-rex": ["--algo", "cory", "--no-role-exchange"],
    "cory-3-agents": ["--algo", "cory", "--num-agents", "3"],  # the Teams experiment (docs/teams.md), not the paper's
}
COMMON = ["--checkpoint-every", "5", "--report-to", "none", "--save-model", "false"]
#: Flags the study sets itself: a pass-through flag may not set them.
PER_RUN = (
    "--algo",
    "--seed",
    "--out",
    "--resume",
    "--overwrite",
    "--iterations",
    "--no-knowledge-transfer",
    "--no-role-exchange",
    "--num-agents",
)
BASELINE, FULL, ABLATIONS = "ppo", "cory", ("cory-no-kt", "cory-no-rex")
#: The paper's configurations: what the study runs and reports unless --configs says otherwise.
PAPER_CONFIGS = (BASELINE, FULL, *ABLATIONS)
METRICS = {"task_reward_mean": "task reward", "kl": "KL", "combined_reward": "combined reward"}
CONFIDENCE = 0.95
SIMILAR_REWARD = 0.05  # claim (a): rewards this close count as similar whatever their interval
KL_RATIO = 2.0  # claim (a): PPO's KL more than this many times CORY's
SAMPLES_SHOWN = 3  # per learner
SUPPORTED, NOT_SUPPORTED, INCONCLUSIVE = "supported", "not supported", "inconclusive"
STUDY_FILE = "study.json"  # in --root: the pass-through flags the runs were trained with


# ------------------------------------------------------------------------- the runs


def run_dir(root: Path, config: str, seed: int) -> Path:
    return root / config / f"seed{seed}"


def iterations_done(out: Path) -> int:
    """Iterations logged in ``out/metrics.csv`` (0 without one)."""
    try:
        return int(read_metrics(out)["iteration"].nunique())
    except (FileNotFoundError, pd.errors.EmptyDataError, KeyError):
        return 0


def checkpointed(out: Path) -> int:
    """Iterations the newest checkpoint holds (0 without one), from its name ``iter_000041.safetensors``
    (``.pt`` in the old format); read from names only, so that the report needs no torch."""
    names = sorted(p.stem for suffix in ("safetensors", "pt") for p in (out / "checkpoints").glob(f"iter_*.{suffix}"))
    return int(names[-1].removeprefix("iter_")) + 1 if names else 0


def command(
    config: str, seed: int, iterations: int, root: Path, flags: list[str], configs: dict[str, list[str]] = CONFIGS
) -> list[str]:
    """The train_cory.py command line of one run of ``configs[config]`` (without --resume / --overwrite)."""
    out = run_dir(root, config, seed)
    return [
        sys.executable,
        str(TRAIN_SCRIPT),
        *configs[config],
        *COMMON,
        *flags,
        "--iterations",
        str(iterations),
        "--seed",
        str(seed),
        "--out",
        str(out),
    ]


class Stopped(Exception):
    """A run stopped by Ctrl-C or SIGTERM after a checkpoint; ``code`` is its exit status."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


def train(
    config: str,
    seed: int,
    iterations: int,
    root: Path,
    flags: list[str],
    label: str,
    configs: dict[str, list[str]] = CONFIGS,
) -> None:
    """Train one run of ``configs[config]`` to ``iterations``: skip it if finished, continue it if
    stopped, else start it."""
    out = run_dir(root, config, seed)
    if iterations_done(out) >= iterations:
        print(f"{label} {config} seed {seed}: finished, skipped", flush=True)
        return
    done = checkpointed(out)
    how = ["--resume"] if done else ["--overwrite"]
    print(f"{label} {config} seed {seed}: " + (f"resuming at iteration {done}" if done else "starting"), flush=True)
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with open(out / "train.log", "a") as log:
        child = subprocess.Popen(
            [*command(config, seed, iterations, root, flags, configs), *how], stdout=log, stderr=subprocess.STDOUT
        )
        previous = signal.signal(signal.SIGTERM, lambda signum, _: child.send_signal(signum))
        try:
            try:
                code = child.wait()
            except KeyboardInterrupt:  # the run got the Ctrl-C too: it checkpoints after its iteration
                code = child.wait()
        finally:
            signal.signal(signal.SIGTERM, previous)
    if code in (128 + signal.SIGINT, 128 + signal.SIGTERM):
        raise Stopped(code)
    if code:
        lines = (out / "train.log").read_text(errors="replace").replace("\r", "\n").splitlines()
        tail = "\n".join([line for line in lines if line.strip()][-30:])  # progress bars redraw with \r
        raise RuntimeError(f"{config} seed {seed} failed (exit status {code}); {out / 'train.log'} ends:\n{tail}")
    print(
        f"{label} {config} seed {seed}: {iterations - done} iterations in {time.perf_counter() - start:.0f} s",
        flush=True,
    )


def check_flags(root: Path, flags: list[str]) -> None:
    """Refuse to mix runs trained with other pass-through flags in one --root; record them otherwise."""
    path = root / STUDY_FILE
    if path.exists() and (saved := json.loads(path.read_text())["flags"]) != flags:
        raise SystemExit(
            f"{root} holds a study trained with the flags {saved or 'none'}, not {flags or 'none'}: "
            f"give the same flags, or another --root"
        )
    root.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"flags": flags}) + "\n")


# ------------------------------------------------------------------------- the numbers


def curve(df: pd.DataFrame, metric: str) -> pd.Series:
    """The run's ``metric`` at each iteration, the mean over its learners (CORY's two)."""
    columns = list(learner_columns(df, metric).values())
    return df.set_index("iteration")[columns].mean(axis=1).groupby(level=0).last().sort_index()


@dataclass
class RunResult:
    """One run: how far it got, its final values and its change of combined reward."""

    config: str
    seed: int
    iterations: int  # logged
    final: dict[str, float] = field(default_factory=dict)  # metric -> mean of the last `window` iterations
    first: float = math.nan  # combined reward, mean of the first `window` iterations
    last: float = math.nan  # ... of the last ones


def summarise(root: Path, config: str, seed: int, window: int, out: Path | None = None) -> RunResult:
    """The run's numbers: finals over the last ``window`` iterations, the combined reward's change
    over the first and last ``window`` (half the run each if it is shorter than 2 windows). ``out``:
    the run's folder, if not under ``root`` (a copy in docs/reproduction/runs)."""
    out = out or run_dir(root, config, seed)
    result = RunResult(config, seed, iterations_done(out))
    if not result.iterations:
        return result
    df = read_metrics(out)
    result.final = {m: float(curve(df, m).iloc[-window:].mean()) for m in METRICS}
    combined = curve(df, "combined_reward")
    k = min(window, len(combined) // 2)
    if k:
        result.first, result.last = float(combined.iloc[:k].mean()), float(combined.iloc[-k:].mean())
    return result


def over_seeds(values: list[float]) -> dict[str, float]:
    """Mean, population std and the 95% t-interval of the mean (NaN where there are too few values)."""
    if not values:
        return {"mean": math.nan, "std": math.nan, "low": math.nan, "high": math.nan}
    mean, low, high = mean_ci(values, CONFIDENCE)
    return {"mean": mean, "std": float(np.std(values)), "low": low, "high": high}


def side(test: dict[str, float]) -> bool | None:
    """True if the interval of the difference lies above 0, False if below, None if it holds 0 (or is NaN)."""
    if test["ci_low"] > 0:
        return True
    if test["ci_high"] < 0:
        return False
    return None


def conjunction(parts: list[bool | None]) -> str:
    """Supported if every part holds, not supported if one is decided against, inconclusive otherwise."""
    if any(p is False for p in parts):
        return NOT_SUPPORTED
    return SUPPORTED if all(p is True for p in parts) else INCONCLUSIVE


def num(x: float, sign: bool = False) -> str:
    return "n/a" if not math.isfinite(x) else f"{x:+.3f}" if sign else f"{x:.3f}"


def p_value(p: float) -> str:
    return "n/a" if not math.isfinite(p) else "< 0.001" if p < 0.001 else f"{p:.3f}"


def difference(test: dict[str, float]) -> str:
    """``+0.120 [+0.010, +0.230], p 0.041``: a Welch difference, its 95% interval and p-value."""
    return (
        f"{num(test['difference'], True)} [{num(test['ci_low'], True)}, {num(test['ci_high'], True)}], "
        f"p {p_value(test['p_value'])}"
    )


def cell(stats: dict[str, float]) -> str:
    return f"{num(stats['mean'])} ± {num(stats['std'])} [{num(stats['low'])}, {num(stats['high'])}]"


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


# ------------------------------------------------------------------------- the verdicts


@dataclass
class Study:
    """What the report is computed from: every run's result, by configuration."""

    runs: dict[str, list[RunResult]]
    iterations: int
    window: int

    def values(self, config: str, metric: str) -> list[float]:
        return [r.final[metric] for r in self.runs.get(config, []) if r.final]

    def changes(self, config: str) -> list[float]:
        return [r.last - r.first for r in self.runs.get(config, []) if math.isfinite(r.last - r.first)]

    def incomplete(self, configs: tuple[str, ...]) -> list[str]:
        return [
            f"{r.config} seed {r.seed} ({r.iterations} of {self.iterations} iterations)"
            for c in configs
            for r in self.runs.get(c, [])
            if r.iterations < self.iterations
        ]

    def welch(self, a: str, b: str, metric: str, scale_b: float = 1.0) -> dict[str, float]:
        return welch_test(self.values(a, metric), [scale_b * v for v in self.values(b, metric)], CONFIDENCE)

    def change_test(self, config: str) -> dict[str, float]:
        """One-sample t-test of the per-seed changes against 0 (Welch's test against zeros: it reduces to it)."""
        changes = self.changes(config)
        return welch_test(changes, [0.0] * len(changes), CONFIDENCE)


def claim_kl_ratio(study: Study) -> tuple[str, str]:
    """(a) PPO's final KL more than twice CORY's at a similar task reward."""
    reward = study.welch(FULL, BASELINE, "task_reward_mean")
    kl = study.welch(BASELINE, FULL, "kl", scale_b=KL_RATIO)
    close = abs(reward["difference"]) < SIMILAR_REWARD
    holds_zero = side(reward) is None and math.isfinite(reward["ci_low"])
    similar = True if close or holds_zero else None if not math.isfinite(reward["ci_low"]) else False
    ppo_kl, cory_kl = (float(np.mean(study.values(c, "kl") or [math.nan])) for c in (BASELINE, FULL))
    ratio = ppo_kl / cory_kl if cory_kl > 0 else math.nan
    said = {True: "yes", False: "no", None: "undecided"}[similar]
    numbers = (
        f"final KL: PPO {num(ppo_kl)}, CORY {num(cory_kl)} (ratio {num(ratio)}); PPO KL - {KL_RATIO:g} x CORY "
        f"KL = {difference(kl)}; task reward CORY - PPO = {difference(reward)} (similar: {said})"
    )
    rule = (
        f"supported if the rewards are similar (the {CONFIDENCE:.0%} interval of their Welch difference holds 0, "
        f"or |difference| < {SIMILAR_REWARD}) and the interval of PPO KL - {KL_RATIO:g} x CORY KL lies above 0; "
        "not supported if the rewards are not similar or that interval lies below 0; inconclusive otherwise"
    )
    return conjunction([similar, side(kl)]), f"{numbers}. Rule: {rule}."


def claim_combined_trend(study: Study) -> tuple[str, str]:
    """(b) PPO's combined reward falls over training while CORY's rises."""
    ppo, cory = study.change_test(BASELINE), study.change_test(FULL)
    falls = None if side(ppo) is None else not side(ppo)
    w = study.window
    numbers = f"combined reward, last {w} - first {w} iterations: PPO {difference(ppo)}; CORY {difference(cory)}"
    rule = (
        f"per seed, the mean combined reward of the last {w} iterations minus that of the first {w}; a one-sample "
        f"t-test over seeds of those changes against 0 (the batch std of the combined reward is not logged, so "
        f"the reward-rise z of one run cannot be formed). Supported if PPO's {CONFIDENCE:.0%} interval lies "
        "below 0 and CORY's above 0; not supported if PPO's lies above 0 or CORY's below 0; inconclusive otherwise"
    )
    return conjunction([falls, side(cory)]), f"{numbers}. Rule: {rule}."


def claim_ablations_raise_kl(study: Study) -> tuple[str, str]:
    """(c) each ablation (no knowledge transfer, no role exchange) raises the final KL against CORY."""
    tests = {a: study.welch(a, FULL, "kl") for a in ABLATIONS}
    parts = [side(t) for t in tests.values()]
    reading = {True: "raises it", False: "lowers it", None: "undecided"}
    numbers = "; ".join(f"{a} - cory KL = {difference(t)} ({reading[side(t)]})" for a, t in tests.items())
    rule = (
        f"Welch's test of each ablation's final KL against CORY's, read one-sided: it raises the KL if the "
        f"{CONFIDENCE:.0%} interval of the difference lies above 0 (a one-sided test at "
        f"{(1 - CONFIDENCE) / 2:.1%}), not if it lies below 0; supported if both raise it, not supported if one "
        "lowers it, inconclusive otherwise"
    )
    return conjunction(parts), f"{numbers}. Rule: {rule}."


#: claim -> (its statement, the configurations it reads, how its verdict is computed)
CLAIMS = {
    "(a)": ("PPO's KL more than twice CORY's at a similar task reward", (BASELINE, FULL), claim_kl_ratio),
    "(b)": ("PPO's combined reward falls while CORY's rises", (BASELINE, FULL), claim_combined_trend),
    "(c)": ("each ablation raises the KL against CORY", (FULL, *ABLATIONS), claim_ablations_raise_kl),
}


def verdicts(study: Study) -> list[str]:
    """One Markdown line per claim: its verdict, the numbers and the rule."""
    lines = []
    for name, (statement, configs, judge) in CLAIMS.items():
        verdict, text = judge(study)
        missing = [f"{c} (not among --configs)" for c in configs if c not in study.runs]
        if incomplete := study.incomplete(configs) + missing:
            verdict, text = f"{INCONCLUSIVE}: incomplete", f"not finished: {', '.join(incomplete)}. So far: {text}"
        lines.append(f"- **{name} {statement}: {verdict}.** {text}")
    return lines


# ------------------------------------------------------------------------- the report


def last_samples(out: Path, shown: int = SAMPLES_SHOWN) -> tuple[int, list[dict]]:
    """The run's last logged iteration and up to ``shown`` of its samples per learner."""
    path = out / SAMPLES_FILE
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
    if not records:
        return -1, []
    last = max(r["iteration"] for r in records)
    chosen: list[dict] = []
    for r in records:
        if r["iteration"] == last and sum(c["learner"] == r["learner"] for c in chosen) < shown:
            chosen.append(r)
    return last, chosen


def sample_line(sample: dict) -> str:
    """``llm_0 (observer), task reward 0.812: "query" -> "response"`` (PPO's one learner is its role)."""
    who = sample["learner"] if sample["learner"] == sample["role"] else f"{sample['learner']} ({sample['role']})"
    text = lambda t: json.dumps(t, ensure_ascii=False)  # noqa: E731 (quoted, newlines escaped)
    return f"{who}, task reward {sample['task_reward']:.3f}: {text(sample['query'])} -> {text(sample['response'])}"


def copy_runs(folder: Path, runs: dict[str, Path]) -> None:
    """Replace ``folder`` by a copy of each run's metrics.csv and config.json, in ``folder/<name>``."""
    shutil.rmtree(folder, ignore_errors=True)
    for name, out in runs.items():
        (folder / name).mkdir(parents=True)
        for file in ("metrics.csv", "config.json"):
            if (out / file).exists():
                shutil.copyfile(out / file, folder / name / file)


def write_report(study: Study, root: Path, report: Path, seeds: list[int], flags: list[str]) -> Path:
    """results.md, curves.png, kl_vs_reward.png and runs/ in ``report``; returns results.md's path."""
    report.mkdir(parents=True, exist_ok=True)
    present = {c: [run_dir(root, c, r.seed) for r in runs if r.iterations] for c, runs in study.runs.items()}
    present = {c: dirs for c, dirs in present.items() if dirs}
    plot_comparison(present, report / "curves.png", metrics=list(METRICS))
    plot_kl_vs_reward({c: [read_metrics(d) for d in dirs] for c, dirs in present.items()}, report / "kl_vs_reward.png")
    copy_runs(report / "runs", {f"{config}-{out.name}": out for config, dirs in present.items() for out in dirs})

    w, level = study.window, f"{CONFIDENCE:.0%}"
    status = [
        [
            r.config,
            str(r.seed),
            f"{r.iterations} of {study.iterations}",
            "finished" if r.iterations >= study.iterations else "stopped" if r.iterations else "not started",
        ]
        for runs in study.runs.values()
        for r in runs
    ]
    finals = [
        [c, str(len(study.values(c, "kl"))), *(cell(over_seeds(study.values(c, m))) for m in METRICS)]
        for c in study.runs
    ]
    against_ppo = [
        [c, *(difference(study.welch(c, BASELINE, m)) for m in METRICS)] for c in study.runs if c != BASELINE
    ]
    trends = []
    for c, runs in study.runs.items():
        first = over_seeds([r.first for r in runs if math.isfinite(r.first)])
        last = over_seeds([r.last for r in runs if math.isfinite(r.last)])
        trends.append([c, cell(first), cell(last), difference(study.change_test(c))])
    against_cory = [[c, *(difference(study.welch(c, FULL, m)) for m in METRICS)] for c in ABLATIONS if c in study.runs]
    samples = []
    for config in study.runs:
        iteration, chosen = last_samples(run_dir(root, config, seeds[0]))
        if not chosen:
            samples += ["", f"### {config} (seed {seeds[0]})", "", "No samples yet."]
            continue
        samples += ["", f"### {config} (seed {seeds[0]}, iteration {iteration})", ""]
        samples += ["```text", *map(sample_line, chosen), "```"]

    passed = " ".join(flags) if flags else "none"
    lines = [
        "# Reproduction of the paper's IMDB claims",
        "",
        f"Written by `python studies/reproduce.py` (studies/reproduce.py says what it runs): "
        f"{', '.join(study.runs)} at the training defaults of examples/train_cory.py (extra flags: {passed}), "
        f"{study.iterations} iterations, seeds {', '.join(map(str, seeds))}. CORY counts as the mean of its two "
        f"learners at each iteration. Final = the mean of the last {w} iterations of a run; a cell is the mean ± std "
        f"over seeds [the {level} t-interval of the mean]. Combined reward = task reward - KL coefficient x KL.",
        "",
        "## Verdicts",
        "",
        *verdicts(study),
        "",
        "## Final values",
        "",
        table(["configuration", "seeds", *METRICS.values()], finals),
        "",
        f"Against PPO (Welch's t-test over seeds): the configuration's mean minus PPO's [{level} interval], two-sided "
        "p-value.",
        "",
        table(["configuration", *METRICS.values()], against_ppo),
        "",
        f"Ablations against CORY (Welch's t-test over seeds): the ablation's mean minus CORY's [{level} interval].",
        "",
        table(["configuration", *METRICS.values()], against_cory),
        "",
        f"Combined reward over training: the mean of the first and of the last {w} iterations, and the change "
        f"(last - first, per seed) with its {level} interval and p-value (one-sample t-test over seeds).",
        "",
        table(["configuration", f"first {w}", f"last {w}", "change"], trends),
        "",
        "## Curves",
        "",
        "![task reward, KL and combined reward: mean ± std over seeds](curves.png)",
        "",
        "![KL against task reward over training, mean over seeds](kl_vs_reward.png)",
        "",
        "## Samples at the end",
        "",
        f"The last iteration's samples of seed {seeds[0]}, up to {SAMPLES_SHOWN} per learner: query -> response. "
        "Repeated words across answers are the distribution collapse the paper describes.",
        *samples,
        "",
        "## Runs",
        "",
        table(["configuration", "seed", "iterations", "state"], status),
        "",
        "Each run's metrics.csv and config.json: `runs/<configuration>-seed<N>/`.",
        "",
    ]
    path = report / "results.md"
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


# ------------------------------------------------------------------------- command line


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False
    )
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated seeds (the paper: 3)")
    parser.add_argument(
        "--iterations", type=int, default=60, help="iterations per run (the paper: 100; at 60 PPO's KL is still rising)"
    )
    parser.add_argument(
        "--configs",
        default=",".join(PAPER_CONFIGS),
        help=f"comma-separated configurations to run (of {', '.join(CONFIGS)})",
    )
    parser.add_argument(
        "--root",
        default=str(Path.home() / ".cache" / "cory_env" / "reproduce"),
        help="where the runs live (outside the work tree; reused on a rerun)",
    )
    parser.add_argument(
        "--report",
        default=str(REPO / "docs" / "reproduction"),
        help="folder of results.md, curves.png, kl_vs_reward.png and runs/",
    )
    parser.add_argument(
        "--final-window",
        type=int,
        default=5,
        help="iterations at the end (and at the start) of a run that its final values average",
    )
    parser.add_argument("--report-only", action="store_true", help="train nothing: the report from what has run")
    parser.add_argument("--list", action="store_true", help="print every configuration's flags, then exit")
    args, flags = parser.parse_known_args(argv)
    configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    if unknown := [c for c in configs if c not in CONFIGS]:
        parser.error(f"unknown configuration(s) {', '.join(unknown)}: choose from {', '.join(CONFIGS)}")
    if taken := [f for f in flags if f.split("=")[0] in PER_RUN]:
        parser.error(f"{' '.join(taken)}: the study sets these itself")
    if args.final_window < 1:
        parser.error("--final-window must be at least 1")
    seeds = [int(s) for s in args.seeds.split(",")]
    root = Path(args.root).expanduser()
    if args.list:
        for config in configs:
            print(f"{config}: {' '.join(command(config, seeds[0], args.iterations, root, flags)[1:])}")
        return
    if not args.report_only:
        check_flags(root, flags)
        runs = [(c, s) for s in seeds for c in configs]
        start = time.perf_counter()
        try:
            for i, (config, seed) in enumerate(runs, 1):
                train(config, seed, args.iterations, root, flags, f"[{i}/{len(runs)}]")
        except Stopped as stop:
            print(f"stopped after a checkpoint: run the same command to continue ({root})", flush=True)
            sys.exit(stop.code)
        print(f"all {len(runs)} runs done ({time.perf_counter() - start:.0f} s)", flush=True)
    elif (root / STUDY_FILE).exists():
        flags = json.loads((root / STUDY_FILE).read_text())["flags"]
    study = Study(
        {c: [summarise(root, c, s, args.final_window) for s in seeds] for c in configs},
        args.iterations,
        args.final_window,
    )
    path = write_report(study, root, Path(args.report), seeds, flags)
    print("", *verdicts(study), "", f"report: {path}", sep="\n")


if __name__ == "__main__":
    main()
