"""Benchmark a reward function: single-agent PPO against CORY, N iterations x S seeds, one report.

    cory-bench --reward mypackage.rewards:politeness --iterations 20 --seeds 3 --out runs/bench
    python -m agents.evaluation.reward_benchmark --reward vader --iterations 2 --seeds 2 --batch-size 4 --out runs/tiny
    cory-bench --out runs/bench --resume            # continue after a crash, or with more --seeds

Every flag of examples/train_cory.py (--model, --batch-size, --kl-coef, --lora, ...) applies
to every run, except those the benchmark sets per run (--algo, --seed, --out, --resume,
--overwrite). What --out holds:

    benchmark.json                      the settings (--resume checks they did not change)
    ppo/seed0/, cory/seed0/, ...        one ordinary training run each (metrics.csv, samples.jsonl,
                                        plots, checkpoints/) and its evaluation.json
    report.md, report.json              final metrics per algorithm and learner: mean ± std and the 95%
                                        t-interval over seeds, Welch's t-test of CORY against PPO, and
                                        each run's reward rise (z of its last iterations over its first)
    task_reward.png, kl.png, combined_reward.png
                                        training curves: mean over seeds with a ±std band
    kl_vs_reward.png                    task reward against KL over training, mean over seeds

Each run is trained, then its final policy answers held-out prompts (agents.evaluation.held_out: task
reward, KL, distinct-1/2, repetition; the same prompts and sampling seed for every run).
With --resume, finished runs are skipped (and their evaluation, when its settings are the
same), a half-finished run continues from its newest checkpoint exactly as
``train_cory.py --resume`` does, and missing runs are trained; raising --seeds or
--iterations extends a benchmark.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import shutil
import sys
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from agents.training.checkpoint import checkpoint_iteration, latest_checkpoint
from agents.evaluation.held_out import EvalConfig, evaluate, load_reward
from agents.evaluation.report import fmt, markdown_table, write_json
from agents.training.metrics import read_metrics
from agents.training.plots import learner_columns, plot_comparison, plot_kl_vs_reward
from agents.evaluation.statistics import mean_ci, reward_rise, welch_test
from agents.training.config import ALGOS, TrainConfig, apply_preset, changed_settings, flag
from agents.training.trainer import Trainer

#: TrainConfig fields the benchmark sets for each run itself.
PER_RUN = ("algo", "seed", "out", "resume", "overwrite")
#: Settings a --resume may change: they do not change what a finished run means.
MAY_CHANGE = ("iterations", "device", "checkpoint_every", "tensorboard", "report_to", "samples_per_iteration")
#: Training metrics (last iteration, metrics.csv) and evaluation metrics in the report.
TRAIN_METRICS = {"task_reward_mean": "task reward", "kl": "KL", "combined_reward": "combined reward"}
EVAL_METRICS = {
    "task_reward_mean": "task reward", "kl": "KL", "combined_reward": "combined reward",
    "distinct_1": "distinct-1", "distinct_2": "distinct-2", "repetition_rate": "repetition",
}  # fmt: skip
PLOTS = {"task_reward_mean": "task_reward.png", "kl": "kl.png", "combined_reward": "combined_reward.png"}
KL_VS_REWARD_PLOT = "kl_vs_reward.png"
MEAN_OF_LEARNERS = "mean"  # the learner column of a row that averages a run's learners (CORY's two)
#: Metrics reported with the t-interval of their mean and tested against the baseline (Welch).
COMPARED_METRICS = ("task_reward_mean", "kl", "combined_reward")
BASELINE = "ppo"  # every other algorithm's rows are tested against its row
CONFIDENCE = 0.95
REWARD_RISE_K = 3  # reward rise: the last k iterations against the first k (k = iterations // 2 if fewer)




@dataclass
class BenchmarkConfig:
    """The benchmark's own flags; the training flags come from TrainConfig."""

    out: str = flag("runs/reward-benchmark", "benchmark folder: runs, report.md, report.json, plots")
    seeds: int = flag(3, "seeds per algorithm (the paper: 3)")
    seed: int = flag(0, "first seed; the runs use seed, seed + 1, ...")
    algos: list[str] = field(default_factory=lambda: ["ppo", "cory"], metadata={"help": "algorithms to compare"})
    resume: bool = flag(False, "continue the benchmark in --out: skip finished runs, resume half-finished ones")
    overwrite: bool = flag(False, "start over in an --out that already holds a benchmark (deletes its runs)")
    eval_prompts: int = flag(64, "held-out prompts each final policy answers")
    eval_samples_per_prompt: int = flag(1, "answers per held-out prompt (k of pass@k)")
    eval_split: str = flag("test", "held-out split of the task's prompts")
    eval_batch_size: int = flag(32, "conversations generated together in the evaluation")
    eval_seed: int = flag(0, "seed of the held-out prompts and sampling, the same for every run")
    progress: bool = flag(True, "show progress bars")

    def __post_init__(self) -> None:
        unknown = [a for a in self.algos if a not in ALGOS]
        if unknown or not self.algos:
            raise ValueError(f"--algos {' '.join(self.algos)}: choose among {', '.join(ALGOS)}")
        if self.seeds < 1:
            raise ValueError(f"--seeds must be at least 1, got {self.seeds}")
        if self.resume and self.overwrite:
            raise ValueError("--resume continues a benchmark and --overwrite starts it over: give one")


def _training_flags() -> type:
    """TrainConfig without the per-run fields: the training flags of the command line."""
    hints = typing.get_type_hints(TrainConfig)
    fields = [
        (f.name, hints[f.name], field(default=f.default, metadata=f.metadata))
        for f in dataclasses.fields(TrainConfig)
        if f.name not in PER_RUN
    ]
    return dataclasses.make_dataclass("TrainingFlags", fields)


TrainingFlags = _training_flags()


# ------------------------------------------------------------------------- the runs


def run_dir(out: str | Path, algo: str, seed: int) -> Path:
    return Path(out) / algo / f"seed{seed}"


def completed_iterations(folder: Path) -> int:
    """Iterations a run's newest checkpoint holds (0 without one)."""
    checkpoint = latest_checkpoint(folder)
    return 0 if checkpoint is None else checkpoint_iteration(checkpoint) + 1


def _settings(train: TrainConfig, bench: BenchmarkConfig) -> dict[str, Any]:
    shared = {k: v for k, v in dataclasses.asdict(train).items() if k not in PER_RUN}
    return {"train": shared, "benchmark": dataclasses.asdict(bench)}


def _prepare(out: Path, train: TrainConfig, bench: BenchmarkConfig) -> None:
    """Refuse to mix two benchmarks in one folder; start over with --overwrite; check a --resume."""
    saved_path = out / "benchmark.json"
    holds_runs = any((out / algo).is_dir() for algo in ALGOS)
    if saved_path.exists() or holds_runs:
        if bench.overwrite:
            for algo in ALGOS:
                shutil.rmtree(out / algo, ignore_errors=True)
            for name in ("benchmark.json", "report.md", "report.json", *PLOTS.values(), KL_VS_REWARD_PLOT):
                (out / name).unlink(missing_ok=True)
        elif not bench.resume:
            raise FileExistsError(
                f"{out} already holds a benchmark: pass --resume to continue it, --overwrite to start over "
                f"there, or choose another --out"
            )
        elif saved_path.exists():
            saved = json.loads(saved_path.read_text())["train"]
            now = _settings(train, bench)["train"]
            if diff := changed_settings(saved, now, MAY_CHANGE):
                raise ValueError(
                    f"{out} holds a benchmark with other training settings ({diff}): rerun with its settings "
                    f"(see {saved_path}), or use another --out or --overwrite"
                )
            if now["iterations"] < saved["iterations"]:
                raise ValueError(
                    f"{out}'s runs are set to {saved['iterations']} iterations; --iterations {now['iterations']} "
                    f"would shorten them: give --iterations {saved['iterations']} or more"
                )
    write_json(saved_path, _settings(train, bench))


def _evaluation_is_current(path: Path, config: EvalConfig, iterations: int) -> bool:
    if not path.exists():
        return False
    done = json.loads(path.read_text())
    return done.get("settings") == dataclasses.asdict(config) and done["policy"].get("iterations_trained") == iterations


def run_benchmark(train: TrainConfig, bench: BenchmarkConfig) -> dict[str, Any]:
    """Train and evaluate every (seed, algorithm) run not done yet, then write the report.

    ``train`` holds the settings shared by every run (its algo, seed, out, resume and
    overwrite are set per run). Returns the report (also in ``report.json``).
    """
    train = dataclasses.replace(apply_preset(train), preset="")  # the settings as the runs will use them
    load_reward(train.reward, train.task)  # a mistyped reward fails now, not after the first runs
    out = Path(bench.out)
    out.mkdir(parents=True, exist_ok=True)
    _prepare(out, train, bench)
    runs = [(seed, algo) for seed in range(bench.seed, bench.seed + bench.seeds) for algo in bench.algos]
    bar = tqdm(total=len(runs), desc="benchmark", unit="run", disable=not bench.progress)
    for seed, algo in runs:
        folder = run_dir(out, algo, seed)
        bar.set_postfix_str(f"{algo} seed {seed}")
        config = dataclasses.replace(train, algo=algo, seed=seed, out=str(folder), resume=True, overwrite=False)
        if completed_iterations(folder) < config.iterations:
            trainer = Trainer(config)
            trainer.train(progress=bench.progress)
            del trainer
            gc.collect()
        evaluation = EvalConfig(
            checkpoint=str(folder), split=bench.eval_split, num_prompts=bench.eval_prompts,
            samples_per_prompt=bench.eval_samples_per_prompt, batch_size=bench.eval_batch_size, seed=bench.eval_seed,
            out=str(folder / "evaluation.json"), device=train.device,
        )  # fmt: skip
        if not _evaluation_is_current(folder / "evaluation.json", evaluation, config.iterations):
            evaluate(evaluation, progress=bench.progress)
            gc.collect()
        bar.update(1)
    bar.close()
    return write_report(out, train, bench)


# ------------------------------------------------------------------------- the report


def _final_training_metrics(df: pd.DataFrame) -> dict[str, dict[str, float]]:
    """learner -> metric -> value at the run's last iteration (``df``: its metrics.csv)."""
    last = df[df["iteration"] == df["iteration"].max()].iloc[-1]
    learners = learner_columns(df, "kl")
    return {name: {m: float(last[f"{name}/{m}"]) for m in TRAIN_METRICS} for name in learners}


def _with_mean_of_learners(per_learner: dict[str, dict[str, float]], metrics: Any) -> dict[str, dict[str, float]]:
    if len(per_learner) < 2:
        return per_learner
    values = {m: [np.nan if v.get(m) is None else v[m] for v in per_learner.values()] for m in metrics}
    mean = {m: float(np.mean(v)) for m, v in values.items()}
    return {**per_learner, MEAN_OF_LEARNERS: mean}


def _reward_rise_k(iterations: int) -> int:
    """Iterations in each window of the reward rise: REWARD_RISE_K, fewer in a short run (0: none)."""
    return min(REWARD_RISE_K, iterations // 2)


def _reward_rises(df: pd.DataFrame, batch_size: int, k: int) -> dict[str, dict[str, float]]:
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
    return {"mean": float(array.mean()), "std": float(array.std()), "values": array.tolist(),
            "ci_low": low, "ci_high": high}  # fmt: skip


def _comparisons(summary: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Welch's t-test over seeds of each row of another algorithm against the baseline's row.

    ``difference`` is the row's mean minus the baseline's (CORY - PPO); the baseline row is
    PPO's single learner (its mean-of-learners row, were there several).
    """
    rows = [r for r in summary if r["algo"] == BASELINE]
    if not rows:
        return []
    baseline = next((r for r in rows if r["learner"] == MEAN_OF_LEARNERS), rows[0])
    comparisons = []
    for row in summary:
        if row["algo"] == BASELINE:
            continue
        tests = {part: {m: welch_test(row[part][m]["values"], baseline[part][m]["values"], CONFIDENCE)
                        for m in COMPARED_METRICS} for part in ("train", "eval")}  # fmt: skip
        against = {"algo": baseline["algo"], "learner": baseline["learner"]}
        comparisons.append({"algo": row["algo"], "learner": row["learner"], "baseline": against, **tests})
    return comparisons


def write_report(out: Path, train: TrainConfig, bench: BenchmarkConfig) -> dict[str, Any]:
    """report.json, report.md and the curve PNGs of the runs in ``out``."""
    seeds = list(range(bench.seed, bench.seed + bench.seeds))
    rise_k = _reward_rise_k(train.iterations)
    runs: dict[str, dict[str, Any]] = {}
    frames: dict[str, list[pd.DataFrame]] = {}
    summary = []
    for algo in bench.algos:
        per_seed_train, per_seed_eval, per_seed_rise = [], [], []
        for seed in seeds:
            folder = run_dir(out, algo, seed)
            df = read_metrics(folder)
            frames.setdefault(algo.upper(), []).append(df)
            final = _with_mean_of_learners(_final_training_metrics(df), TRAIN_METRICS)
            rises = _reward_rises(df, train.batch_size, rise_k)
            evaluated = json.loads((folder / "evaluation.json").read_text())["learners"]
            evaluated = _with_mean_of_learners(evaluated, EVAL_METRICS)
            runs[f"{algo}/seed{seed}"] = {"train": final, "eval": {n: {m: v.get(m) for m in EVAL_METRICS}
                                                                  for n, v in evaluated.items()},
                                          "reward_rise": rises}  # fmt: skip
            per_seed_train.append(final)
            per_seed_eval.append(evaluated)
            per_seed_rise.append(rises)
        for learner in per_seed_train[0]:
            rise = [s.get(learner) for s in per_seed_rise]
            summary.append({
                "algo": algo, "learner": learner, "seeds": len(seeds),
                "train": {m: _over_seeds([s[learner][m] for s in per_seed_train]) for m in TRAIN_METRICS},
                "eval": {m: _over_seeds([s[learner].get(m) for s in per_seed_eval]) for m in EVAL_METRICS},
                "reward_rise": None if None in rise else {
                    "k": rise_k, "z": _over_seeds([r["z"] for r in rise]),
                    "difference": _over_seeds([r["difference"] for r in rise]),
                },
            })  # fmt: skip
    plots = []
    for metric, filename in PLOTS.items():
        labels = {algo.upper(): [run_dir(out, algo, s) for s in seeds] for algo in bench.algos}
        plots.append(plot_comparison(labels, out / filename, metrics=[metric]).name)
    plots.append(plot_kl_vs_reward(frames, out / KL_VS_REWARD_PLOT).name)
    report = {
        "reward": train.reward, "task": train.task, "model": train.model, "iterations": train.iterations,
        "seeds": seeds, "algos": bench.algos, "summary": summary, "runs": runs, "plots": plots,
        "confidence": CONFIDENCE, "comparisons": _comparisons(summary), "settings": _settings(train, bench),
    }  # fmt: skip
    write_json(out / "report.json", report)
    (out / "report.md").write_text(format_report(report), encoding="utf-8")
    return report


def _p_value(p: Any) -> str:
    return "n/a" if p is None or not np.isfinite(p) else "< 0.001" if p < 0.001 else f"{p:.3f}"


def format_report(report: dict[str, Any]) -> str:
    """The Markdown report: a table for the last training iteration and one for the held-out
    evaluation, each followed by the Welch tests against PPO."""
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
        header = ["algo", "learner", "against", *(TRAIN_METRICS[m] for m in COMPARED_METRICS)]
        rows = [
            [c["algo"], c["learner"], f"{c['baseline']['algo']} {c['baseline']['learner']}",
             *(f"{fmt(w['difference'])}{interval(w)}, p {_p_value(w['p_value'])}"
               for w in (c[part][m] for m in COMPARED_METRICS))]
            for c in report["comparisons"]
        ]  # fmt: skip
        return [
            "",
            f"Against {BASELINE.upper()} (Welch's t-test over seeds): the row's mean minus {BASELINE.upper()}'s "
            f"[the {level} interval of that difference], two-sided p-value.",
            "",
            markdown_table(header, rows),
        ]

    seeds = report["seeds"]
    rise_k = _reward_rise_k(report["iterations"])
    rise = (
        f"Reward rise z: the mean task reward of the last {rise_k} iterations minus that of the first {rise_k}, "
        f"in standard errors from the batches' reward std (each iteration's mean has variance "
        f"std^2 / {train['batch_size']}); z >= 2 counts as a rise."
        if rise_k else "Reward rise z needs at least 2 iterations."
    )
    lines = [
        f"# Reward benchmark: `{report['reward']}` on {report['task']}",
        "",
        f"{' vs '.join(a.upper() for a in report['algos'])}, {report['iterations']} iterations x {len(seeds)} seeds "
        f"({', '.join(map(str, seeds))}); model `{report['model']}`, batch {train['batch_size']}, "
        f"KL coefficient {train['kl_coef']}, {train['min_new_tokens']}-{train['max_new_tokens']} new tokens.",
        "Every cell: mean ± std over seeds (population std, as the bands of the plots); task reward, KL and "
        f"combined reward also [the {level} t-interval of the mean] (none with one seed). "
        f"`{MEAN_OF_LEARNERS}` rows average a run's learners before the seeds.",
        "",
        "## Training: the last iteration",
        "",
        "Task reward and KL (summed over the response, batch mean) of the final training batch; "
        f"combined reward = task reward - KL coefficient x KL. {rise}",
        "",
        table("train", TRAIN_METRICS, rise=True),
        *tests("train"),
        "",
        f"## Held-out evaluation ({bench['eval_split']} split)",
        "",
        f"Each final policy answers the same {bench['eval_prompts']} held-out prompts "
        f"({bench['eval_samples_per_prompt']} sample(s) each) alone, as the pioneer. Distinct-n: distinct n-grams / "
        "n-grams over all answers; repetition: share of repeated bigrams within an answer (seq-rep-2). "
        "Falling distinct-n and rising repetition are signs of distribution collapse.",
        "",
        table("eval", EVAL_METRICS),
        *tests("eval"),
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


# ------------------------------------------------------------------------- command line


def build_parser() -> argparse.ArgumentParser:
    from transformers import HfArgumentParser

    return HfArgumentParser(
        (TrainingFlags, BenchmarkConfig), description=__doc__, prog="cory-bench",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def parse_args(argv: list[str] | None = None) -> tuple[TrainConfig, BenchmarkConfig]:
    parser = build_parser()
    try:
        flags, bench = parser.parse_args_into_dataclasses(args=argv)
    except ValueError as exc:
        parser.error(str(exc))
    return TrainConfig(**dataclasses.asdict(flags)), bench


def main(argv: list[str] | None = None) -> None:
    """Console script ``cory-bench``."""
    train, bench = parse_args(sys.argv[1:] if argv is None else argv)
    report = run_benchmark(train, bench)
    out = Path(bench.out)
    print()
    print(format_report(report).split("## Curves")[0].rstrip())
    print(f"\nreport: {out / 'report.md'}, {out / 'report.json'}")
    print(f"plots:  {', '.join(str(out / p) for p in report['plots'])}")


if __name__ == "__main__":
    main()
