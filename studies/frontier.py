"""The paper's question at laptop scale: KL-reward frontiers, the learning-rate claim, the models alone.

At one KL coefficient PPO and CORY end at different KLs (docs/reproduction.md), so "a similar
reward at a lower KL" is not a controlled comparison. This study trains each method at several
KL coefficients and compares them at matched drift; it trains PPO and CORY at two large
learning rates to test "PPO collapses where CORY converges"; and it judges every final model
answering held-out prompts alone, as a user would ship it. Every run is an ordinary
``examples/train_cory.py`` run at that script's training defaults (one subprocess each):

| study     | methods          | varied                          | seeds |
|-----------|------------------|---------------------------------|-------|
| frontier  | ppo, cory        | --kl-coef 0.01, 0.05, 0.1, 0.3  | 0,1,2 |
| lr        | ppo, cory        | --lr 1e-4, 3e-4 (default 3e-5)  | 0,1,2 |
| frontier  | grpo             | --kl-coef 0.01, 0.05, 0.1, 0.3  | 0,1,2 |

ppo is ``--algo ppo``, grpo ``--algo ppo --learner grpo`` (single agent, critic-free, groups of
``--group-size`` answers; its ``--kl-coef`` is the beta of its k3 loss term, not a reward
penalty, so its coefficients are not the same knob: the comparison is at matched measured KL),
cory ``--algo cory``. The runs go in the order of PHASES: first PPO and CORY at the KL
coefficients 0.01 and 0.05 over every seed (whose trajectories cross the KL budgets 1-3, so
that a study the CPU budget stops early has intervals at matched KL), then the learning-rate
runs, then PPO and CORY at 0.1, then GRPO at 0.01 and 0.05, then PPO and CORY at 0.3, then GRPO at
0.1 and 0.3, each over every seed (PHASES says why). ``--list`` prints every run's flags.

Each run, once trained (under ``--root``, outside the work tree, resumable as in
studies/reproduce.py), is evaluated alone on held-out prompts (``examples/evaluate.py
--checkpoint``: every learner answers as the pioneer, with its KL to the reference), then
archived in ``--report``/runs/<run>-seed<N>/ (metrics.csv, config.json, evaluation.json and the
samples of its first and last iterations), and its checkpoints are deleted (a CORY checkpoint
is about 3 GB). An archived run is finished: the command skips it, on any machine, so the study
continues from the tracked files in a later session. The base model is evaluated once the same
way (``base/evaluation.json``), for the collapse rule.

    python studies/frontier.py                  # run what is missing, then the report
    python studies/frontier.py --report-only    # the report from the archived runs
    python studies/frontier.py --list           # every run's flags
    python studies/frontier.py --budget-hours 8 # start runs until the archived ones cost 8 h (default 6; 0: no limit)
    python studies/frontier.py --iterations 100 --preset paper-imdb   # the paper's scale, on a GPU

Flags it does not know pass through to every run (as in reproduce.py), and are recorded: a
report never mixes runs trained with other flags. The rules the verdicts follow are fixed
below (RULES), before the runs.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python studies/frontier.py` from anywhere

from cory_agents.evaluation.report import write_sections  # noqa: E402
from cory_agents.evaluation.statistics import mean_ci, welch_test  # noqa: E402
from cory_agents.training.metrics import SAMPLES_FILE, read_metrics  # noqa: E402
from cory_agents.training.plots import plot_comparison  # noqa: E402
from cory_env.models import EMBEDDED_MODEL  # noqa: E402
from studies import reproduce  # noqa: E402
from studies.reproduce import (  # noqa: E402
    INCONCLUSIVE,
    NOT_SUPPORTED,
    REPO,
    SUPPORTED,
    Stopped,
    check_flags,
    difference,
    iterations_done,
    num,
    over_seeds,
    run_dir,
    side,
    table,
)

EVALUATE_SCRIPT = REPO / "examples" / "evaluate.py"
DEFAULT_REPORT = REPO / "docs" / "frontier"
METHODS: dict[str, list[str]] = {
    "ppo": ["--algo", "ppo"],
    "cory": ["--algo", "cory"],
    "grpo": ["--algo", "ppo", "--learner", "grpo"],
}
KL_COEFS = (0.01, 0.05, 0.1, 0.3)
LEARNING_RATES = (1e-4, 3e-4)
#: The runs in the order they go: phase by phase, within a phase seed by seed, each stage (study,
#: methods, the flag varied, its values) of the phase at that seed. The first phase is what a
#: verdict needs soonest: PPO and CORY at the two coefficients whose final KLs span the budgets
#: 1-3 (0.05 ends near KL 2-2.5, 0.01 near 7-10), over every seed, so that a study the CPU budget
#: stops early has intervals at matched KL; then the learning rates seed by seed (the paper's second
#: claim, which no other run bears on); then PPO and CORY at 0.1, whose runs end near KL 1, the
#: frontier's low end; then GRPO at 0.01, the coefficient that lets it drift furthest, whose trajectory
#: crosses the most budgets, so that GRPO has intervals at matched KL before its other coefficients;
#: then GRPO at 0.05, PPO and CORY at 0.3 (whose runs end under KL 1, a budget no verdict is at), and
#: GRPO at the rest. (The learning rates came after the other coefficients until the first phase
#: was nearly done, and GRPO after all of PPO's and CORY's until they had seed 0 at every
#: coefficient; no run whose place changed had been archived then.)
PHASES = (
    (("frontier", ("ppo", "cory"), "--kl-coef", KL_COEFS[:2]),),
    (("lr", ("ppo", "cory"), "--lr", LEARNING_RATES),),
    (("frontier", ("ppo", "cory"), "--kl-coef", KL_COEFS[2:3]),),
    (("frontier", ("grpo",), "--kl-coef", KL_COEFS[:1]),),
    (("frontier", ("grpo",), "--kl-coef", KL_COEFS[1:2]),),
    (("frontier", ("ppo", "cory"), "--kl-coef", KL_COEFS[3:]),),
    (("frontier", ("grpo",), "--kl-coef", KL_COEFS[2:]),),
)
STAGES = tuple(stage for phase in PHASES for stage in phase)
#: Held-out evaluation of every final model: these prompts (the test split, the same for every
#: run), this many answers to each.
EVAL_PROMPTS, EVAL_SAMPLES = 128, 2
BASE = "base"  # the archive folder of the untrained model's evaluation
EVALUATION_FILE = "evaluation.json"
ARCHIVED = ("metrics.csv", "config.json", EVALUATION_FILE)


def run_name(method: str, flag: str, value: float) -> str:
    """``cory-kl0.1``, ``ppo-lr0.0003``: the method and the one setting the run varies."""
    return f"{method}-{'kl' if flag == '--kl-coef' else 'lr'}{value:g}"


def configurations() -> dict[str, tuple[str, str, float, list[str]]]:
    """Run name -> (study, method, its value, its train_cory.py flags), in the order they run."""
    return {
        run_name(method, flag, value): (study, method, value, [*METHODS[method], flag, f"{value:g}"])
        for study, methods, flag, values in STAGES
        for value in values
        for method in methods
    }


def train_flags() -> dict[str, list[str]]:
    """Run name -> its own train_cory.py flags (reproduce.py's ``configs``)."""
    return {name: flags for name, (*_, flags) in configurations().items()}


def archived(report: Path, name: str, seed: int, iterations: int) -> bool:
    """The run is finished: its archive holds its evaluation and ``iterations`` rows of metrics."""
    folder = report / "runs" / f"{name}-seed{seed}"
    return (folder / EVALUATION_FILE).exists() and iterations_done(folder) >= iterations


def evaluate(target: list[str], out: Path, seed: int = 0) -> None:
    """``examples/evaluate.py`` on held-out prompts, into ``out`` (``target``: --checkpoint or --model)."""
    cmd = [
        sys.executable,
        str(EVALUATE_SCRIPT),
        *target,
        "--num-prompts",
        str(EVAL_PROMPTS),
        "--samples-per-prompt",
        str(EVAL_SAMPLES),
        "--seed",
        str(seed),
        "--out",
        str(out),
    ]
    with open(out.with_suffix(".log"), "w") as log:
        code = subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT)
    if code:
        tail = out.with_suffix(".log").read_text(errors="replace").replace("\r", "\n").strip().splitlines()[-20:]
        raise RuntimeError(f"evaluation failed (exit status {code}): {' '.join(cmd)}\n" + "\n".join(tail))


def first_and_last_samples(out: Path) -> list[str]:
    """The lines of ``samples.jsonl`` from the run's first and last iterations."""
    path = out / SAMPLES_FILE
    lines = [line for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
    iterations = [json.loads(line)["iteration"] for line in lines]
    ends = {min(iterations), max(iterations)} if iterations else set()
    return [line for line, i in zip(lines, iterations) if i in ends]


def archive(out: Path, folder: Path) -> None:
    """Copy what the report reads into ``folder`` (through a temporary folder, renamed at the end,
    so that a half-written archive never counts as finished), then delete the run's checkpoints."""
    partial = folder.with_name(folder.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    for file in ARCHIVED:
        shutil.copyfile(out / file, partial / file)
    (partial / SAMPLES_FILE).write_text("\n".join(first_and_last_samples(out)) + "\n")
    shutil.rmtree(folder, ignore_errors=True)
    partial.rename(folder)
    shutil.rmtree(out / "checkpoints", ignore_errors=True)


def complete(name: str, seed: int, args: argparse.Namespace, flags: list[str], label: str) -> None:
    """Train the run (or continue it), evaluate its final models alone, archive it."""
    report, root = Path(args.report), Path(args.root).expanduser()
    if archived(report, name, seed, args.iterations):
        print(f"{label} {name} seed {seed}: archived, skipped", flush=True)
        return
    reproduce.train(name, seed, args.iterations, root, flags, label, train_flags())
    out = run_dir(root, name, seed)
    if not (out / EVALUATION_FILE).exists():
        start = time.perf_counter()
        evaluate(["--checkpoint", str(out)], out / EVALUATION_FILE)
        print(f"{label} {name} seed {seed}: evaluated alone in {time.perf_counter() - start:.0f} s", flush=True)
    archive(out, report / "runs" / f"{name}-seed{seed}")


def evaluate_base(report: Path, flags: list[str]) -> None:
    """The untrained model (the runs' ``--model``) on the same held-out prompts, its KL 0: the collapse
    rule's reference for distinct-2."""
    path = report / "runs" / BASE / EVALUATION_FILE
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        model = next((flags[i + 1] for i, f in enumerate(flags[:-1]) if f == "--model"), EMBEDDED_MODEL)
        evaluate(["--model", model], path)
        path.with_suffix(".log").unlink()


# ------------------------------------------------------------------------- the rules, fixed before the runs

#: Curves are smoothed by a trailing mean over this many iterations before they are read at a KL
#: budget: one iteration's batch of 32 is noisy, in KL as in reward.
SMOOTHING = 5
#: The KL budgets the methods are compared at (and every whole budget the runs reach beyond them).
BUDGETS = (1.0, 2.0, 3.0)
#: Final values: the mean of the last FINAL_WINDOW iterations (the first ones: the start).
FINAL_WINDOW = 5
#: Collapse: a learner collapses if its held-out distinct-2 falls below this fraction of the base
#: model's, or its task reward over the last FINAL_WINDOW iterations is below that over the first
#: ones, or a logged value is not finite. A run collapses if one of its learners does.
COLLAPSE_DISTINCT = 0.5
CONFIDENCE = 0.95
RULES = f"""\
- **Reward at a KL budget.** Each run's task reward and KL per iteration (CORY: the mean of its two
  learners) are smoothed by a trailing mean over {SMOOTHING} iterations; the reward at budget B is read
  where the smoothed KL first reaches B, interpolated linearly between the two iterations around
  that point. A run whose smoothed KL never reaches B has no value there. Interpolation, not the
  best iteration at or under B: the best of many noisy iterations is biased upwards, and more so
  for the runs that spend more iterations under B (the ones with a large KL coefficient).
- **A method's frontier at B** is its best coefficient there: the one with the highest mean over
  seeds, among the coefficients where every seed reached B. The upper envelope in the figure is
  the same idea drawn over all KLs (the points no other point of the method beats in both KL and
  reward).
- **Verdict "CORY's frontier lies above PPO's" at B**: Welch's test over seeds of CORY's values
  minus PPO's, each at its best coefficient at B; supported if the {CONFIDENCE:.0%} interval lies above 0,
  not supported if it lies below 0, inconclusive otherwise (or if a method does not reach B).
  The same for GRPO against PPO.
- **Collapse** (the learning-rate runs): a learner collapses if its held-out distinct-2 is below
  {COLLAPSE_DISTINCT:g} x the base model's on the same prompts, or its mean task reward over the last
  {FINAL_WINDOW} iterations is below that over the first {FINAL_WINDOW}, or a logged loss, reward or KL is not
  finite; a run collapses if one of its learners does. **Verdict "PPO collapses where CORY
  converges" at a learning rate**: supported if PPO collapses in a majority of its seeds and CORY
  in none; not supported if PPO collapses in none or CORY in a majority; inconclusive otherwise.
- **The models alone** (held-out prompts, {EVAL_PROMPTS} prompts x {EVAL_SAMPLES} answers, the test split): per seed,
  each method's held-out task reward is interpolated linearly against its held-out KL across its
  coefficients (CORY: the mean of its two models); at each budget inside every seed's range,
  Welch's test over seeds as above.
"""


def smoothed(values: Sequence[float], window: int = SMOOTHING) -> np.ndarray:
    """The trailing mean over ``window`` values (fewer at the start).

    >>> smoothed([0.0, 2.0, 4.0, 6.0], window=2).tolist()
    [0.0, 1.0, 3.0, 5.0]
    """
    return pd.Series(values, dtype=float).rolling(window, min_periods=1).mean().to_numpy()


def at_budget(kl: Sequence[float], reward: Sequence[float], budget: float) -> float:
    """The reward where ``kl`` first reaches ``budget``, interpolated linearly; NaN if it never does.

    >>> at_budget([0.0, 1.0, 3.0], [0.1, 0.3, 0.7], 2.0)  # halfway between the 2nd and 3rd points
    0.5
    >>> at_budget([0.0, 1.0], [0.1, 0.3], 2.0)
    nan
    """
    kl, reward = np.asarray(kl, dtype=float), np.asarray(reward, dtype=float)
    reached = np.flatnonzero(kl >= budget)
    if not len(reached):
        return math.nan
    i = int(reached[0])
    if i == 0:
        return float(reward[0])
    share = (budget - kl[i - 1]) / (kl[i] - kl[i - 1])
    return float(reward[i - 1] + share * (reward[i] - reward[i - 1]))


def envelope(kl: Sequence[float], reward: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    """The upper envelope (Pareto front) of the points: those that no other point beats with a
    KL at most theirs and a higher reward, sorted by KL.

    >>> [a.tolist() for a in envelope([1, 2, 3, 4], [0.2, 0.1, 0.5, 0.4])]
    [[1.0, 3.0], [0.2, 0.5]]
    """
    kl, reward = np.asarray(kl, dtype=float), np.asarray(reward, dtype=float)
    keep = np.isfinite(kl) & np.isfinite(reward)
    order = np.lexsort((-reward[keep], kl[keep]))  # by KL, the higher reward first among equal KLs
    xs, ys, best = [], [], -math.inf
    for x, y in zip(kl[keep][order], reward[keep][order]):
        if y > best:
            xs.append(x), ys.append(y)
            best = y
    return np.array(xs), np.array(ys)


def interpolate_across(kl: Sequence[float], reward: Sequence[float], budget: float) -> float:
    """``reward`` at ``budget`` along the points sorted by KL (linear); NaN outside their range.

    >>> interpolate_across([2.0, 0.5, 1.0], [0.6, 0.2, 0.4], 1.5)
    0.5
    >>> interpolate_across([0.5, 1.0], [0.2, 0.4], 1.5)
    nan
    """
    kl, reward = np.asarray(kl, dtype=float), np.asarray(reward, dtype=float)
    order = np.argsort(kl)
    kl, reward = kl[order], reward[order]
    if not len(kl) or budget < kl[0] or budget > kl[-1]:
        return math.nan
    return float(np.interp(budget, kl, reward))


def collapsed(
    reward: Sequence[float], finite: bool, distinct_2: float, base_distinct_2: float, window: int = FINAL_WINDOW
) -> list[str]:
    """The collapse criteria one learner meets (empty: it did not collapse).

    >>> collapsed([0.2] * 5 + [0.1] * 5, True, 0.9, 0.9)
    ['task reward fell (last 5: 0.100 < first 5: 0.200)']
    >>> collapsed([0.1] * 10, True, 0.3, 0.9)
    ["distinct-2 0.300 < 0.5 x the base model's 0.900"]
    >>> collapsed([0.1, 0.2], False, 0.9, 0.9)
    ['a logged value is not finite']
    """
    reasons = []
    if not finite:
        reasons.append("a logged value is not finite")
    first, last = float(np.mean(reward[:window])), float(np.mean(reward[-window:]))
    if last < first:
        reasons.append(f"task reward fell (last {window}: {last:.3f} < first {window}: {first:.3f})")
    if distinct_2 < COLLAPSE_DISTINCT * base_distinct_2:
        reasons.append(f"distinct-2 {distinct_2:.3f} < {COLLAPSE_DISTINCT:g} x the base model's {base_distinct_2:.3f}")
    return reasons


def collapse_verdict(ppo: Sequence[bool], cory: Sequence[bool]) -> str:
    """ "PPO collapses where CORY converges", from each seed's collapse.

    >>> collapse_verdict([True, True, False], [False, False, False])
    'supported'
    >>> collapse_verdict([False, False, False], [False, False, False])
    'not supported'
    >>> collapse_verdict([True, True, True], [True, False, False])
    'inconclusive'
    """
    if not ppo or not cory:
        return INCONCLUSIVE
    if not any(ppo) or sum(cory) > len(cory) / 2:
        return NOT_SUPPORTED
    return SUPPORTED if sum(ppo) > len(ppo) / 2 and not any(cory) else INCONCLUSIVE


def frontier_verdict(test: dict[str, float]) -> str:
    """Above (supported), below (not supported) or undecided, from a Welch test's interval."""
    return {True: SUPPORTED, False: NOT_SUPPORTED, None: INCONCLUSIVE}[side(test)]


# ------------------------------------------------------------------------- the report


@dataclass
class Run:
    """One archived run: what it varied, its curves and its models' held-out evaluation."""

    name: str
    study: str
    method: str
    value: float
    seed: int
    folder: Path  # its archive
    metrics: pd.DataFrame
    evaluation: dict  # learner -> its held-out summary

    def curve(self, metric: str) -> np.ndarray:
        """``metric`` per iteration, the mean over the run's learners (CORY's two)."""
        return reproduce.curve(self.metrics, metric).to_numpy()

    def final(self, metric: str) -> float:
        return float(np.mean(self.curve(metric)[-FINAL_WINDOW:]))

    def held_out(self, key: str) -> float:
        """The held-out ``key`` of the run's models, the mean over its learners."""
        return float(np.mean([summary[key] for summary in self.evaluation.values()]))

    def finite(self, learner: str) -> bool:
        columns = [f"{learner}/{m}" for m in ("task_reward_mean", "kl", "policy_loss", "value_loss")]
        values = self.metrics[[c for c in columns if c in self.metrics]].to_numpy(dtype=float)
        return bool(np.isfinite(values).all())

    def collapse(self, base_distinct_2: float) -> dict[str, list[str]]:
        """Each learner's collapse criteria met (:func:`collapsed`)."""
        return {
            learner: collapsed(
                reproduce.curve(
                    self.metrics[["iteration", f"{learner}/task_reward_mean"]], "task_reward_mean"
                ).to_numpy(),
                self.finite(learner),
                summary["distinct_2"],
                base_distinct_2,
            )
            for learner, summary in self.evaluation.items()
        }


def load_runs(report: Path, iterations: int) -> list[Run]:
    """Every finished run archived in ``report/runs`` that this study defines."""
    known = configurations()
    runs = []
    for folder in sorted((report / "runs").glob("*-seed*")):
        name, _, seed = folder.name.rpartition("-seed")
        if name not in known or folder.suffix == ".partial" or not archived(report, name, int(seed), iterations):
            continue
        study, method, value, _ = known[name]
        evaluation = json.loads((folder / EVALUATION_FILE).read_text())["learners"]
        runs.append(Run(name, study, method, value, int(seed), folder, read_metrics(folder), evaluation))
    return runs


def stats(values: Sequence[float]) -> str:
    """``0.412 [0.301, 0.523] (3)``: the mean, its 95% t-interval and the number of values."""
    values = [v for v in values if math.isfinite(v)]
    if not values:
        return "n/a"
    s = over_seeds(values)
    return f"{num(s['mean'])} [{num(s['low'])}, {num(s['high'])}] ({len(values)})"


def group(runs: Sequence[Run], study: str) -> dict[tuple[str, float], list[Run]]:
    """(method, value) -> its runs (one per seed), method by method (as in METHODS), values ascending."""
    groups: dict[tuple[str, float], list[Run]] = {}
    settings = sorted((method, value) for s, method, value, _ in configurations().values() if s == study)
    for method, value in sorted(settings, key=lambda setting: list(METHODS).index(setting[0])):
        if chosen := [r for r in runs if r.study == study and r.method == method and r.value == value]:
            groups[(method, value)] = sorted(chosen, key=lambda r: r.seed)
    return groups


def budgets(runs: Sequence[Run]) -> list[float]:
    """BUDGETS, and every whole budget beyond them that a run's smoothed KL reaches."""
    reach = max((float(np.max(smoothed(r.curve("kl")))) for r in runs), default=0.0)
    return sorted({*BUDGETS, *(float(b) for b in range(int(max(BUDGETS)) + 1, int(reach) + 1))})


def reward_at(run: Run, budget: float) -> float:
    return at_budget(smoothed(run.curve("kl")), smoothed(run.curve("task_reward_mean")), budget)


def best_at(groups: dict[tuple[str, float], list[Run]], method: str, budget: float) -> tuple[float, list[float]]:
    """The method's best coefficient at ``budget`` (every seed reached it; highest mean) and its seeds' rewards."""
    best, values = math.nan, []
    for (m, value), runs in groups.items():
        rewards = [reward_at(r, budget) for r in runs]
        if m == method and len(rewards) > 1 and all(map(math.isfinite, rewards)):
            if not values or np.mean(rewards) > np.mean(values):
                best, values = value, rewards
    return best, values


def frontier_tests(groups: dict[tuple[str, float], list[Run]]) -> dict[float, dict[str, tuple[dict, str, dict]]]:
    """Budget -> {"cory", "grpo"} -> (Welch test against PPO at each one's best coefficient, verdict,
    method -> its best coefficient (NaN: none had 2 or more seeds at the budget))."""
    tests: dict[float, dict[str, tuple[dict, str, dict]]] = {}
    for budget in budgets([r for rs in groups.values() for r in rs]):
        best = {m: best_at(groups, m, budget) for m in METHODS}
        for other in ("cory", "grpo"):
            test = welch_test(best[other][1], best["ppo"][1], CONFIDENCE)
            verdict = frontier_verdict(test) if best[other][1] and best["ppo"][1] else INCONCLUSIVE
            tests.setdefault(budget, {})[other] = (test, verdict, {m: best[m][0] for m in (other, "ppo")})
    return tests


def frontier_section(runs: Sequence[Run], figure: Path) -> list[str]:
    """The comparison at matched drift: a table per budget, the verdicts, the figure."""
    groups = group(runs, "frontier")
    if not groups:
        return ["No finished frontier run yet."]
    plot_frontier(groups, figure)
    rows = []
    # (comparison, what it says, its budget; None: a budget no verdict could be reached at) -> its budgets
    verdicts: dict[tuple[str, str, float | None], list[float]] = {}
    for budget, by_method in frontier_tests(groups).items():
        for other, (test, verdict, best) in by_method.items():
            head = f"**{other.upper()} above PPO: {verdict}**"
            if missing := [m for m, value in best.items() if math.isnan(value)]:
                said = f"{head}: no coefficient of {' and '.join(missing)} has 2 or more seeds that reached it yet"
            else:
                coefs = ", ".join(f"{m} at {value:g}" for m, value in best.items())
                said = f"{head}, {other} - ppo = {difference(test)} (best coefficients: {coefs})"
            verdicts.setdefault((other, said, None if missing else budget), []).append(budget)
        for method in dict.fromkeys(m for m, _ in groups):
            rows.append(
                [
                    f"{budget:g}",
                    method,
                    *(
                        stats([reward_at(r, budget) for r in groups[(method, value)]])
                        if (method, value) in groups
                        else "-"
                        for value in KL_COEFS
                    ),
                ]
            )
    finals = [
        [method, f"{value:g}", stats([r.final("task_reward_mean") for r in rs]), stats([r.final("kl") for r in rs])]
        for (method, value), rs in groups.items()
    ]
    return [
        f"![task reward against KL: every method and coefficient, mean over seeds]({figure.name})",
        "",
        "### Verdicts at matched KL",
        "",
        *(
            f"- KL {', '.join(f'{b:g}' for b in at)}: {said}"
            for (_, said, _), at in sorted(verdicts.items(), key=lambda item: (item[0][0], item[1][0]))
        ),
        "",
        f"### Task reward at each KL budget, by KL coefficient (mean [{CONFIDENCE:.0%} interval] (seeds that reached "
        "it); n/a: no seed reached it)",
        "",
        table(["KL budget", "method", *(f"KL coefficient {v:g}" for v in KL_COEFS)], rows),
        "",
        f"### Final values (the mean of the last {FINAL_WINDOW} iterations)",
        "",
        table(["method", "KL coefficient", "task reward", "KL"], finals),
    ]


def lr_verdicts(groups: dict[tuple[str, float], list[Run]], base_distinct_2: float) -> dict[float, tuple[str, dict]]:
    """Learning rate -> (the verdict of :func:`collapse_verdict`, method -> each seed's collapse)."""
    verdicts = {}
    for value in LEARNING_RATES:
        fell = {
            m: [any(r.collapse(base_distinct_2).values()) for r in groups.get((m, value), [])] for m in ("ppo", "cory")
        }
        verdicts[value] = (collapse_verdict(fell["ppo"], fell["cory"]), fell)
    return verdicts


def lr_section(runs: Sequence[Run], base_distinct_2: float, figure: Path) -> list[str]:
    """The learning-rate runs: collapse per run, the verdict per learning rate, curves and samples."""
    groups = group(runs, "lr")
    if not groups:
        return ["No finished learning-rate run yet."]
    plot_comparison(
        {f"{m} lr {v:g}": [r.folder for r in rs] for (m, v), rs in groups.items()},
        figure,
        metrics=["task_reward_mean", "kl"],
    )
    rows, lines = [], []
    for (method, value), seed_runs in groups.items():
        for r in seed_runs:
            reasons = {k: v for k, v in r.collapse(base_distinct_2).items() if v}
            said = "; ".join(f"{k}: {', '.join(v)}" for k, v in reasons.items()) or "no"
            rows.append(
                [
                    method,
                    f"{value:g}",
                    str(r.seed),
                    num(r.final("task_reward_mean")),
                    num(r.final("kl")),
                    num(r.held_out("distinct_2")),
                    said,
                ]
            )
    for value, (verdict, fell) in lr_verdicts(groups, base_distinct_2).items():
        lines.append(
            f"- lr {value:g}: **{verdict}**; collapsed: PPO {sum(fell['ppo'])} of {len(fell['ppo'])} seeds, "
            f"CORY {sum(fell['cory'])} of {len(fell['cory'])}"
        )
    samples = []
    for (method, value), seed_runs in groups.items():
        _, chosen = reproduce.last_samples(seed_runs[0].folder)
        samples += [
            "",
            f"{method} lr {value:g}, seed {seed_runs[0].seed}, last iteration:",
            "",
            "```text",
            *map(reproduce.sample_line, chosen),
            "```",
        ]
    return [
        "### Verdicts",
        "",
        *lines,
        "",
        f"![task reward and KL at large learning rates: mean ± std over seeds]({figure.name})",
        "",
        table(["method", "lr", "seed", "final task reward", "final KL", "held-out distinct-2", "collapsed"], rows),
        "",
        f"The base model's held-out distinct-2: {num(base_distinct_2)}.",
        *samples,
    ]


def held_out_at(groups: dict[tuple[str, float], list[Run]], method: str, budget: float) -> list[float]:
    """Per seed, the method's held-out task reward at held-out KL ``budget``, interpolated across its
    coefficients (:func:`interpolate_across`); the seeds whose range holds the budget."""
    values = []
    for seed in sorted({r.seed for (m, _), rs in groups.items() if m == method for r in rs}):
        models = [r for (m, _), rs in groups.items() if m == method for r in rs if r.seed == seed]
        value = interpolate_across(
            [r.held_out("kl") for r in models], [r.held_out("task_reward_mean") for r in models], budget
        )
        if math.isfinite(value):
            values.append(value)
    return values


def alone_tests(groups: dict[tuple[str, float], list[Run]]) -> dict[float, dict[str, tuple[dict, list, list]]]:
    """Budget -> {"cory", "grpo"} -> (Welch test against PPO of the held-out reward at that held-out KL,
    the method's values, PPO's)."""
    tests: dict[float, dict[str, tuple[dict, list, list]]] = {}
    for budget in BUDGETS:
        per_method = {m: held_out_at(groups, m, budget) for m in METHODS}
        for other in ("cory", "grpo"):
            test = welch_test(per_method[other], per_method["ppo"], CONFIDENCE)
            tests.setdefault(budget, {})[other] = (test, per_method[other], per_method["ppo"])
    return tests


def alone_section(runs: Sequence[Run], base: dict) -> list[str]:
    """Every final model answering held-out prompts alone, and the comparison at the same held-out KL."""
    rows = [["base model", "-", "1", num(base["task_reward_mean"]), num(0.0), num(base["distinct_2"])]]
    for study in ("frontier", "lr"):
        for (method, value), rs in group(runs, study).items():
            knob = "KL coefficient" if study == "frontier" else "lr"
            rows.append(
                [
                    method,
                    f"{knob} {value:g}",
                    str(len(rs)),
                    stats([r.held_out("task_reward_mean") for r in rs]),
                    stats([r.held_out("kl") for r in rs]),
                    stats([r.held_out("distinct_2") for r in rs]),
                ]
            )
    matched = []
    for budget, by_method in alone_tests(group(runs, "frontier")).items():
        for other, (test, values, ppo) in by_method.items():
            better = {True: other, False: "ppo", None: "undecided"}[side(test)]
            matched.append([f"{budget:g}", f"{other} - ppo", stats(values), stats(ppo), difference(test), better])
    return [
        table(["method", "setting", "seeds", "task reward", "KL to the reference", "distinct-2"], rows),
        "",
        "Which method gives the better model at the same held-out KL (each seed's held-out reward "
        "interpolated across its coefficients; a seed outside a budget's range is left out):",
        "",
        table(
            ["held-out KL", "comparison", "task reward (method)", "task reward (ppo)", "difference", "better model"],
            matched,
        ),
    ]


COLORS = {"ppo": "tab:blue", "cory": "tab:red", "grpo": "tab:green"}


def mean_curve(runs: Sequence[Run]) -> tuple[np.ndarray, np.ndarray]:
    """The smoothed KL and task reward per iteration, the mean over the runs (seeds) that reached it."""
    kl = pd.concat([pd.Series(smoothed(r.curve("kl"))) for r in runs], axis=1).mean(axis=1)
    reward = pd.concat([pd.Series(smoothed(r.curve("task_reward_mean"))) for r in runs], axis=1).mean(axis=1)
    return kl.to_numpy(), reward.to_numpy()


def plot_frontier(groups: dict[tuple[str, float], list[Run]], path: Path) -> Path:
    """Task reward against KL: a line per method and coefficient (mean over seeds, smoothed), the
    final points with their 95% intervals over seeds, and each method's upper envelope; on the left
    every KL the runs reach, on the right the same zoomed in on the KL budgets of the verdicts."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(13, 5.5))
    whole, budgets_ax = fig.subplots(1, 2, gridspec_kw={"width_ratios": (3, 2)})
    values = sorted({v for _, v in groups})
    curves = {key: mean_curve(runs) for key, runs in groups.items()}
    zoom = max(BUDGETS) + 1
    for ax in (whole, budgets_ax):
        points: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
        for (method, value), runs in groups.items():
            kl, reward = curves[(method, value)]
            shade = 0.35 + 0.65 * values.index(value) / max(1, len(values) - 1)
            ax.plot(
                kl,
                reward,
                color=COLORS[method],
                alpha=shade,
                linewidth=1.3,
                label=f"{method}, KL coefficient {value:g}",
            )
            finals = [(r.final("kl"), r.final("task_reward_mean")) for r in runs]
            (x, x_low, x_high), (y, y_low, y_high) = (mean_ci([f[i] for f in finals], CONFIDENCE) for i in (0, 1))
            bars = {} if len(runs) < 2 else {"xerr": [[x - x_low], [x_high - x]], "yerr": [[y - y_low], [y_high - y]]}
            ax.errorbar([x], [y], fmt="o", color=COLORS[method], alpha=shade, capsize=3, **bars)
            ax.annotate(
                f"{value:g}", (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7, color=COLORS[method]
            )
            points.setdefault(method, []).append((kl, reward))
        for method, lines in points.items():
            front_kl, front_reward = envelope(
                np.concatenate([c[0] for c in lines]), np.concatenate([c[1] for c in lines])
            )
            ax.plot(
                front_kl,
                front_reward,
                color=COLORS[method],
                linewidth=6,
                alpha=0.25,
                drawstyle="steps-post",
                label=f"{method} frontier (upper envelope)",
            )
        ax.set(xlabel="KL to the reference (summed over the response)", ylabel="task reward")
        ax.grid(alpha=0.3)
    whole.set_title(
        f"Task reward against KL, smoothed over {SMOOTHING} iterations, mean over seeds;\n"
        f"dots: final values (last {FINAL_WINDOW} iterations) with 95% intervals, labelled by KL coefficient",
        fontsize=9,
    )
    whole.legend(fontsize=7, loc="lower right", ncol=2)
    inside = [r for kl, reward in curves.values() for k, r in zip(kl, reward) if k <= zoom and math.isfinite(r)]
    budgets_ax.set_xlim(0, zoom)
    if inside:
        margin = 0.05 * (max(inside) - min(inside) or 1.0)
        budgets_ax.set_ylim(min(inside) - margin, max(inside) + margin)
    for budget in BUDGETS:
        budgets_ax.axvline(budget, color="gray", linestyle="--", linewidth=0.8)
    budgets_ax.set_title(f"The same up to KL {zoom:g}; dashed: the KL budgets of the verdicts", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return path


def run_order(studies: set[str], seeds: Sequence[int]) -> list[tuple[str, int]]:
    """(run name, seed) of every run of ``studies`` at ``seeds``, in the order they go (PHASES)."""
    return [
        (run_name(method, flag, value), seed)
        for phase in PHASES
        for seed in seeds
        for study, methods, flag, values in phase
        if study in studies
        for value in values
        for method in methods
    ]


def status(runs: Sequence[Run], seeds: Sequence[int], studies: set[str]) -> list[list[str]]:
    """Every run the study defines for ``seeds``: archived or still to run."""
    done = {(r.name, r.seed) for r in runs}
    return [
        [name, str(seed), "archived" if (name, seed) in done else "not run yet"]
        for name, seed in run_order(studies, seeds)
    ]


#: The study's budget on the 2-core development machine (issue 26), in hours of one heavy job at a time.
BUDGET_HOURS = 6.0
#: What a run costs beyond its iterations on that machine, in minutes: loading the models, writing
#: checkpoints and the held-out evaluation (from the study's log: PPO about 70 s and 22 s, CORY 135 s
#: and 38 s, GRPO 75 s and 21 s).
RUN_OVERHEAD_MINUTES = {"ppo": 1.5, "cory": 3.0, "grpo": 1.6}


def study_hours(runs: Sequence[Run]) -> tuple[float, float]:
    """(the archived runs' iterations' wall time, the study's own cost), in hours.

    Other work on the machine lengthens the wall time (one iteration took 34 minutes, against a
    median of 11 s), so the cost counts every iteration at its method's median iteration time over
    the study (a method's iterations do the same work: the same batch, the same answer lengths),
    and adds each run's :data:`RUN_OVERHEAD_MINUTES`."""
    wall = sum(float(run.metrics["seconds"].sum()) for run in runs if "seconds" in run.metrics)
    cost = 0.0
    for method in {run.method for run in runs}:
        mine = [run for run in runs if run.method == method and "seconds" in run.metrics]
        if mine:
            median = float(np.median(np.concatenate([run.metrics["seconds"].to_numpy(float) for run in mine])))
            cost += sum(median * len(run.metrics) + 60 * RUN_OVERHEAD_MINUTES[method] for run in mine)
    return wall / 3600, cost / 3600


def budget_note(runs: Sequence[Run], missing: Sequence[list[str]], budget: float = BUDGET_HOURS) -> str:
    """What the archived runs cost (:func:`study_hours`) against ``budget`` (0: none), and what that
    leaves unrun: cut when it is spent."""
    wall, cost = study_hours(runs)
    text = (
        (f"Budget: {budget:g} CPU-hours" if budget else "No budget")
        + " on a 2-core CPU for the whole study, one heavy job at a time. The "
        f"archived runs cost {cost:.1f} h: each iteration at its method's median iteration time over the study, "
        "plus each run's start, checkpoints and held-out evaluation (about 1.5 minutes a PPO or GRPO run, 3 a CORY "
        f"run). Their iterations' wall time is {wall:.1f} h, longer because other work shared the machine during "
        "some runs. The whole plan is about 7 h on that machine when nothing else runs (a PPO or GRPO run about 5-6 minutes, "
        "CORY 14), so it runs in the order of PHASES: PPO and CORY at KL coefficients 0.01 and 0.05 "
        "over every seed first, whose trajectories cross the KL budgets 1-3, then the learning rates, then PPO and "
        "CORY at 0.1, then GRPO at 0.01 and 0.05, then PPO and CORY at 0.3, then GRPO at 0.1 and 0.3."
    )
    if missing and budget and cost >= budget:
        return text + f" The budget is spent: the runs not archived below ({len(missing)}) are cut."
    return text + (" What the budget does not reach is cut, and listed below as not run yet." if missing else "")


def write_report(
    report: Path,
    iterations: int,
    seeds: Sequence[int],
    studies: set[str],
    page: Path | None = None,
    budget: float = BUDGET_HOURS,
) -> Path:
    """results.md, frontier.png and lr_curves.png in ``report``, from its archived runs; with ``page``
    (docs/reproduction.md), the claims table and the report there too (:func:`update_page`)."""
    runs = load_runs(report, iterations)
    base = json.loads((report / "runs" / BASE / EVALUATION_FILE).read_text())["learners"]["pioneer"]
    missing = [row for row in status(runs, seeds, studies) if row[2] != "archived"]
    lines = [
        f"Written by `python studies/frontier.py` from the archived runs in runs/ ({len(runs)} finished, "
        f"{iterations} iterations each, at the training defaults of examples/train_cory.py otherwise). CORY counts as "
        "the mean of its two learners. Intervals are 95% t-intervals over seeds.",
        "",
        "## Rules (fixed before the runs)",
        "",
        RULES,
        "## The frontier",
        "",
        *frontier_section(runs, report / "frontier.png"),
        "",
        "## Learning-rate robustness",
        "",
        *lr_section(runs, base["distinct_2"], report / "lr_curves.png"),
        "",
        "## The trained models judged alone",
        "",
        f"Every final model answers {EVAL_PROMPTS} held-out prompts (the test split) {EVAL_SAMPLES} times alone, as the "
        "pioneer (`examples/evaluate.py --checkpoint`): CORY's observer without the pioneer's answer. Cells: mean "
        "[95% interval] (seeds); CORY: the mean of its two models.",
        "",
        *alone_section(runs, base),
        "",
        "## Runs",
        "",
        f"{len(missing)} of {len(missing) + len(runs)} runs are not archived yet: the verdicts that need them say "
        "inconclusive until `python studies/frontier.py` has run them."
        if missing
        else "Every run is archived.",
        "",
        budget_note(runs, missing, budget),
        "",
        table(["run", "seed", "state"], status(runs, seeds, studies)),
        "",
    ]
    path = report / "results.md"
    title = "# KL-reward frontiers, the learning-rate claim and the models alone"
    path.write_text("\n".join([title, "", *lines]), encoding="utf-8")
    if page is not None:
        update_page(page, claims_table(runs, base["distinct_2"], reproduction_verdicts()), lines, report)
    return path


# ------------------------------------------------------------------------- docs/reproduction.md

PAGE = REPO / "docs" / "reproduction.md"
REPRODUCTION_RUNS = REPO / "docs" / "reproduction" / "runs"  # studies/reproduce.py's tracked runs
CLAIMS_MARKERS = ("<!-- claims: written by studies/frontier.py -->", "<!-- /claims -->")
REPORT_MARKERS = ("<!-- frontier: written by studies/frontier.py -->", "<!-- /frontier -->")
#: claim -> (the paper's claim, its evidence in the paper)
PAPER = {
    "frontier": (
        "At the same KL, CORY reaches a higher task reward than PPO (a better KL-reward frontier)",
        "IMDB, GPT2-Large, 100 iterations, 3 seeds, one KL coefficient (0.3): similar final task "
        "reward, PPO's KL more than twice CORY's",
    ),
    "lr": (
        "PPO collapses at a large learning rate where CORY converges",
        "GSM8K, Llama-2-7b-chat 4-bit: at lr 1e-4 PPO collapses, CORY converges at 1e-4 and 1e-5",
    ),
    "alone": ("Either CORY model can answer alone at test time", "the method's design; no IMDB test-time figure"),
    "(a)": ("PPO's KL more than twice CORY's at a similar task reward", "IMDB curves, 3 seeds"),
    "(b)": ("PPO's combined reward falls while CORY's rises", "IMDB curves, 3 seeds"),
    "(c)": ("Each ablation (no knowledge transfer, no role exchange) raises the KL", "IMDB ablation curves"),
}


def reproduction_verdicts(folder: Path = REPRODUCTION_RUNS) -> dict[str, tuple[str, str]]:
    """reproduce.py's claims (a)-(c), judged by its own rules from its tracked runs."""
    seeds = sorted({int(p.name.rpartition("-seed")[2]) for p in folder.glob("*-seed*")})
    runs = {
        c: [reproduce.summarise(folder, c, s, FINAL_WINDOW, folder / f"{c}-seed{s}") for s in seeds]
        for c in reproduce.PAPER_CONFIGS
    }
    iterations = max((r.iterations for rs in runs.values() for r in rs), default=0)
    study = reproduce.Study(runs, iterations, FINAL_WINDOW)
    return {name: judge(study) for name, (_, _, judge) in reproduce.CLAIMS.items()}


def measured(test: dict[str, float]) -> str:
    """:func:`~studies.reproduce.difference`, or "not run yet" where there is nothing to compare."""
    return difference(test) if math.isfinite(test["difference"]) else "not run yet"


def claims_table(runs: Sequence[Run], base_distinct_2: float, reproduction: dict[str, tuple[str, str]]) -> list[str]:
    """The table docs/reproduction.md opens with: claim | the paper's evidence | ours | verdict."""
    rows = []
    frontier = frontier_tests(group(runs, "frontier"))
    compared = {b: t["cory"] for b, t in frontier.items() if math.isfinite(t["cory"][0]["difference"])}
    ours = "; ".join(f"KL {b:g}: {difference(test)}" for b, (test, _, _) in compared.items())
    said = "; ".join(f"KL {b:g}: {verdict}" for b, (_, verdict, _) in compared.items())
    if beyond := [b for b in frontier if b not in compared]:  # budgets fewer than 2 seeds of a method reached
        kls = ", ".join(f"{b:g}" for b in beyond)
        ours += f"; KL {kls}: fewer than 2 seeds of a method reached it"
        said += f"; KL {kls}: {INCONCLUSIVE}"
    ours, said = ours.strip("; ") or "not run yet", said.strip("; ") or INCONCLUSIVE
    rows.append([*PAPER["frontier"], f"CORY - PPO task reward at matched KL: {ours}", said])
    lr = lr_verdicts(group(runs, "lr"), base_distinct_2)
    ours = "; ".join(
        f"lr {v:g}: PPO {sum(f['ppo'])}/{len(f['ppo'])}, CORY {sum(f['cory'])}/{len(f['cory'])} seeds"
        for v, (_, f) in lr.items()
    )
    rows.append(
        [*PAPER["lr"], f"collapsed runs: {ours}", "; ".join(f"lr {v:g}: {verdict}" for v, (verdict, _) in lr.items())]
    )
    alone = alone_tests(group(runs, "frontier"))
    ours = "; ".join(f"KL {b:g}: {measured(t['cory'][0])}" for b, t in alone.items())
    better = "; ".join(
        f"KL {b:g}: {({True: 'CORY', False: 'PPO', None: 'undecided'})[side(t['cory'][0])]}" for b, t in alone.items()
    )
    rows.append(
        [
            *PAPER["alone"],
            f"CORY - PPO held-out task reward of the model alone, at matched held-out KL: {ours}",
            f"the better model: {better}",
        ]
    )
    for name, (verdict, text) in reproduction.items():
        rows.append([*PAPER[name], f"{text.split('. Rule:')[0]} (KL coefficient 0.05)", verdict])
    return [
        table(
            ["paper's claim", "the paper's evidence", "ours at laptop scale (95% intervals over seeds)", "verdict"],
            rows,
        )
    ]


def update_page(page: Path, claims: list[str], body: list[str], report: Path) -> None:
    """Write ``claims`` and ``body`` (the report, its headings one level down) between their markers in ``page``."""
    folder = os.path.relpath(report, page.parent)
    body = [
        line.replace("](frontier.png)", f"]({folder}/frontier.png)").replace(
            "](lr_curves.png)", f"]({folder}/lr_curves.png)"
        )
        for line in body
    ]
    body = ["#" + line if line.startswith("#") else line for line in body]
    sections = {
        markers: "\n".join(lines).strip("\n") for markers, lines in ((CLAIMS_MARKERS, claims), (REPORT_MARKERS, body))
    }
    try:
        write_sections(page, sections)
    except ValueError as missing:
        raise SystemExit(str(missing)) from None


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False
    )
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated seeds")
    parser.add_argument("--iterations", type=int, default=60, help="iterations per run (the paper: 100)")
    parser.add_argument("--studies", default="frontier,lr", help="which studies to run: frontier, lr or both")
    parser.add_argument(
        "--root",
        default=str(Path.home() / ".cache" / "cory_env" / "frontier"),
        help="where the runs train (outside the work tree; their checkpoints go once archived)",
    )
    parser.add_argument(
        "--report", default=str(DEFAULT_REPORT), help="folder of the archived runs (runs/), the report and its figures"
    )
    parser.add_argument(
        "--page",
        default="",
        help="the page that gets the claims table and the report between "
        "its markers (default: docs/reproduction.md with the default --report, else none)",
    )
    parser.add_argument("--report-only", action="store_true", help="train nothing: the report from the archive")
    parser.add_argument(
        "--budget-hours",
        type=float,
        default=BUDGET_HOURS,
        help="start no run once the archived runs cost this many hours by the report's count (0: no limit)",
    )
    parser.add_argument("--list", action="store_true", help="print every run's flags, then exit")
    args, flags = parser.parse_known_args(argv)
    if taken := [f for f in flags if f.split("=")[0] in (*reproduce.PER_RUN, "--kl-coef", "--lr", "--learner")]:
        parser.error(f"{' '.join(taken)}: the study sets these itself")
    seeds = [int(s) for s in args.seeds.split(",")]
    studies = {s.strip() for s in args.studies.split(",") if s.strip()}
    if unknown := studies - {stage[0] for stage in STAGES}:
        parser.error(f"unknown studies {', '.join(sorted(unknown))}: choose frontier, lr or both")
    runs = run_order(studies, seeds)
    if args.list:
        root = Path(args.root).expanduser()
        for name in dict.fromkeys(name for name, _ in runs):
            print(
                f"{name}: {' '.join(reproduce.command(name, seeds[0], args.iterations, root, flags, train_flags())[1:])}"
            )
        return
    if not args.report_only:
        check_flags(Path(args.root).expanduser(), flags)
        evaluate_base(Path(args.report), flags)
        start = time.perf_counter()
        try:
            for i, (name, seed) in enumerate(runs, 1):
                if args.budget_hours and not archived(Path(args.report), name, seed, args.iterations):
                    cost = study_hours(load_runs(Path(args.report), args.iterations))[1]
                    if cost >= args.budget_hours:
                        print(
                            f"the budget is spent: the archived runs cost {cost:.1f} h of {args.budget_hours:g}; "
                            f"{len(runs) - i + 1} runs from {name} seed {seed} on are not run "
                            "(--budget-hours to raise it, 0 for no limit)",
                            flush=True,
                        )
                        break
                complete(name, seed, args, flags, f"[{i}/{len(runs)}]")
            else:
                print(f"all {len(runs)} runs done ({time.perf_counter() - start:.0f} s)", flush=True)
        except Stopped as stop:
            print(f"stopped after a checkpoint: run the same command to continue ({args.root})", flush=True)
            sys.exit(stop.code)
    page = Path(args.page) if args.page else PAGE if Path(args.report) == DEFAULT_REPORT else None
    print(f"report: {write_report(Path(args.report), args.iterations, seeds, studies, page, args.budget_hours)}")


if __name__ == "__main__":
    main()
