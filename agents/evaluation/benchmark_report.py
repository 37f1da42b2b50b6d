"""What ``cory-bench`` reports: the final metrics over seeds, the tests against PPO, the curves.

:func:`write_report` reads the runs of a benchmark folder (each run's metrics.csv and
evaluation.json) and writes ``report.json``, ``report.md`` (:func:`format_report`) and the
plots; :mod:`cory_agents.evaluation.reward_benchmark` runs the benchmark and calls it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from cory_agents.evaluation.plan import format_decisions, plan
from cory_agents.evaluation.report import MEAN_OF_LEARNERS, fmt, markdown_table, write_json, write_text
from cory_agents.evaluation.rl_statistics import aligned_window
from cory_agents.evaluation.statistics import mean_ci, reward_rise, welch_test
from cory_agents.training.metrics import read_metrics
from cory_agents.training.plots import learner_columns, plot_comparison, plot_kl_vs_reward
from cory_agents.training.provenance import run_commits
from cory_env.tasks import get_task

if TYPE_CHECKING:
    from cory_agents.evaluation.benchmark_config import BenchmarkConfig
    from cory_agents.training.config import TrainConfig

#: Training metrics (the last iterations, metrics.csv) and evaluation metrics in the report. The collective
#: reward (the learners' task rewards summed: the team's score, in the signalling game its success rate) is a
#: team's, on its mean-of-learners row (a run of one learner has none).
TRAIN_METRICS = {
    "task_reward_mean": "task reward",
    "kl": "KL",
    "combined_reward": "combined reward",
    "collective_reward": "collective reward",
}
EVAL_METRICS = {
    "task_reward_mean": "task reward",
    "kl": "KL",
    "combined_reward": "combined reward",
    "distinct_1": "distinct-1",
    "distinct_2": "distinct-2",
    "repetition_rate": "repetition",
}
PLOTS = {"task_reward_mean": "task_reward.png", "kl": "kl.png", "combined_reward": "combined_reward.png"}
KL_VS_REWARD_PLOT = "kl_vs_reward.png"
#: Metrics reported with the t-interval of their mean and tested against the baseline (Welch).
COMPARED_METRICS = ("task_reward_mean", "kl", "combined_reward", "collective_reward")
CONFIDENCE = 0.95
REWARD_RISE_K = 3  # reward rise: the last k iterations against the first k (k = iterations // 2 if fewer)


def run_dir(out: str | Path, algo: str, seed: int) -> Path:
    """The folder of an ``--algos`` entry's run: ``cory/seed0``, ``cory-happo/seed0`` for ``cory:happo``."""
    return Path(out) / algo.replace(":", "-") / f"seed{seed}"


def final_training_metrics(df: pd.DataFrame, window: int = 1) -> dict[str, dict[str, float]]:
    """learner -> metric -> its mean over the run's last ``window`` iterations (1: the last iteration; ``df``: its
    metrics.csv). ``collective_reward``: NaN per learner (the run's is on its mean row, :func:`with_mean_of_learners`)."""
    curves = df.groupby("iteration").last().sort_index().tail(window)  # a re-logged iteration counts once
    learners = learner_columns(df, "kl")
    return {
        name: {m: float(curves[f"{name}/{m}"].mean()) if m != "collective_reward" else np.nan for m in TRAIN_METRICS}
        for name in learners
    }


def with_mean_of_learners(per_learner: dict[str, dict[str, float]], metrics: Any) -> dict[str, dict[str, float]]:
    """``per_learner`` and, for several learners, their mean (:data:`MEAN_OF_LEARNERS`); the collective reward, where
    ``metrics`` has it, is the learners' task rewards summed, on the mean row (a team's score: a single learner
    has none, so a team is never compared with one agent alone on it)."""
    collective = "collective_reward" in metrics and all("task_reward_mean" in v for v in per_learner.values())
    if len(per_learner) < 2:
        return per_learner
    values = {m: [np.nan if v.get(m) is None else v[m] for v in per_learner.values()] for m in metrics}
    mean = {m: float(np.mean(v)) for m, v in values.items()}
    if collective:
        mean["collective_reward"] = float(np.sum([v["task_reward_mean"] for v in per_learner.values()]))
    return {**per_learner, MEAN_OF_LEARNERS: mean}


def reward_rise_k(iterations: int) -> int:
    """Iterations in each window of the reward rise: REWARD_RISE_K, fewer in a short run (0: none)."""
    return min(REWARD_RISE_K, iterations // 2)


def reward_rises(df: pd.DataFrame, batch_size: int, k: int) -> dict[str, dict[str, float]]:
    """learner -> ``reward_rise`` of its task-reward curve, and of the mean of the learners' curves.

    The mean of L learners' batch means has variance sum_l std_l^2 / (L^2 B): a curve of batch
    L * B and std sqrt(mean_l std_l^2), taking the learners' batches as independent.
    """
    curves = df.groupby("iteration").last().sort_index()  # a re-logged iteration counts once
    learners = [n for n in learner_columns(df, "task_reward_mean") if f"{n}/task_reward_std" in curves]
    if k < 1 or not learners:
        return {}
    means = curves[[f"{n}/task_reward_mean" for n in learners]].to_numpy(np.float64)
    stds = curves[[f"{n}/task_reward_std" for n in learners]].to_numpy(np.float64)
    rises = {n: reward_rise(means[:, i], stds[:, i], batch_size, k) for i, n in enumerate(learners)}
    if len(learners) > 1:
        pooled = np.sqrt((stds**2).mean(axis=1))
        rises[MEAN_OF_LEARNERS] = reward_rise(means.mean(axis=1), pooled, len(learners) * batch_size, k)
    return rises


def _over_seeds(values: list[float]) -> dict[str, Any]:
    """Mean and population std (as the plots' bands) over seeds, and the t-interval of the mean."""
    array = np.array([np.nan if v is None else v for v in values], dtype=np.float64)
    _, low, high = mean_ci(array, CONFIDENCE)
    return {
        "mean": float(array.mean()),
        "std": float(array.std()),
        "values": array.tolist(),
        "ci_low": low,
        "ci_high": high,
    }


def _comparisons(summary: list[dict[str, Any]], baseline_algo: str) -> list[dict[str, Any]]:
    """Welch's t-test over seeds of each row of another algorithm against the baseline's row.

    ``difference`` is the row's mean minus the baseline's (CORY - PPO); the baseline row is the
    baseline's single learner, or its mean-of-learners row when it has several (CORY's).
    """
    rows = [r for r in summary if r["algo"] == baseline_algo]
    if not rows:
        return []
    baseline = next((r for r in rows if r["learner"] == MEAN_OF_LEARNERS), rows[0])
    comparisons = []
    for row in summary:
        if row["algo"] == baseline_algo:
            continue
        tests = {
            part: {
                m: welch_test(row[part][m]["values"], baseline[part][m]["values"], CONFIDENCE)
                for m in COMPARED_METRICS
                if m in row[part]
                and m in baseline[part]
                and not np.isnan(row[part][m]["values"]).all()
                and not np.isnan(baseline[part][m]["values"]).all()
            }
            for part in ("train", "eval")
        }
        against = {"algo": baseline["algo"], "learner": baseline["learner"]}
        comparisons.append({"algo": row["algo"], "learner": row["learner"], "baseline": against, **tests})
    return comparisons


def has_held_out_evaluation(task: str) -> bool:
    """Whether a benchmark of ``task`` evaluates its runs on held-out prompts: not a game of several agents (the
    held-out evaluation plays each model alone, and a model alone scores nothing there)."""
    return get_task(task).min_agents == 1


def exchange_period(train: TrainConfig, algos: list[str]) -> int:
    """The role-exchange period of a benchmark's runs: CORY's ``--role-exchange-period`` when an entry exchanges
    roles (a team of several agents without ``--no-role-exchange``), else 0."""
    teams = any(a.partition(":")[0] != "ppo" for a in algos)
    return 0 if not teams or train.no_role_exchange else train.role_exchange_period


def write_report(out: Path, train: TrainConfig, bench: BenchmarkConfig, settings: dict[str, Any]) -> dict[str, Any]:
    """report.json, report.md and the curve PNGs of the runs in ``out`` (``settings``: benchmark.json's)."""
    seeds = list(range(bench.seed, bench.seed + bench.seeds))
    window = aligned_window(bench.final_window, exchange_period(train, bench.algos), train.iterations)
    rise_k = reward_rise_k(train.iterations)
    runs: dict[str, dict[str, Any]] = {}
    frames: dict[str, list[pd.DataFrame]] = {}
    summary = []
    seconds: dict[str, dict[str, Any]] = {}
    held_out = has_held_out_evaluation(train.task)
    for algo in bench.algos:
        per_seed_train, per_seed_eval, per_seed_rise, per_seed_seconds = [], [], [], []
        for seed in seeds:
            folder = run_dir(out, algo, seed)
            df = read_metrics(folder)
            frames.setdefault(algo.upper(), []).append(df)
            per_seed_seconds.append(float(df.groupby("iteration")["seconds"].last().median()))
            final = with_mean_of_learners(final_training_metrics(df, window), TRAIN_METRICS)
            rises = reward_rises(df, train.batch_size, rise_k)
            evaluated = json.loads((folder / "evaluation.json").read_text())["learners"] if held_out else {}
            evaluated = with_mean_of_learners(evaluated, EVAL_METRICS)
            runs[f"{algo}/seed{seed}"] = {
                "train": final,
                "eval": {n: {m: v.get(m) for m in EVAL_METRICS} for n, v in evaluated.items()},
                "reward_rise": rises,
                "commits": run_commits(folder),
            }
            per_seed_train.append(final)
            per_seed_eval.append(evaluated)
            per_seed_rise.append(rises)
        for learner in per_seed_train[0]:
            rise = [s.get(learner) for s in per_seed_rise]
            summary.append(
                {
                    "algo": algo,
                    "learner": learner,
                    "seeds": len(seeds),
                    "train": {m: _over_seeds([s[learner][m] for s in per_seed_train]) for m in TRAIN_METRICS},
                    "eval": {m: _over_seeds([s.get(learner, {}).get(m) for s in per_seed_eval]) for m in EVAL_METRICS}
                    if held_out
                    else {},
                    "reward_rise": None
                    if None in rise
                    else {
                        "k": rise_k,
                        "z": _over_seeds([r["z"] for r in rise]),
                        "difference": _over_seeds([r["difference"] for r in rise]),
                    },
                }
            )
        seconds[algo] = _over_seeds(per_seed_seconds)
    first = run_dir(out, bench.algos[0], seeds[0]) / "config.json"
    resolved = json.loads(first.read_text()) if first.exists() else {}
    plots = []
    for metric, filename in PLOTS.items():
        labels = {algo.upper(): [run_dir(out, algo, s) for s in seeds] for algo in bench.algos}
        plots.append(plot_comparison(labels, out / filename, metrics=[metric]).name)
    plots.append(plot_kl_vs_reward(frames, out / KL_VS_REWARD_PLOT).name)
    report = {
        "reward": resolved.get("reward", train.reward),  # as the runs resolved it (the task's, if not given)
        "new_tokens": [resolved.get("min_new_tokens"), resolved.get("max_new_tokens")],
        "task": train.task,
        "model": train.model,
        "iterations": train.iterations,
        "final_window": window,
        "final_window_requested": bench.final_window,
        "held_out": held_out,
        "seeds": seeds,
        "algos": bench.algos,
        "summary": summary,
        "runs": runs,
        "plots": plots,
        "confidence": CONFIDENCE,
        "baseline": bench.algos[0],
        "comparisons": _comparisons(summary, bench.algos[0]),
        "seconds_per_iteration": seconds,
        "commits": list(dict.fromkeys(c for run in runs.values() for c in run["commits"])),
        "settings": settings,
    }
    if bench.margin > 0 and len(bench.algos) > 1:  # the words of each comparison
        report["decisions"] = plan(report, bench.margin, bench.plan_metric, alpha=bench.alpha)
    write_json(out / "report.json", report)
    write_text(out / "report.md", format_report(report))
    return report


def code_line(report: dict[str, Any]) -> str:
    """Which code made the runs: one commit, or each commit with its runs (and the runs made before it was kept)."""
    runs = report.get("runs", {})
    unknown = [name for name, run in runs.items() if not run.get("commits")]
    commits = report.get("commits") or []
    if not commits:
        return "The code of the runs is not recorded (they were made before cory-env kept it)." if runs else ""
    if len(commits) == 1 and not unknown:
        return f"Every run was made with the code of commit {commits[0]}."
    parts = [f"{c} ({', '.join(n for n, r in runs.items() if c in r.get('commits', []))})" for c in commits]
    if unknown:
        parts.append(f"not recorded ({', '.join(unknown)})")
    return (
        "**The runs were made with different code**: " + "; ".join(parts) + "."
        if len(parts) > 1
        else (f"The code of the runs is not recorded ({', '.join(unknown)})." if unknown else "")
    )


def _p_value(p: Any) -> str:
    return "n/a" if p is None or not np.isfinite(p) else "< 0.001" if p < 0.001 else f"{p:.3f}"


def format_report(report: dict[str, Any]) -> str:
    """The Markdown report: a table for the last training iteration and one for the held-out
    evaluation, each followed by the Welch tests against the baseline (the first of ``--algos``)."""
    bench = report["settings"]["benchmark"]
    train = report["settings"]["train"]
    level = f"{report['confidence']:.0%}"

    def interval(c: dict[str, Any]) -> str:
        finite = all(c.get(k) is not None and np.isfinite(c[k]) for k in ("ci_low", "ci_high"))
        return f" [{fmt(c['ci_low'])}, {fmt(c['ci_high'])}]" if finite else ""

    def cell(c: dict[str, Any], with_interval: bool) -> str:
        return fmt(c["mean"], c["std"]) + (interval(c) if with_interval else "")

    def table(part: str, metrics: dict[str, str], rise: bool = False) -> str:
        header = ["algo", "learner", *metrics.values(), *(["reward rise z"] * rise)]
        rows = []
        for row in report["summary"]:
            cells = [cell(row[part][m], m in COMPARED_METRICS) for m in metrics]
            if rise:
                z = row["reward_rise"]["z"] if row["reward_rise"] else {"mean": None, "std": None}
                cells.append(fmt(z["mean"], z["std"]))
            rows.append([row["algo"], row["learner"], *cells])
        return markdown_table(header, rows)

    def tests(part: str) -> list[str]:
        if not report["comparisons"]:
            return []
        compared = [m for m in COMPARED_METRICS if any(m in c[part] for c in report["comparisons"])]
        header = ["algo", "learner", "against", *(TRAIN_METRICS[m] for m in compared)]
        rows = [
            [
                c["algo"],
                c["learner"],
                f"{c['baseline']['algo']} {c['baseline']['learner']}",
                *(
                    f"{fmt(w['difference'])}{interval(w)}, p {_p_value(w['p_value'])}" if w else "n/a"
                    for w in (c[part].get(m) for m in compared)
                ),
            ]
            for c in report["comparisons"]
        ]
        return [
            "",
            f"Against {baseline} (Welch's t-test over seeds): the row's mean minus {baseline}'s "
            f"[the {level} interval of that difference], two-sided p-value. An interval that holds 0 detects "
            "nothing; it does not show the two alike: declare the difference that matters (--margin) for a "
            "decision, or ask --plan what seeds would give one.",
            "",
            markdown_table(header, rows),
        ]

    window = report.get("final_window", 1)
    last = "the last iteration" if window == 1 else f"the last {window} iterations"
    if window != report.get("final_window_requested", window):
        last += f" (--final-window {report['final_window_requested']} aligned to the role exchange: both arrangements alike)"
    batches = "the final training batch" if window == 1 else f"the last {window} training batches, averaged"
    no_held_out = [
        "## Held-out evaluation: none",
        "",
        f"--task {report['task']} is a game of several agents: a model alone scores nothing there, so the "
        "training metrics above, the team's, are the result.",
        "",
    ]

    def held_out_section() -> list[str]:
        return [
            f"## Held-out evaluation ({bench['eval_split']} split)",
            "",
            f"Each final policy answers the same {bench['eval_prompts']} held-out prompts "
            f"({bench['eval_samples_per_prompt']} sample(s) each) alone, as the pioneer. Distinct-n: distinct "
            "n-grams / n-grams over all answers; repetition: share of repeated bigrams within an answer (seq-rep-2). "
            "Falling distinct-n and rising repetition are signs of distribution collapse.",
            "",
            table("eval", EVAL_METRICS),
            *tests("eval"),
            "",
        ]

    baseline = report.get("baseline", "ppo").upper()
    baseline_seconds = report.get("seconds_per_iteration", {}).get(report.get("baseline", "ppo"), {"mean": np.nan})
    seeds = report["seeds"]
    rise_k = reward_rise_k(report["iterations"])
    rise = (
        f"Reward rise z: the mean task reward of the last {rise_k} iterations minus that of the first {rise_k}, "
        f"in standard errors from the batches' reward std (each iteration's mean has variance "
        f"std^2 / {train['batch_size']}); z >= 2 counts as a rise."
        if rise_k
        else "Reward rise z needs at least 2 iterations."
    )
    lines = [
        f"# Reward benchmark: `{report['reward']}` on {report['task']}",
        "",
        f"{' vs '.join(a.upper() for a in report['algos'])}, {report['iterations']} iterations x {len(seeds)} seeds "
        f"({', '.join(map(str, seeds))}); model `{report['model']}`, batch {train['batch_size']}, "
        f"KL coefficient {train['kl_coef']}, {'-'.join(map(str, report.get('new_tokens') or [train['min_new_tokens'], train['max_new_tokens']]))} new tokens.",
        "Every cell: mean ± std over seeds (population std, as the bands of the plots); task reward, KL and "
        f"combined reward also [the {level} t-interval of the mean] (none with one seed). "
        f"`{MEAN_OF_LEARNERS}` rows average a run's learners before the seeds.",
        code_line(report),
        "",
        f"## Training: {last}",
        "",
        f"Task reward and KL (summed over the response, batch mean) of {batches}; "
        "combined reward = task reward - KL coefficient x KL; collective reward = the learners' task rewards "
        f"summed (the team's score; in the signalling game its success rate). {rise}",
        "",
        table("train", TRAIN_METRICS, rise=True),
        *tests("train"),
        "",
        *(held_out_section() if report.get("held_out", True) else no_held_out),
        *format_decisions(report.get("decisions")),
        "## Cost",
        "",
        "Seconds per training iteration (each run's median over its iterations; mean ± std over seeds), "
        "measured in these runs, on this machine, side by side:",
        "",
        *(
            f"- {algo.upper()}: {fmt(c['mean'], c['std'])} s"
            + (f", {c['mean'] / baseline_seconds['mean']:.2f}x {baseline}'s" if algo.upper() != baseline else "")
            for algo, c in report.get("seconds_per_iteration", {}).items()
        ),
        "",
        "## Curves",
        "",
        *(f"![{name.removesuffix('.png')}]({name})" for name in report["plots"]),
        "",
        "## Runs",
        "",
        *(f"- `{name}/`: metrics.csv, samples.jsonl, evaluation.json" for name in report["runs"]),
        "",
    ]
    return "\n".join(lines)
