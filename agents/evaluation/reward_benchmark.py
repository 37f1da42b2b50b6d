"""Benchmark a reward function: single-agent PPO against CORY, N iterations x S seeds, one report.

    cory-bench --reward mypackage.rewards:politeness --iterations 20 --seeds 3 --out runs/bench
    python -m cory_agents.evaluation.reward_benchmark --reward vader --iterations 2 --seeds 2 --batch-size 4 --out runs/tiny
    cory-bench --out runs/bench --resume            # continue after a crash, or with more --seeds
    cory-bench --algos cory cory:happo cory:difference --out runs/marl   # learners compared, CORY the baseline
    cory-bench --out runs/marl --plan --margin 0.15  # from that pilot: the seeds a decision needs, and their cost
    cory-bench --out runs/marl --archive docs/my-study  # its record (no checkpoints), the report from it alone
    cory-bench --out docs/my-study --report-only     # the report again, from the archive
    cory-bench --out runs/marl --export marl-eval    # runs/marl/marl-eval.json for marl-eval's tools
    cory-bench --algos cory cory:mappo --task signal --margin 0.15 --sequential obrien-fleming --stages 3 6 10 \
        --budget-hours 12 --out runs/study           # seeds in stages until each entry is decided (or the budget)

Every flag of examples/train_cory.py (--model, --batch-size, --kl-coef, --lora, ...) applies
to every run, except those the benchmark sets per run (--algo, --seed, --out, --resume,
--overwrite); --num-agents and --models shape CORY's team, and PPO trains the first agent's
model alone. An entry of --algos is an algorithm (ppo, cory), with the --learner flag's learner,
or ALGO:LEARNER with a learner of its own (cory:happo, cory:difference, ppo:grpo): the first
entry is the baseline every other is tested against. The flags come in cory-train's sections;
a learner's own flags (--group-size, --happo-factor-clip) are there when an entry trains with
that learner (`cory-bench --algos ppo cory:grpo --help`) and go to the entries that do. What --out holds:

    benchmark.json                      the settings (--resume checks they did not change)
    ppo/seed0/, cory/seed0/, ...        one ordinary training run each (metrics.csv, samples.jsonl,
    cory-happo/seed0/, ...              plots, checkpoints/) and its evaluation.json
    report.md, report.json              final metrics per algorithm and learner: mean ± std and the 95%
                                        t-interval over seeds, Welch's t-test of each against the
                                        first (PPO), each run's reward rise (z of its last iterations
                                        over its first), seconds per iteration
    task_reward.png, kl.png, combined_reward.png
                                        training curves: mean over seeds with a ±std band
    kl_vs_reward.png                    task reward against KL over training, mean over seeds

Each run is trained, then its final policy answers held-out prompts (cory_agents.evaluation.held_out: task
reward, KL, distinct-1/2, repetition; the same prompts and sampling seed for every run).
With --resume, finished runs are skipped (and their evaluation, when its settings are the
same: a run evaluated after its last iteration is finished even once its checkpoints are
deleted), a half-finished run continues from its newest checkpoint exactly as
``train_cory.py --resume`` does, and missing runs are trained; raising --seeds or
--iterations extends a benchmark.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import multiprocessing
import sys
import typing
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import field
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from cory_agents.cli.errors import add_debug_flag, one_line_errors, refuse_retired_flags
from cory_agents.evaluation.archive import archive, report_only, write_marl_eval
from cory_agents.evaluation.benchmark_config import DEFAULT_ALGOS, BenchmarkConfig
from cory_agents.evaluation.benchmark_report import (
    KL_VS_REWARD_PLOT,
    PLOTS,
    format_report,
    has_held_out_evaluation,
    run_dir,
    write_report,
)
from cory_agents.evaluation.benchmark_runs import (
    evaluation_is_current,
    one_thread,
    portable,
    run_in_process,
    stop_if_stopped,
    train_and_evaluate,
    trained,
)
from cory_agents.evaluation.held_out import EvalConfig, load_reward
from cory_agents.evaluation.plan import format_plan, plan_from_folder
from cory_agents.evaluation.report import write_json
from cory_agents.evaluation.sequential import format_sequential, run_sequential
from cory_agents.evaluation.study import run_study
from cory_agents.learners.lm import LMLearnerConfig
from cory_agents.training.checkpoint import latest_checkpoint
from cory_agents.training.config import (
    ALGOS,
    TrainConfig,
    apply_preset,
    learner_section,
    learners_taking,
    resolve,
    sections_for,
    titled_section,
)
from cory_agents.training.ownership import (
    check_out_folder,
    check_run_removable,
    refuse,
    remove_if_empty,
    remove_run,
)
from cory_agents.training.resumable import changed_settings
from cory_env.errors import UsageError
from cory_env.tasks import get_task

#: TrainConfig fields the benchmark sets for each run itself.
PER_RUN = ("algo", "seed", "out", "resume", "overwrite")
#: Settings a --resume may change: they do not change what a finished run means.
MAY_CHANGE = ("iterations", "device", "checkpoint_every", "report_to", "samples_per_iteration", "reward_timeout")


class BenchmarkExistsError(UsageError, FileExistsError):
    """The benchmark folder holds another benchmark's runs: --resume it, --overwrite it, or choose another --out."""


# ------------------------------------------------------------------------- the training flags


def training_sections(learners: Iterable[str]) -> list[type]:
    """cory-bench's training flags, in ``--help``'s order: cory-train's sections without the flags the
    benchmark sets per run, and for the learner the sections of ``learners`` (those the ``--algos``
    entries train with): the settings every learner shares once, then each learner's own.

    >>> [s._argument_group_name.split(":")[0] for s in training_sections(["ppo", "grpo"])][2:5]
    ['Game', 'Learner', 'Learner ppo']
    """
    task, model, game, _, *after = sections_for(TrainConfig.learner)  # after the learner's: generation, ...
    own: dict[type, str] = {}  # each section once, under the first learner that has it
    for name in learners:
        own.setdefault(learner_section(name), name)
    sections = [task, model, game, LMLearnerConfig, *(titled_section(name) for name in own.values()), *after]
    placed: set[str] = set()
    flags = []
    for section in sections:
        names = [f.name for f in dataclasses.fields(section) if f.name not in placed | set(PER_RUN)]
        placed |= set(names)
        if names:
            flags.append(_section_of(section, names))
    return flags


def _section_of(section: type, names: list[str]) -> type:
    """A dataclass of ``section``'s fields ``names``, under its ``--help`` title."""
    hints = typing.get_type_hints(section)
    fields = [
        (f.name, hints[f.name], field(default=f.default, metadata=f.metadata))
        for f in dataclasses.fields(section)
        if f.name in names
    ]
    namespace = {"_argument_group_name": section._argument_group_name}
    if learner := getattr(section, "learner_name", None):  # a learner's own: from_sections reads whose it is
        namespace["learner_name"] = learner
    return dataclasses.make_dataclass(section.__name__, fields, namespace=namespace)


def entry_learners(argv: list[str]) -> list[str]:
    """The learner of each ``--algos`` entry on the command line (``ALGO:LEARNER``'s, else ``--learner``'s),
    read before the rest: they choose the learner sections."""
    first = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    first.add_argument("--algos", nargs="+", default=list(DEFAULT_ALGOS))
    first.add_argument("--learner", default=TrainConfig.learner)
    known = first.parse_known_args(argv)[0]
    return [arm.partition(":")[2] or known.learner for arm in known.algos]


# ------------------------------------------------------------------------- the runs


def _settings(train: TrainConfig, bench: BenchmarkConfig) -> dict[str, Any]:
    shared = {k: v for k, v in dataclasses.asdict(train).items() if k not in PER_RUN}
    return {"train": shared, "benchmark": dataclasses.asdict(bench)}


def saved_arms(path: Path) -> list[str]:
    """The ``--algos`` of the benchmark saved at ``path`` (its benchmark.json); none if it is missing or unreadable."""
    try:
        return [str(arm) for arm in json.loads(path.read_text())["benchmark"]["algos"]]
    except (OSError, ValueError, KeyError, TypeError):
        return []


def _prepare(out: Path, train: TrainConfig, bench: BenchmarkConfig) -> None:
    """Refuse to mix two benchmarks in one folder; start over with --overwrite; check a --resume."""
    saved_path = out / "benchmark.json"
    # The runs of this benchmark's arms, and those of the benchmark saved there (--overwrite deletes both).
    arms = (*ALGOS, *bench.algos, *(saved_arms(saved_path) if bench.overwrite else ()))
    folders = [run_dir(out, arm, 0).parent for arm in dict.fromkeys(arms)]
    holds_runs = any(folder.is_dir() for folder in folders)
    reports = [out / name for name in ("report.md", "report.json", *PLOTS.values(), KL_VS_REWARD_PLOT)]
    if not saved_path.exists() and (taken := [path for path in reports if path.exists()]):
        raise refuse(taken[0], "exists and the folder holds no benchmark (benchmark.json)", "choose another --out")
    if saved_path.exists() or holds_runs:
        if bench.overwrite:  # the runs' folders, each checked before any is deleted (ownership)
            runs = [run for folder in folders if folder.is_dir() for run in sorted(folder.glob("seed*"))]
            for run in runs:
                check_run_removable(run)
            for run in runs:
                remove_run(run)
            for folder in folders:
                remove_if_empty(folder)
            for path in (saved_path, *reports):
                path.unlink(missing_ok=True)
        elif not bench.resume:
            raise BenchmarkExistsError(
                f"{out} already holds a benchmark: pass --resume to continue it, --overwrite to start over "
                f"there, or choose another --out"
            )
        elif saved_path.exists():
            saved = json.loads(saved_path.read_text())["train"]
            now = _settings(train, bench)["train"]
            if diff := changed_settings(saved, now, MAY_CHANGE):
                raise UsageError(
                    f"{out} holds a benchmark with other training settings ({diff}): rerun with its settings "
                    f"(see {saved_path}), or use another --out or --overwrite"
                )
            if now["iterations"] < saved["iterations"]:
                raise UsageError(
                    f"{out}'s runs are set to {saved['iterations']} iterations; --iterations {now['iterations']} "
                    f"would shorten them: give --iterations {saved['iterations']} or more"
                )
    write_json(saved_path, _settings(train, bench))


def _evaluation(folder: Path, train: TrainConfig, bench: BenchmarkConfig) -> EvalConfig:
    """The held-out evaluation of the run in ``folder``: the same prompts and sampling seed for every run."""
    return EvalConfig(
        checkpoint=str(folder),
        split=bench.eval_split,
        num_prompts=bench.eval_prompts,
        samples_per_prompt=bench.eval_samples_per_prompt,
        batch_size=bench.eval_batch_size,
        seed=bench.eval_seed,
        out=str(folder / "evaluation.json"),
        device=train.device,
    )


def _check_finished_runs(out: Path, train: TrainConfig, bench: BenchmarkConfig, folders: list[Path]) -> None:
    """Refuse, before anything is written, a --resume that needs the checkpoints a finished run no longer has
    (deleted): a larger --iterations would train it again from iteration 0, other evaluation settings could
    not evaluate it."""
    stuck = []
    for folder in folders:
        if (done := trained(folder)) and done < train.iterations and latest_checkpoint(folder) is None:
            stuck.append(f"{folder.relative_to(out)} ({done} iterations)")  # a team game's: no evaluation
        path = folder / "evaluation.json"
        if path.exists() and latest_checkpoint(folder) is None:
            if not evaluation_is_current(path, _evaluation(folder, train, bench), train.iterations):
                done = json.loads(path.read_text())["policy"].get("iterations_trained", 0)
                stuck.append(f"{folder.relative_to(out)} ({done} iterations)")
    if stuck:
        raise UsageError(
            f"the finished runs {', '.join(stuck)} have no checkpoint left (deleted), so they can be neither "
            f"extended to --iterations {train.iterations} (they would train again from iteration 0) nor evaluated "
            f"with other --eval-* settings. Keep their --iterations and evaluation settings, or start over with "
            f"--overwrite"
        )


def for_algo(train: TrainConfig, arm: str) -> dict[str, Any]:
    """The settings of an ``--algos`` entry's runs (``ALGO`` or ``ALGO:LEARNER``): ``--num-agents`` and
    ``--models`` shape CORY's team; PPO, the baseline, trains the first agent's model alone."""
    algo, _, learner = arm.partition(":")
    own = {"algo": algo, **({"learner": learner} if learner else {})}
    if algo != "ppo":
        return own
    templates = train.template_list()
    return {
        **own,
        "num_agents": None,
        "models": "",
        "model": next(iter(train.agent_models().values())),
        "templates": json.dumps(templates[:1]) if templates else "",
    }


def run_benchmark(train: TrainConfig, bench: BenchmarkConfig) -> dict[str, Any]:
    """Train and evaluate every (seed, algorithm) run not done yet, then write the report.

    ``train`` holds the settings shared by every run (its algo, seed, out, resume and
    overwrite are set per run). Returns the report (also in ``report.json``).
    """
    train = dataclasses.replace(apply_preset(train), preset="")  # the settings as the runs will use them
    task = get_task(train.task)
    held_out = has_held_out_evaluation(train.task)
    if alone := [arm for arm in bench.algos if arm.partition(":")[0] == "ppo" and task.min_agents > 1]:
        raise UsageError(
            f"--task {task.name} is a game of {task.min_agents} agents, and --algos {' '.join(alone)} trains one "
            f"alone: drop it from --algos (e.g. --algos cory cory:mappo)"
        )
    load_reward(train.reward, train.task)  # a mistyped reward fails now, not after the first runs
    for arm in bench.algos:  # an entry whose settings cannot work fails now, not after the others' runs
        resolve(dataclasses.replace(train, **for_algo(train, arm)))
    out = Path(bench.out)
    check_out_folder(out)  # a file, or below one: refused before any run trains
    runs = [(seed, algo) for seed in range(bench.seed, bench.seed + bench.seeds) for algo in bench.algos]
    if bench.resume:
        _check_finished_runs(out, train, bench, [run_dir(out, algo, seed) for seed, algo in runs])
    out.mkdir(parents=True, exist_ok=True)
    _prepare(out, train, bench)
    todo = []  # (run's settings, its evaluation or None) of each run not finished yet
    for seed, algo in runs:
        folder = run_dir(out, algo, seed)
        config = dataclasses.replace(
            train, **for_algo(train, algo), seed=seed, out=str(folder), resume=True, overwrite=False
        )
        evaluation = _evaluation(folder, train, bench)
        current = evaluation_is_current(folder / "evaluation.json", evaluation, config.iterations)
        if not held_out:  # the training metrics are the result; TRAINED marks the run finished
            measured = train.task == "signal"  # a signalling team's communication measures (cory-eval's)
            if trained(folder) < config.iterations or measured and not current:  # (checkpoints may then go)
                todo.append((config, evaluation if measured else None))
        # Finished and evaluated with these settings: done, its checkpoints kept or deleted (a CORY one is GBs).
        elif not current:
            todo.append((config, evaluation))
    drop = bench.delete_checkpoints
    bar = tqdm(total=len(runs), initial=len(runs) - len(todo), desc="benchmark", unit="run", disable=not bench.progress)
    if bench.jobs == 1:
        for config, evaluation in todo:
            bar.set_postfix_str(f"{config.algo}:{config.learner} seed {config.seed}")
            stop_if_stopped(train_and_evaluate(config, evaluation, bench.progress, not held_out, drop))
            bar.update(1)
    else:  # each run in a process of its own, one thread each; a stopped run stops the benchmark
        with ProcessPoolExecutor(
            bench.jobs, mp_context=multiprocessing.get_context("spawn"), initializer=one_thread
        ) as pool:
            learners = [arm.partition(":")[2] or train.learner for arm in bench.algos]
            futures = [pool.submit(run_in_process, portable(c, learners), e, not held_out, drop) for c, e in todo]
            for future in as_completed(futures):
                stop_if_stopped(future.result())
                bar.update(1)
    bar.close()
    return write_report(out, train, bench, _settings(train, bench))


# ------------------------------------------------------------------------- command line


def build_parser(learners: Iterable[str] = (TrainConfig.learner,)) -> argparse.ArgumentParser:
    """The command line: the training sections of the entries' ``learners`` (:func:`training_sections`),
    then the benchmark's own flags; each flag's help text is its field's (also docs/cli.md)."""
    from transformers import HfArgumentParser

    return add_debug_flag(
        refuse_retired_flags(
            HfArgumentParser(
                (*training_sections(learners), BenchmarkConfig),
                description=__doc__,
                prog="cory-bench",
                formatter_class=argparse.RawDescriptionHelpFormatter,
            )
        )
    )


def parse_args(argv: list[str] | None = None) -> tuple[TrainConfig, BenchmarkConfig]:
    """The shared training settings and the benchmark's (``sys.argv`` by default). A flag of a learner that no
    ``--algos`` entry trains with fails with a :class:`~cory_env.errors.UsageError` naming the learners that take it."""
    argv = sys.argv[1:] if argv is None else list(argv)
    learners = entry_learners(argv)
    parser = build_parser(learners)
    *sections, bench, unused = parser.parse_args_into_dataclasses(args=argv, return_remaining_strings=True)
    for arg in unused:  # BenchmarkConfig's checks ran above: the entries are valid
        if owners := learners_taking(arg):
            raise UsageError(
                f"{arg.split('=')[0]} is a setting of --learner {', '.join(owners)}, and no entry of --algos "
                f"({' '.join(bench.algos)}) trains with one: add an entry that does (e.g. cory:{owners[0]}), or drop it"
            )
    if unused:
        parser.error(f"unrecognized arguments: {' '.join(unused)}")
    return TrainConfig.from_sections(*sections), bench


@one_line_errors
def main(argv: list[str] | None = None) -> None:
    """Console script ``cory-bench``."""
    train, bench = parse_args(argv)
    if bench.plan:  # read a pilot, train nothing
        print(format_plan(plan_from_folder(bench.out, bench.margin, bench.plan_metric)))
        return
    if bench.study:  # the file holds every setting: those of the command line are not read
        print(f"wrote {run_study(bench.study, bench.report_only)}")
        return
    if bench.report_only or bench.archive:  # the report from the runs' files, in --out or in the archive
        report = report_only(bench.out) if bench.report_only else archive(bench.out, bench.archive)
        print(format_report(report).split("## Curves")[0].rstrip())
        return
    if bench.export:
        print(f"wrote {write_marl_eval(bench.out)}")
        return
    if bench.sequential:  # stages of seeds, to a decision or the budget
        print(format_sequential(run_sequential(train, bench, run_benchmark)))
        return
    report = run_benchmark(train, bench)
    out = Path(bench.out)
    print()
    print(format_report(report).split("## Curves")[0].rstrip())
    print(f"\nreport: {out / 'report.md'}, {out / 'report.json'}")
    print(f"plots:  {', '.join(str(out / p) for p in report['plots'])}")


if __name__ == "__main__":
    main()
