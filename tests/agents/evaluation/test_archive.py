"""A benchmark's record (agents/evaluation/archive.py): archived without checkpoints, its report regenerated from the
archive alone, the commits its runs were made with, and its runs exported for marl-eval (read by marl-eval itself)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from marl_eval.utils.data_processing_utils import create_matrices_for_rliable, data_process_pipeline
from marl_eval.utils.diagnose_data_errors import DiagnoseData

from cory_agents.evaluation.archive import MARL_EVAL_FILE, RECORD
from cory_agents.evaluation.reward_benchmark import main
from cory_agents.training.metrics import read_metrics
from cory_agents.training.provenance import PROVENANCE_FILE, code_version
from cory_env.errors import UsageError
from tests.support.runs import toy_bench_args

ARMS = ("cory", "cory:happo")


@pytest.fixture(scope="module")
def bench(tmp_path_factory, toy_model):
    out = tmp_path_factory.mktemp("record") / "bench"
    main(toy_bench_args(toy_model, out, "--algos", *ARMS, "--seeds", "2", "--iterations", "2"))
    return out


def comparable(report: dict) -> dict:
    return {k: report[k] for k in ("summary", "comparisons", "runs", "seconds_per_iteration", "commits", "algos")}


def test_every_run_records_the_code_that_trained_it(bench):
    for run in bench.glob("*/seed*"):
        (session,) = json.loads((run / PROVENANCE_FILE).read_text())
        assert session["iteration"] == 0 and session["version"] == code_version()["version"]
        assert session["commit"] == code_version()["commit"]  # the checkout's (None outside one)


def test_the_archive_holds_the_record_without_checkpoints_and_reports_from_it_alone(bench, tmp_path):
    dest = tmp_path / "archive"
    main(["--out", str(bench), "--archive", str(dest)])
    for run in bench.glob("*/seed*"):
        copy = dest / run.relative_to(bench)
        assert sorted(p.name for p in copy.iterdir()) == sorted(n for n in RECORD if (run / n).exists())
        assert (copy / "samples.jsonl").read_bytes() == (run / "samples.jsonl").read_bytes()
    assert not list(dest.rglob("checkpoints")) and (dest / "benchmark.json").is_file()
    original = json.loads((bench / "report.json").read_text())
    archived = json.loads((dest / "report.json").read_text())
    assert comparable(archived) == comparable(original)  # the same numbers, from the copies alone
    # Regenerated there again, by one command, with nothing else: the same report.
    shutil.rmtree(bench.parent / "moved", ignore_errors=True)
    bench.rename(bench.parent / "moved")  # the benchmark's own folder is gone
    try:
        (dest / "report.json").unlink()
        (dest / "report.md").unlink()
        main(["--out", str(dest), "--report-only"])
        assert comparable(json.loads((dest / "report.json").read_text())) == comparable(original)
    finally:
        (bench.parent / "moved").rename(bench)
    commit = original["commits"]
    text = (dest / "report.md").read_text()
    if commit and code_version()["commit"]:
        assert f"Every run was made with the code of commit {commit[0]}." in text


def test_a_report_says_when_runs_were_made_with_different_code(bench, tmp_path):
    dest = tmp_path / "archive"
    main(["--out", str(bench), "--archive", str(dest)])
    path = dest / "cory-happo" / "seed1" / PROVENANCE_FILE
    sessions = json.loads(path.read_text())
    sessions.append({**sessions[0], "iteration": 1, "commit": "0123456789abcdef", "dirty": True})
    path.write_text(json.dumps(sessions))
    (dest / "cory" / "seed0" / PROVENANCE_FILE).unlink()  # a run made before provenance was kept
    main(["--out", str(dest), "--report-only"])
    report = json.loads((dest / "report.json").read_text())
    assert report["runs"]["cory:happo/seed1"]["commits"][-1] == "0123456+dirty"
    text = (dest / "report.md").read_text()
    assert "**The runs were made with different code**" in text
    assert "0123456+dirty (cory:happo/seed1)" in text and "not recorded (cory/seed0)" in text


def test_archiving_refuses_a_folder_of_other_files_and_one_inside_the_benchmark(bench, tmp_path):
    taken = tmp_path / "mine"
    taken.mkdir()
    (taken / "notes.txt").write_text("mine")
    with pytest.raises(UsageError, match=r"mine.*holds files and no archived benchmark"):
        main(["--out", str(bench), "--archive", str(taken)])
    assert sorted(p.name for p in taken.iterdir()) == ["notes.txt"]
    with pytest.raises(UsageError, match="inside the benchmark --out"):
        main(["--out", str(bench), "--archive", str(bench / "archive")])
    with pytest.raises(UsageError, match="cannot be read"):
        main(["--out", str(tmp_path / "nothing"), "--report-only"])
    plugin = tmp_path / "plugin"
    plugin.mkdir()
    saved = json.loads((bench / "benchmark.json").read_text())
    saved["benchmark"]["algos"] = ["cory", "cory:nosuch"]
    (plugin / "benchmark.json").write_text(json.dumps(saved))
    with pytest.raises(UsageError, match=r"runs of cory:nosuch, whose learner is not installed here: install"):
        main(["--out", str(plugin), "--report-only"])
    with pytest.raises(UsageError, match="--plan and --archive are different commands"):
        main(["--out", str(bench), "--plan", "--margin", "0.1", "--archive", str(taken)])


def test_the_marl_eval_export_is_read_by_marl_eval(bench, capsys):
    main(["--out", str(bench), "--export", "marl-eval"])
    data = json.loads((bench / MARL_EVAL_FILE).read_text())
    report = json.loads((bench / "report.json").read_text())
    runs = data["cory-env"][report["task"]]
    assert sorted(runs) == sorted(ARMS) and sorted(runs["cory"]) == ["seed0", "seed1"]
    steps = runs["cory:happo"]["seed1"]
    assert list(steps) == ["step_0", "step_1", "absolute_metrics"]
    df = read_metrics(bench / "cory-happo" / "seed1")
    rewards = df[["llm_0/task_reward_mean", "llm_1/task_reward_mean"]].to_numpy()
    batch = report["settings"]["train"]["batch_size"]
    for i in range(2):
        assert steps[f"step_{i}"]["step_count"] == (i + 1) * batch
        assert steps[f"step_{i}"]["task_reward"] == pytest.approx([rewards[i].mean()])
        assert steps[f"step_{i}"]["collective_reward"] == pytest.approx([rewards[i].sum()])
    held_out = report["runs"]["cory:happo/seed1"]["eval"]["mean"]
    assert steps["absolute_metrics"]["task_reward"] == pytest.approx([held_out["task_reward_mean"]])
    # marl-eval's own code: the format checks pass, its pipeline adds its means, its matrices come out.
    checks = DiagnoseData(json.loads((bench / MARL_EVAL_FILE).read_text())).check_data()
    assert all(all(v.values()) for v in checks.values()), checks
    processed = data_process_pipeline(data, metrics_to_normalize=["task_reward"])
    assert "extra" in processed, capsys.readouterr().out  # it returns its input unchanged on a format error
    assert processed["extra"]["number_of_runs"] == 2 and processed["extra"]["number_of_steps"] == 2
    assert processed["cory-env"][report["task"]]["cory"]["seed0"]["step_1"]["mean_task_reward"] == pytest.approx(
        data["cory-env"][report["task"]]["cory"]["seed0"]["step_1"]["task_reward"][0]
    )
    metrics, over_time = create_matrices_for_rliable(processed, "cory-env", ["task_reward"])
    assert np.asarray(metrics["mean_norm_task_reward"]["cory"]).shape == (2, 1)  # runs x tasks
