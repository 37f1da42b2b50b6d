"""A benchmark's record: archived runs, its report regenerated from them, and the MARL evaluation protocol's JSON.

A benchmark folder holds GBs of checkpoints; what its report is computed from is small. ``cory-bench --archive
DEST`` copies, for every run of the benchmark in ``--out``, the files of :data:`RECORD` (per-iteration
metrics, the resolved settings, the sampled answers, the held-out evaluation, the finished mark and the
code that trained it, :mod:`~cory_agents.training.provenance`), with the benchmark's settings
(``benchmark.json``) and, for a sequential study, its looks (``sequential.json``); then it writes the report
in ``DEST`` from those copies alone. ``cory-bench --report-only --out DIR`` rewrites the report of a
benchmark or an archive from its files, with the settings it was run with (``benchmark.json``, not the
command line's). The report names the commits its runs were made with, and says so when they differ.

``cory-bench --export marl-eval --out DIR`` writes ``DIR/marl-eval.json`` in the format of the MARL
evaluation protocol (Gorsane et al., 2022; instadeepai/marl-eval's ``data_process_pipeline`` reads it)::

    {"cory-env": {TASK: {ALGO: {"seed0": {"step_0": {"step_count": B, "collective_reward": [0.19], ...},
                                          ...,
                                          "absolute_metrics": {"collective_reward": [0.81], ...}}}}}}

one ``step_i`` per training iteration (``step_count`` the conversations played so far, ``i + 1`` batches),
each metric a one-element list (a rate over the batch, as marl-eval's win rate): the task reward and KL,
the mean of the run's learners, and the collective reward where every entry is a team. ``absolute_metrics``
is the held-out evaluation's where the task has one, else the report's final window.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from cory_agents.evaluation.benchmark_config import BenchmarkConfig
from cory_agents.evaluation.benchmark_report import run_dir, write_report
from cory_agents.evaluation.report import write_json
from cory_agents.training.metrics import METRICS_FILE, SAMPLES_FILE, read_metrics
from cory_agents.training.ownership import refuse
from cory_agents.training.plots import learner_columns
from cory_agents.training.provenance import PROVENANCE_FILE
from cory_agents.training.registry import available_learners
from cory_env.errors import UsageError

#: What a run's record is: what its report line is computed from, and what it says about how it was made.
RECORD = ("config.json", METRICS_FILE, SAMPLES_FILE, "evaluation.json", "trained.json", PROVENANCE_FILE)
#: The benchmark's own files an archive keeps.
BENCHMARK_FILES = ("benchmark.json", "sequential.json")
MARL_EVAL_FILE = "marl-eval.json"
#: The environment's name in the marl-eval JSON.
ENVIRONMENT = "cory-env"


def saved_benchmark(folder: str | Path) -> tuple[Any, BenchmarkConfig, dict[str, Any]]:
    """The training settings, the benchmark's and the raw record of the benchmark in ``folder``
    (its benchmark.json)."""
    from cory_agents.evaluation.reward_benchmark import PER_RUN
    from cory_agents.training.config import TrainConfig

    path = Path(folder) / "benchmark.json"
    try:
        settings = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise UsageError(f"{path} cannot be read ({error}): give the --out of a benchmark or of its archive") from None
    known = set(available_learners())
    if missing := [a for a in settings["benchmark"]["algos"] if a.partition(":")[2] not in known | {""}]:
        raise UsageError(
            f"{folder} holds runs of {', '.join(missing)}, whose learner is not installed here: install the package "
            f"that declares it (an entry point of cory_env.learners; the MAGRPO example: pip install "
            f"examples/plugins/magrpo), then run this again"
        )
    bench = BenchmarkConfig(**{**settings["benchmark"], "out": str(folder)})
    learners = [arm.partition(":")[2] or settings["train"]["learner"] for arm in bench.algos]
    fields = {k: v for k, v in settings["train"].items() if k not in PER_RUN}
    return TrainConfig.for_learner(*learners)(**fields), bench, settings


def report_only(folder: str | Path) -> dict[str, Any]:
    """Rewrite the report of the benchmark (or archive) in ``folder`` from its runs' files and its settings."""
    train, bench, settings = saved_benchmark(folder)
    missing = [
        str(run_dir(folder, a, s).relative_to(folder))
        for s in range(bench.seed, bench.seed + bench.seeds)
        for a in bench.algos
        if not (run_dir(folder, a, s) / METRICS_FILE).is_file()
    ]
    if missing:
        raise UsageError(f"{folder} lacks the runs {', '.join(missing)}: finish the benchmark (--resume) first")
    return write_report(Path(folder), train, bench, settings)


def archive(folder: str | Path, dest: str | Path) -> dict[str, Any]:
    """Copy the record of every run of the benchmark in ``folder`` to ``dest`` and write the report there."""
    folder, dest = Path(folder), Path(dest)
    train, bench, settings = saved_benchmark(folder)
    if dest.resolve() == folder.resolve() or folder.resolve() in dest.resolve().parents:
        raise UsageError(f"--archive {dest} is inside the benchmark --out {folder}: choose a folder outside it")
    if dest.exists() and any(dest.iterdir()) and not (dest / "benchmark.json").is_file():
        raise refuse(dest, "holds files and no archived benchmark (benchmark.json)", "choose an empty or new folder")
    for seed in range(bench.seed, bench.seed + bench.seeds):
        for algo in bench.algos:
            run, copy = run_dir(folder, algo, seed), run_dir(dest, algo, seed)
            if not (run / METRICS_FILE).is_file():
                raise UsageError(f"{run} has not trained yet: finish the benchmark (--resume) before archiving it")
            copy.mkdir(parents=True, exist_ok=True)
            for name in RECORD:
                if (run / name).is_file():
                    shutil.copy2(run / name, copy / name)
    for name in BENCHMARK_FILES:
        if (folder / name).is_file():
            shutil.copy2(folder / name, dest / name)
    return write_report(dest, train, dataclasses.replace(bench, out=str(dest)), settings)


def marl_eval(folder: str | Path) -> dict[str, Any]:
    """The marl-eval JSON of the benchmark (or archive) in ``folder`` (module docstring)."""
    report_path = Path(folder) / "report.json"
    if not report_path.is_file():
        raise UsageError(f"--export reads a finished benchmark's report, and {report_path} is not there")
    report = json.loads(report_path.read_text())
    teams = all(any(r["learner"] == "mean" for r in report["summary"] if r["algo"] == a) for a in report["algos"])
    batch = report["settings"]["train"]["batch_size"]
    algorithms: dict[str, Any] = {}
    for algo in report["algos"]:
        runs = {}
        for seed in report["seeds"]:
            df = read_metrics(run_dir(folder, algo, seed)).groupby("iteration").last().sort_index()
            curves = _curves(df, teams)
            steps = {
                f"step_{i}": {"step_count": int((i + 1) * batch), **{m: [float(v[i])] for m, v in curves.items()}}
                for i in range(len(df))
            }
            steps["absolute_metrics"] = {m: [v] for m, v in _absolute(report, algo, seed, teams).items()}
            runs[f"seed{seed}"] = steps
        algorithms[algo] = runs
    return {ENVIRONMENT: {report["task"]: algorithms}}


def _curves(df: Any, teams: bool) -> dict[str, np.ndarray]:
    reward = df[list(learner_columns(df, "task_reward_mean").values())]
    curves = {
        "task_reward": reward.mean(axis=1).to_numpy(),
        "kl": df[list(learner_columns(df, "kl").values())].mean(axis=1).to_numpy(),
    }
    if teams:
        curves["collective_reward"] = reward.sum(axis=1).to_numpy()
    return curves


def _absolute(report: dict[str, Any], algo: str, seed: int, teams: bool) -> dict[str, float]:
    run = report["runs"][f"{algo}/seed{seed}"]
    learners = [n for n in run["train"] if n != "mean"]
    part = "eval" if report.get("held_out") and run["eval"] else "train"
    row = run[part].get("mean") or run[part][learners[0]]
    values = {"task_reward": row["task_reward_mean"], "kl": row["kl"]}
    if teams:
        values["collective_reward"] = run["train"]["mean"]["collective_reward"]
    return {m: float(v) for m, v in values.items()}


def write_marl_eval(folder: str | Path) -> Path:
    return write_json(Path(folder) / MARL_EVAL_FILE, marl_eval(folder))
