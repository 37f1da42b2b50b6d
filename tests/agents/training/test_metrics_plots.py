"""MetricsLogger (CSV, samples, resume, TensorBoard) and the plots, on real files in tmp_path."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from cory_agents.training.metrics import MetricsLogger, read_metrics
from cory_agents.training.plots import plot_comparison, plot_run
from tests.support import ROOT

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def fake_metrics(iteration: int, seed: int = 0, learners: tuple[str, ...] = ("llm_0", "llm_1")) -> dict[str, float]:
    """Curves shaped like the paper's: reward rises, KL grows, combined = reward - 0.1 * KL."""
    metrics: dict[str, float] = {}
    for i, learner in enumerate(learners):
        reward = 0.1 * iteration + 0.05 * i + 0.01 * seed
        kl = 0.3 * iteration + 0.1 * i
        metrics |= {
            f"{learner}/task_reward_mean": reward,
            f"{learner}/task_reward_std": 0.2,
            f"{learner}/kl": kl,
            f"{learner}/combined_reward": reward - 0.1 * kl,
            f"{learner}/role": float((iteration // 5 + i) % 2),
        }
    metrics["tokens_per_s"] = 800.0 + iteration
    return metrics


def write_run(out_dir: Path, n: int = 5, seed: int = 0, learners: tuple[str, ...] = ("llm_0", "llm_1")) -> Path:
    with MetricsLogger(out_dir, report_to="none") as logger:
        for it in range(n):
            logger.log(it, fake_metrics(it, seed, learners))
    return out_dir


def sample(role: str) -> dict:
    return {"learner": "llm_0", "role": role, "query": "q", "response": "r", "reward": 1.0}


def assert_png(path: Path) -> None:
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC, path
    assert len(data) > 1024, path


def test_logged_rows_read_back_exactly(tmp_path):
    logged = [fake_metrics(it) for it in range(5)]
    with MetricsLogger(tmp_path, report_to="none") as logger:
        for it, metrics in enumerate(logged):
            logger.log(it, metrics)
        # the row is on disk before close(): a killed run keeps it
        assert len(read_metrics(tmp_path)) == 5

    df = read_metrics(tmp_path / "metrics.csv")
    assert list(df.columns) == ["iteration", *logged[0]]  # the first row fixes the order
    assert df["iteration"].tolist() == [0, 1, 2, 3, 4]
    for it, metrics in enumerate(logged):
        for key, value in metrics.items():
            assert df.loc[it, key] == value, (it, key)  # repr round-trips floats exactly


def test_numpy_and_torch_scalars_are_logged_as_floats(tmp_path):
    with MetricsLogger(tmp_path, report_to="none") as logger:
        logger.log(0, {"llm_0/kl": np.float32(0.5), "llm_0/task_reward_mean": torch.tensor(0.25), "llm_0/role": 1})
    row = read_metrics(tmp_path).iloc[0]
    assert (row["llm_0/kl"], row["llm_0/task_reward_mean"], row["llm_0/role"]) == (0.5, 0.25, 1.0)


def test_new_key_later_widens_the_file(tmp_path):
    with MetricsLogger(tmp_path, report_to="none") as logger:
        for it in range(5):
            metrics = {"llm_0/kl": float(it)}
            if it >= 3:
                metrics["llm_0/entropy"] = 10.0 + it
            if it == 4:
                metrics["seconds"] = 1.5
            logger.log(it, metrics)

    df = read_metrics(tmp_path)
    assert list(df.columns) == ["iteration", "llm_0/kl", "llm_0/entropy", "seconds"]
    assert df["llm_0/kl"].tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert df["llm_0/entropy"].iloc[:3].isna().all()
    assert df["llm_0/entropy"].iloc[3:].tolist() == [13.0, 14.0]
    assert df["seconds"].iloc[:4].isna().all() and df["seconds"].iloc[4] == 1.5
    assert not list(tmp_path.glob("*.tmp"))


def test_missing_key_leaves_an_empty_cell(tmp_path):
    with MetricsLogger(tmp_path, report_to="none") as logger:
        logger.log(0, {"a/x": 1.0, "b/x": 2.0})
        logger.log(1, {"b/x": 3.0})
    df = read_metrics(tmp_path)
    assert math.isnan(df.loc[1, "a/x"]) and df.loc[1, "b/x"] == 3.0


def test_resume_truncates_rows_after_the_checkpoint(tmp_path):
    with MetricsLogger(tmp_path, report_to="none") as logger:
        for it in range(5):
            logger.log(it, fake_metrics(it))
            logger.log_samples(it, [sample("pioneer")])

    # crash after the checkpoint at iteration 2: iterations 3 and 4 are run again
    with MetricsLogger(tmp_path, report_to="none", resume=True) as logger:
        logger.truncate(after_iteration=2)
        assert read_metrics(tmp_path)["iteration"].tolist() == [0, 1, 2]
        for it in (3, 4):
            logger.log(it, fake_metrics(it) | {"llm_0/entropy": 1.0})
            logger.log_samples(it, [sample("observer")])

    df = read_metrics(tmp_path)
    assert df["iteration"].tolist() == [0, 1, 2, 3, 4]
    assert df["llm_0/entropy"].isna().tolist() == [True, True, True, False, False]
    samples = [json.loads(line) for line in (tmp_path / "samples.jsonl").read_text().splitlines()]
    assert [s["iteration"] for s in samples] == [0, 1, 2, 3, 4]
    assert [s["role"] for s in samples] == ["pioneer"] * 3 + ["observer"] * 2


def test_resume_drops_a_row_cut_short_by_a_crash(tmp_path):
    write_run(tmp_path, n=3)
    with open(tmp_path / "metrics.csv", "a") as f:
        f.write("3,0.1")  # killed mid-write: no newline
    with MetricsLogger(tmp_path, report_to="none", resume=True) as logger:
        logger.log(3, fake_metrics(3))
    assert read_metrics(tmp_path)["iteration"].tolist() == [0, 1, 2, 3]


def test_without_resume_an_old_run_is_replaced(tmp_path):
    write_run(tmp_path, n=5)
    write_run(tmp_path, n=2)
    assert read_metrics(tmp_path)["iteration"].tolist() == [0, 1]


def test_samples_jsonl_lines_parse(tmp_path):
    records = [
        {"learner": "llm_0", "role": "pioneer", "query": 'a "quoted"\nreview', "response": "great film", "reward": 0.8},
        {"learner": "llm_1", "role": "observer", "query": "é ✓", "response": "", "reward": np.float64(-0.5)},
    ]
    with MetricsLogger(tmp_path, report_to="none") as logger:
        logger.log_samples(7, records)
        logger.log_samples(8, records[:1])
    lines = (tmp_path / "samples.jsonl").read_text(encoding="utf-8").splitlines()
    parsed = [json.loads(line) for line in lines]
    assert len(parsed) == 3
    assert parsed[0] == {"iteration": 7, **records[0]}
    assert parsed[1]["reward"] == -0.5 and parsed[1]["query"] == "é ✓"
    assert parsed[2]["iteration"] == 8


def test_iteration_is_not_a_metric_key(tmp_path):
    with MetricsLogger(tmp_path, report_to="none") as logger, pytest.raises(ValueError):
        logger.log(0, {"iteration": 1.0})


def test_tensorboard_events_file(tmp_path):
    pytest.importorskip("tensorboard")
    with MetricsLogger(tmp_path, report_to="tensorboard") as logger:
        for it in range(3):
            logger.log(it, fake_metrics(it))
    events = list(tmp_path.glob("events.out.tfevents.*"))
    assert events and events[0].stat().st_size > 0

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(tmp_path))
    acc.Reload()
    tags = acc.Tags()["scalars"]
    assert "llm_1/kl" in tags and "charts/tokens_per_s" in tags
    assert [e.step for e in acc.Scalars("llm_0/task_reward_mean")] == [0, 1, 2]

    # resumed from a checkpoint after iteration 0: TensorBoard hides the old steps 1 and 2
    with MetricsLogger(tmp_path, report_to="tensorboard", resume=True) as logger:
        logger.truncate(after_iteration=0)
        for it in (1, 2, 3):
            logger.log(it, {"llm_0/task_reward_mean": 100.0 + it})
    acc = EventAccumulator(str(tmp_path))
    acc.Reload()
    scalars = acc.Scalars("llm_0/task_reward_mean")
    assert [e.step for e in scalars] == [0, 1, 2, 3]
    assert [e.value for e in scalars][1:] == [101.0, 102.0, 103.0]


def test_plot_run_writes_three_pngs(tmp_path):
    write_run(tmp_path, n=6)
    paths = plot_run(tmp_path)
    assert sorted(p.name for p in paths) == ["combined_reward.png", "kl.png", "task_reward.png"]
    for path in paths:
        assert path.parent == tmp_path
        assert_png(path)


def test_plot_run_single_learner(tmp_path):
    write_run(tmp_path, n=4, learners=("llm_0",))
    assert len(plot_run(tmp_path)) == 3


@pytest.fixture
def comparison_runs(tmp_path) -> dict[str, list[Path]]:
    return {
        "PPO": [write_run(tmp_path / f"ppo_s{s}", n=6, seed=s, learners=("llm_0",)) for s in range(2)],
        "CORY": [write_run(tmp_path / f"cory_s{s}", n=6, seed=s) for s in range(2)],
    }


def test_plot_comparison(tmp_path, comparison_runs):
    out = plot_comparison(comparison_runs, tmp_path / "figs" / "comparison.png")
    assert out == tmp_path / "figs" / "comparison.png"
    assert_png(out)


def test_plot_runs_cli(tmp_path, comparison_runs):
    ppo, cory = comparison_runs["PPO"], comparison_runs["CORY"]
    out = tmp_path / "cli.png"
    cmd = [
        sys.executable,
        "examples/plot_runs.py",
        "--run",
        "PPO=" + ",".join(map(str, ppo)),
        "--run",
        "CORY=" + ",".join(map(str, cory)),
        "--out",
        str(out),
        "--per-run",
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MPLBACKEND": "Agg"}
    result = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert_png(out)
    assert_png(cory[0] / "kl.png")

    bad = subprocess.run(
        [sys.executable, "examples/plot_runs.py", "--run", f"X={tmp_path / 'nope'}"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2 and "no metrics.csv" in bad.stderr
