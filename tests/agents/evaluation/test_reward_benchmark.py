"""The reward-benchmarking harness end to end at toy scale: runs, resume, report, plots, refusals."""

from __future__ import annotations

import dataclasses
import importlib
import json
import math
import re
import shutil
import tomllib
from pathlib import Path

import pandas as pd
import pytest
from scipy import stats

from cory_agents.evaluation.reward_benchmark import main
from cory_agents.training.config import TrainConfig
from cory_agents.training.plots import plot_kl_vs_reward
from cory_env.errors import UsageError
from tests.support import ROOT
from tests.support.runs import toy_bench_args as toy_args

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
RUNS = ("ppo/seed0", "cory/seed0", "ppo/seed1", "cory/seed1")


def samples(run: Path, iteration: int) -> list[dict]:
    lines = (run / "samples.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["iteration"] == iteration]


def mtimes(out: Path) -> dict[str, int]:
    return {str(p.relative_to(out)): p.stat().st_mtime_ns for p in out.glob("*/seed*/**/*") if p.is_file()}


@pytest.fixture(scope="module")
def benchmark(tmp_path_factory, toy_model):
    """A half-finished benchmark (1 seed, 1 iteration), extended to 2 seeds x 2 iterations, then rerun."""
    model = toy_model
    out = tmp_path_factory.mktemp("bench")
    main(toy_args(model, out, "--seeds", "1", "--iterations", "1"))
    first = {run: pd.read_csv(out / run / "metrics.csv") for run in RUNS[:2]}
    assert not (out / "ppo" / "seed1").exists()
    main(toy_args(model, out, "--seeds", "2", "--iterations", "2", "--resume"))
    before = mtimes(out)
    main(toy_args(model, out, "--seeds", "2", "--iterations", "2", "--resume"))
    return model, out, first, before


def test_runs_are_resumed_not_retrained(benchmark):
    _, out, first, _ = benchmark
    for run in RUNS:
        metrics = pd.read_csv(out / run / "metrics.csv")
        assert metrics["iteration"].tolist() == [0, 1], run
        assert (out / run / "checkpoints" / "iter_000001.safetensors").exists()
    for run, metrics in first.items():  # seed 0: its first iteration kept, the second added by resuming
        resumed = pd.read_csv(out / run / "metrics.csv")
        pd.testing.assert_frame_equal(resumed.iloc[:1], metrics, check_exact=True)


def test_a_finished_benchmark_is_not_run_again(benchmark):
    _, out, _, before = benchmark
    assert mtimes(out) == before  # no checkpoint, metrics or evaluation rewritten


def test_a_finished_run_is_finished_without_its_checkpoints(tmp_path, toy_model):
    out = tmp_path / "bench"
    args = toy_args(toy_model, out, "--seeds", "1", "--algos", "ppo")
    main([*args, "--iterations", "1"])
    run = out / "ppo" / "seed0"
    shutil.rmtree(run / "checkpoints")  # what a user does to keep the disk: a CORY checkpoint is GBs
    before = mtimes(out)
    main([*args, "--iterations", "1", "--resume"])
    assert mtimes(out) == before and not (run / "checkpoints").exists()  # not trained again, not evaluated again
    settings = (out / "benchmark.json").read_text()
    # Extending it would start it again from iteration 0: refused, and nothing is written.
    with pytest.raises(UsageError, match=r"the finished runs ppo/seed0 \(1 iterations\) have no checkpoint left"):
        main([*args, "--iterations", "2", "--resume"])
    assert mtimes(out) == before and (out / "benchmark.json").read_text() == settings
    # So would evaluating it with other settings, which needs its weights.
    with pytest.raises(UsageError, match=r"ppo/seed0 \(1 iterations\) .*nor evaluated with other --eval-\* settings"):
        main([*args, "--iterations", "1", "--resume", "--eval-seed", "1"])
    assert mtimes(out) == before and (out / "benchmark.json").read_text() == settings


def test_report_rows_and_values(benchmark):
    _, out, _, _ = benchmark
    report = json.loads((out / "report.json").read_text())
    rows = [(r["algo"], r["learner"]) for r in report["summary"]]
    assert rows == [("ppo", "pioneer"), ("cory", "llm_0"), ("cory", "llm_1"), ("cory", "mean")]
    for row in report["summary"]:
        assert row["seeds"] == 2
        for part, metrics in (
            ("train", ("task_reward_mean", "kl", "combined_reward")),
            ("eval", ("task_reward_mean", "kl", "combined_reward", "distinct_1", "distinct_2", "repetition_rate")),
        ):
            for m in metrics:
                cell = row[part][m]
                assert len(cell["values"]) == 2 and all(math.isfinite(v) for v in cell["values"]), (row["algo"], m)
                assert cell["mean"] == pytest.approx(sum(cell["values"]) / 2)
        assert row["eval"]["kl"]["mean"] > 0  # trained away from the reference
    # the report's training numbers are the runs' last rows
    last = pd.read_csv(out / "ppo" / "seed1" / "metrics.csv").iloc[-1]
    assert report["runs"]["ppo/seed1"]["train"]["pioneer"]["kl"] == pytest.approx(last["pioneer/kl"])
    evaluation = json.loads((out / "cory" / "seed0" / "evaluation.json").read_text())
    assert evaluation["policy"]["iterations_trained"] == 2 and evaluation["num_prompts"] == 4
    md = (out / "report.md").read_text()
    assert "| cory | llm_1" in md and "distinct-2" in md and " ± " in md and "![kl](kl.png)" in md
    assert report["plots"] == ["task_reward.png", "kl.png", "combined_reward.png", "kl_vs_reward.png"]
    assert "![kl_vs_reward](kl_vs_reward.png)" in md
    for png in report["plots"]:
        assert (out / png).read_bytes()[:8] == PNG_MAGIC


T_975_DOF1 = math.tan(0.475 * math.pi)  # Student t with 1 dof is Cauchy: 12.7062


def test_report_intervals_over_seeds(benchmark):
    _, out, _, _ = benchmark
    report = json.loads((out / "report.json").read_text())
    assert report["confidence"] == 0.95
    for row in report["summary"]:
        for part in ("train", "eval"):
            for m in ("task_reward_mean", "kl", "combined_reward"):
                cell = row[part][m]
                # 2 seeds: s / sqrt(2) = |v0 - v1| / 2, so the interval is mean ± 12.7062 |v0 - v1| / 2
                v0, v1 = cell["values"]
                half = T_975_DOF1 * abs(v0 - v1) / 2
                assert (cell["ci_low"], cell["ci_high"]) == pytest.approx((cell["mean"] - half, cell["mean"] + half))
        assert row["eval"]["kl"]["ci_low"] < row["eval"]["kl"]["mean"] < row["eval"]["kl"]["ci_high"]
    md = (out / "report.md").read_text()
    assert "95% t-interval" in md
    kl = next(r for r in report["summary"] if r["algo"] == "ppo")["eval"]["kl"]
    assert f"{kl['mean']:.3f} ± {kl['std']:.3f} [{kl['ci_low']:.3f}, {kl['ci_high']:.3f}]" in md


def test_report_tests_cory_against_ppo(benchmark):
    _, out, _, _ = benchmark
    report = json.loads((out / "report.json").read_text())
    rows = {(r["algo"], r["learner"]): r for r in report["summary"]}
    ppo = rows["ppo", "pioneer"]
    assert all(v is None for v in ppo["train"]["collective_reward"]["values"])  # one agent: no team score (JSON null)
    assert all(v is not None for v in rows["cory", "mean"]["train"]["collective_reward"]["values"])
    compared = [(c["algo"], c["learner"]) for c in report["comparisons"]]
    assert compared == [("cory", "llm_0"), ("cory", "llm_1"), ("cory", "mean")]
    for c in report["comparisons"]:
        assert c["baseline"] == {"algo": "ppo", "learner": "pioneer"}
        cory = rows[c["algo"], c["learner"]]
        for part in ("train", "eval"):
            # No collective reward against PPO: one agent alone has none (a team's would be twice its reward).
            assert set(c[part]) == {"task_reward_mean", "kl", "combined_reward"}
            for m, test in c[part].items():
                a, b = cory[part][m]["values"], ppo[part][m]["values"]
                assert test["difference"] == pytest.approx(sum(a) / 2 - sum(b) / 2)
                if test["p_value"] is None:  # both algorithms constant over seeds: nothing to test
                    assert len(set(a)) == 1 and len(set(b)) == 1, (c["learner"], part, m)
                    continue
                expected = stats.ttest_ind(a, b, equal_var=False)
                assert (test["t"], test["p_value"]) == pytest.approx((expected.statistic, expected.pvalue))
                assert test["ci_low"] < test["difference"] < test["ci_high"]
            assert c[part]["kl"]["p_value"] is not None  # the KL always differs between seeds
    md = (out / "report.md").read_text()
    assert "Welch's t-test" in md and md.count("| cory | llm_0   | ppo pioneer") == 2  # training and evaluation
    kl = report["comparisons"][0]["eval"]["kl"]
    assert f"{kl['difference']:.3f} [{kl['ci_low']:.3f}, {kl['ci_high']:.3f}], p " in md


def test_report_reward_rise(benchmark):
    _, out, _, _ = benchmark
    report = json.loads((out / "report.json").read_text())
    # 2 iterations: k = 1, the last iteration against the first; B = --batch-size 4 per learner.
    metrics = pd.read_csv(out / "ppo" / "seed0" / "metrics.csv")
    m0, m1 = metrics["pioneer/task_reward_mean"]
    s0, s1 = metrics["pioneer/task_reward_std"]
    rise = report["runs"]["ppo/seed0"]["reward_rise"]["pioneer"]
    assert rise["difference"] == pytest.approx(m1 - m0)
    assert rise["se"] == pytest.approx(math.sqrt((s0**2 + s1**2) / 4))
    if rise["se"] > 0:
        assert rise["z"] == pytest.approx((m1 - m0) / rise["se"])
    # CORY's mean of learners: the mean curve, variance (s_0^2 + s_1^2) / (4 B) per iteration
    cory = pd.read_csv(out / "cory" / "seed1" / "metrics.csv")
    mean = (cory["llm_0/task_reward_mean"] + cory["llm_1/task_reward_mean"]) / 2
    var = (cory["llm_0/task_reward_std"] ** 2 + cory["llm_1/task_reward_std"] ** 2) / (4 * 4)
    rise = report["runs"]["cory/seed1"]["reward_rise"]["mean"]
    assert rise["difference"] == pytest.approx(mean[1] - mean[0])
    assert rise["se"] == pytest.approx(math.sqrt(var[0] + var[1]))
    for row in report["summary"]:
        per_seed = [report["runs"][f"{row['algo']}/seed{s}"]["reward_rise"][row["learner"]]["z"] for s in (0, 1)]
        assert row["reward_rise"]["k"] == 1
        assert row["reward_rise"]["z"]["values"] == [None if z is None else pytest.approx(z) for z in per_seed]
    assert "reward rise z" in (out / "report.md").read_text()


def test_kl_vs_reward_plot_takes_metrics_frames(tmp_path):
    ppo = pd.DataFrame(
        {
            "iteration": [0, 1, 1, 2],
            "pioneer/kl": [0.0, 0.5, 0.6, 1.0],
            "pioneer/task_reward_mean": [0.1, 0.2, 0.3, 0.4],
        }
    )  # iteration 1 logged twice
    cory = pd.DataFrame(
        {
            "iteration": [0, 1],
            "llm_0/kl": [0.0, 0.2],
            "llm_0/task_reward_mean": [0.1, 0.3],
            "llm_1/kl": [0.0, 0.4],
            "llm_1/task_reward_mean": [0.1, 0.2],
        }
    )
    no_kl = pd.DataFrame({"iteration": [0], "tokens_per_s": [9.0]})  # nothing to draw: skipped
    path = plot_kl_vs_reward({"PPO": [ppo, ppo], "CORY": [cory], "other": [no_kl]}, tmp_path / "a" / "kl.png")
    assert path == tmp_path / "a" / "kl.png" and path.read_bytes()[:8] == PNG_MAGIC


def test_refuses_to_mix_or_shorten_benchmarks(benchmark):
    model, out, _, before = benchmark
    with pytest.raises(FileExistsError, match="--resume.*--overwrite"):
        main(toy_args(model, out, "--seeds", "2", "--iterations", "2"))
    with pytest.raises(ValueError, match=re.escape(f"--kl-coef {TrainConfig().kl_coef!r} -> 0.1")):
        main(toy_args(model, out, "--seeds", "2", "--iterations", "2", "--kl-coef", "0.1", "--resume"))
    with pytest.raises(ValueError, match="would shorten them"):
        main(toy_args(model, out, "--seeds", "2", "--iterations", "1", "--resume"))
    assert mtimes(out) == before


def test_overwrite_deletes_the_runs_of_the_benchmark_it_replaces(tmp_path):
    from cory_agents.evaluation.reward_benchmark import BenchmarkConfig, _prepare, _settings

    out = tmp_path / "bench"
    before = BenchmarkConfig(out=str(out), algos=["cory", "cory:happo"])
    _prepare(out, TrainConfig(report_to="none"), before)
    for arm in ("cory", "cory-happo"):  # what a run writes (its settings say it is a run: ownership)
        (out / arm / "seed0").mkdir(parents=True)
        (out / arm / "seed0" / "config.json").write_text(json.dumps(dataclasses.asdict(TrainConfig())))
        (out / arm / "seed0" / "metrics.csv").write_text("iteration\n0\n")
    (out / "notes").mkdir()  # not a run: left alone
    after = BenchmarkConfig(out=str(out), algos=["ppo", "cory:difference"], overwrite=True)
    _prepare(out, TrainConfig(report_to="none"), after)
    assert sorted(p.name for p in out.iterdir()) == ["benchmark.json", "notes"]
    assert json.loads((out / "benchmark.json").read_text()) == json.loads(
        json.dumps(_settings(TrainConfig(report_to="none"), after))
    )
    (out / "benchmark.json").write_text("{}")  # not a benchmark's settings: overwritten all the same
    _prepare(out, TrainConfig(report_to="none"), after)
    assert json.loads((out / "benchmark.json").read_text())["benchmark"]["algos"] == after.algos


def test_bad_flags_are_explained(tmp_path):
    with pytest.raises(ValueError, match="cannot import the module 'no_such_module'"):
        main(["--reward", "no_such_module:score", "--out", str(tmp_path / "b"), "--progress", "false"])
    assert not (tmp_path / "b").exists()  # nothing written: the corrected command starts afresh
    with pytest.raises(UsageError, match="choose among cory, ppo"):  # cory-bench prints it in one line, exit 2
        main(["--algos", "ppo", "grpo", "--out", str(tmp_path / "c")])


def test_learners_are_compared_against_the_first_entry(tmp_path, toy_model):
    model = toy_model
    out = tmp_path / "marl"
    arms = ["cory", "cory:happo", "cory:difference"]
    main(toy_args(model, out, "--seeds", "2", "--iterations", "2", "--algos", *arms))
    for folder, learner in (("cory", "ppo"), ("cory-happo", "happo"), ("cory-difference", "difference")):
        for seed in (0, 1):
            assert json.loads((out / folder / f"seed{seed}" / "config.json").read_text())["learner"] == learner
    assert "llm_0/happo_factor_mean" in pd.read_csv(out / "cory-happo" / "seed0" / "metrics.csv")
    # Paired seeds: a seed gives every entry the same prompts and the same first answers (the models start alike).
    first = {
        (folder, seed): [(r["learner"], r["context"], r["response"]) for r in samples(out / folder / f"seed{seed}", 0)]
        for folder in ("cory", "cory-happo", "cory-difference")
        for seed in (0, 1)
    }
    assert first[("cory", 0)] and first[("cory", 0)] == first[("cory-happo", 0)] == first[("cory-difference", 0)]
    assert first[("cory", 1)] == first[("cory-happo", 1)] != first[("cory", 0)]
    report = json.loads((out / "report.json").read_text())
    assert report["baseline"] == "cory"
    compared = {(c["algo"], c["learner"]): c["baseline"] for c in report["comparisons"]}
    assert compared[("cory:happo", "mean")] == {"algo": "cory", "learner": "mean"}
    assert sorted(compared) == sorted((a, n) for a in arms[1:] for n in ("llm_0", "llm_1", "mean"))
    # Each test by hand: Welch's t-test of the two rows' values over seeds.
    rows = {(r["algo"], r["learner"]): r for r in report["summary"]}
    mine, base = rows[("cory:difference", "llm_0")], rows[("cory", "mean")]
    test = next(c for c in report["comparisons"] if c["algo"] == "cory:difference" and c["learner"] == "llm_0")
    a, b = mine["train"]["kl"]["values"], base["train"]["kl"]["values"]
    assert test["train"]["kl"]["p_value"] == pytest.approx(stats.ttest_ind(a, b, equal_var=False).pvalue)
    seconds = report["seconds_per_iteration"]
    assert sorted(seconds) == sorted(arms) and all(s["mean"] > 0 for s in seconds.values())
    text = (out / "report.md").read_text()
    assert "Against CORY" in text and "CORY:HAPPO" in text and "x CORY's" in text
    with pytest.raises(UsageError, match="names an algorithm twice"):
        main(toy_args(model, out, "--algos", "cory", "cory"))
    with pytest.raises(UsageError, match="--learner 'nope' is not a learner: choose one of ppo"):
        main(toy_args(model, out, "--algos", "cory:nope"))
    # An entry whose settings cannot work fails before any run, not after the baseline's.
    late = tmp_path / "late"
    with pytest.raises(UsageError, match="team learner 'happo'"):
        main(toy_args(model, late, "--algos", "cory", "cory:happo", "--gradient-checkpointing-observer"))
    assert not late.exists()


def test_help_lists_training_and_benchmark_flags(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0
    text = capsys.readouterr().out
    for flag in ("--reward", "--seeds", "--iterations", "--batch-size", "--kl-coef", "--eval-prompts", "--resume"):
        assert flag in text, flag
    assert "--algo " not in text and "--algos" in text  # the benchmark sets each run's algo itself


def test_training_flags_come_in_cory_trains_sections_with_the_entries_learners(capsys):
    from cory_agents.evaluation.reward_benchmark import PER_RUN, build_parser, parse_args, training_sections
    from cory_agents.training.registry import available_learners

    # Every training flag but the per-run ones, once, whatever the learners.
    every = [f.name for s in training_sections(available_learners()) for f in dataclasses.fields(s)]
    assert sorted(every) == sorted(f.name for f in dataclasses.fields(TrainConfig) if f.name not in PER_RUN)
    # A learner's own flags reach the runs when an entry trains with it: --algos ALGO:LEARNER or --learner.
    train, _ = parse_args(["--algos", "ppo", "cory:grpo", "--group-size", "8"])
    assert train.group_size == 8
    assert parse_args(["--learner", "grpo", "--group_size=2"])[0].group_size == 2
    assert parse_args(["--algos", "cory", "cory:happo", "--happo-factor-clip", "2"])[0].happo_factor_clip == 2.0
    # ... and are refused, naming the learners that take them, when none does (cory-train refuses them too).
    with pytest.raises(
        UsageError, match=r"--group-size is a setting of --learner grpo, rloo, and no entry of --algos \(ppo cory\)"
    ):
        parse_args(["--group-size", "8"])
    with pytest.raises(UsageError, match="--happo-factor-clip is a setting of --learner happo.*add an entry that does"):
        parse_args(["--algos", "cory", "cory:difference", "--happo-factor-clip", "2"])
    with pytest.raises(SystemExit):
        parse_args(["--no-such-flag"])
    capsys.readouterr()
    # The help shows the sections, the shared learner settings once, then each entry's learner's own.
    text = build_parser(["ppo", "happo"]).format_help()
    titles = [line for line in text.splitlines() if line.startswith(("Task:", "Learner", "Speed"))]
    assert titles == [
        "Task: the prompts, the templates and the reward:",
        "Learner: the update of each agent:",
        "Learner ppo: PPO with a value head and GAE:",
        "Learner happo: sequential PPO updates, weighted by the earlier agents' change:",
        "Speed and memory: the same numbers, computed faster or in less memory:",
    ]
    assert "--group-size GROUP_SIZE" not in text and "--group-size GROUP_SIZE" in build_parser(["grpo"]).format_help()


def test_console_script_and_module_entry_points():
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    module, _, function = scripts["cory-bench"].partition(":")
    assert getattr(importlib.import_module(module), function) is main
    assert (
        'if __name__ == "__main__":\n    main()' in (ROOT / "agents" / "evaluation" / "reward_benchmark.py").read_text()
    )


def test_a_team_game_is_compared_on_the_teams_training_metrics(tmp_path, toy_model):
    """--task signal: no held-out evaluation (a model alone scores nothing); the report's training rows are the
    last --final-window iterations averaged, the collective reward the learners' task rewards summed."""
    out = tmp_path / "signal"
    game = ["--task", "signal", "--reward", "signal", "--prompt-source", "auto", "--context-length", "96"]
    args = toy_args(toy_model, out, *game, "--algos", "cory", "cory:mappo", "--seeds", "2", "--iterations", "3")
    main([*args, "--final-window", "2"])
    for run in out.glob("*/seed*"):  # no held-out evaluation: the team's communication measures instead
        measured = json.loads((run / "evaluation.json").read_text())
        assert measured["task"] == "signal" and measured["policy"]["iterations_trained"] == 3
        assert 0 <= measured["communication"]["success"] <= 1
    report = json.loads((out / "report.json").read_text())
    assert report["held_out"] is False and report["final_window"] == 2
    rows = {(r["algo"], r["learner"]): r for r in report["summary"]}
    for algo, folder in (("cory", "cory"), ("cory:mappo", "cory-mappo")):
        by_hand = []
        for seed in (0, 1):
            df = pd.read_csv(out / folder / f"seed{seed}" / "metrics.csv").tail(2)
            by_hand.append((df["llm_0/task_reward_mean"] + df["llm_1/task_reward_mean"]).mean())
        assert rows[(algo, "mean")]["train"]["collective_reward"]["values"] == pytest.approx(by_hand)
        assert rows[(algo, "mean")]["eval"] == {}
    test = next(c for c in report["comparisons"] if c["algo"] == "cory:mappo" and c["learner"] == "mean")
    assert "collective_reward" in test["train"] and test["eval"] == {}
    text = (out / "report.md").read_text()
    assert "Held-out evaluation: none" in text and "the last 2 iterations" in text and "collective reward" in text
    assert json.loads((out / "cory-mappo" / "seed1" / "trained.json").read_text()) == {"iterations_trained": 3}
    for run in out.glob("*/seed*"):  # finished runs' checkpoints may go (GBs each at full size)
        shutil.rmtree(run / "checkpoints")
    before = mtimes(out)
    main([*args, "--final-window", "2", "--resume"])  # finished: nothing trains again
    assert {k: v for k, v in mtimes(out).items() if k.endswith("metrics.csv")} == {
        k: v for k, v in before.items() if k.endswith("metrics.csv")
    }
    with pytest.raises(UsageError, match="have no checkpoint left"):  # longer would start again from 0: refused
        main([*args[:-1], "4", "--final-window", "2", "--resume"])


def test_delete_checkpoints_keeps_each_finished_runs_record_and_never_trains_it_again(tmp_path, toy_model):
    out = tmp_path / "lean"
    game = ["--task", "signal", "--reward", "signal", "--prompt-source", "auto", "--context-length", "96"]
    args = toy_args(
        toy_model, out, *game, "--algos", "cory", "--seeds", "1", "--iterations", "2", "--delete-checkpoints"
    )
    main(args)
    run = out / "cory" / "seed0"
    assert not (run / "checkpoints").exists()  # measured first: the communication needs the policies
    assert json.loads((run / "evaluation.json").read_text())["communication"]["conversations"] >= 1
    assert json.loads((run / "trained.json").read_text()) == {"iterations_trained": 2}
    before = mtimes(out)
    main([*args, "--resume"])
    assert mtimes(out) == before


def test_a_stopped_run_stops_the_benchmark_and_resumes(tmp_path, toy_model, monkeypatch):
    """A run that Ctrl-C or SIGTERM stopped (its checkpoint written) stops cory-bench with 128 + the signal: no later
    run starts, the stopped one is not marked trained; --resume continues it."""
    from cory_agents.evaluation import benchmark_runs

    class StoppedAfterOneIteration(benchmark_runs.Trainer):
        def train(self, progress: bool = True):
            self.config = dataclasses.replace(self.config, iterations=1)  # as if stopped after iteration 1
            out = super().train(progress)
            self.stopped_by = "SIGTERM"
            return out

    out = tmp_path / "signal"
    game = ["--task", "signal", "--reward", "signal", "--prompt-source", "auto", "--context-length", "96"]
    args = toy_args(toy_model, out, *game, "--algos", "cory", "cory:happo", "--seeds", "1", "--iterations", "2")
    monkeypatch.setattr(benchmark_runs, "Trainer", StoppedAfterOneIteration)
    with pytest.raises(SystemExit) as stopped:
        main(args)
    assert stopped.value.code == 128 + 15
    assert not (out / "cory" / "seed0" / "trained.json").exists() and not (out / "cory-happo").exists()
    monkeypatch.undo()
    main([*args, "--resume"])
    assert pd.read_csv(out / "cory" / "seed0" / "metrics.csv")["iteration"].tolist() == [0, 1]
    assert json.loads((out / "cory-happo" / "seed0" / "trained.json").read_text()) == {"iterations_trained": 2}


def test_a_game_of_two_refuses_the_single_agent_baseline(tmp_path):
    out = tmp_path / "b"
    with pytest.raises(UsageError, match=r"--algos ppo trains one alone: drop it from --algos \(e.g. --algos cory"):
        main(["--task", "signal", "--prompt-source", "auto", "--algos", "ppo", "cory", "--out", str(out)])
    assert not out.exists()
