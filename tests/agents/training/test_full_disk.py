"""A write that finds no room, in each command that writes: one line naming the file and the room, exit status 1,
nothing half-written, the earlier file and the user's own files as they were (cory_env.write_failures).

A full disk cannot be made in a test; the file-size limit (``ulimit -f``) fails a write the same way, with EFBIG
instead of ENOSPC, so each command runs in a process of its own under a limit its files outgrow.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from cory_agents.cli import export as cory_export
from cory_agents.cli import train as cory_train
from cory_agents.training.metrics import METRICS_FILE, SAMPLES_FILE
from tests.support import ROOT
from tests.support.commands import console_script, the_error, toy_args, under_file_size_limit
from tests.support.user_files import THESIS, plant, tree

#: Above what a toy run writes before its checkpoint (its config, metrics and samples), below a checkpoint (500 KB)
#: and an exported model (77 KB).
LIMIT = 64 * 1024
#: Below a plot of a toy run (15 KB).
PLOT_LIMIT = 8 * 1024


def past_the_limit(message: str, path: Path, limit: str = "64 KiB") -> bool:
    return message.startswith(f"could not write {path}: File too large (the file-size limit, ulimit -f, is {limit}; ")


@pytest.fixture(scope="module")
def trained(toy_model, tmp_path_factory) -> Path:
    """A toy CORY run of one iteration: a checkpoint to export and evaluate."""
    out = tmp_path_factory.mktemp("run") / "cory"
    cory_train.main(toy_args(toy_model, out, "--algo", "cory"))
    return out


def test_cory_export_keeps_the_earlier_export_and_the_users_file(trained, tmp_path):
    out = tmp_path / "exported"
    plant(out / "thesis.txt")
    cory_export.main(["--checkpoint", str(trained), "--out", str(out)])  # an earlier export, with room
    before = tree(out)
    result = under_file_size_limit(
        LIMIT, console_script("cory-export"), "--checkpoint", str(trained), "--out", str(out)
    )
    assert result.returncode == 1, result.stderr[-3000:]
    message = the_error(result.stderr, "cory-export")
    assert past_the_limit(message, out / "llm_0"), message
    assert message.endswith("KiB to write); nothing was half-written: raise the limit, then run the command again")
    assert tree(out) == before and sorted(p.name for p in out.iterdir()) == ["llm_0", "llm_1", "thesis.txt"]


def test_cory_train_whose_checkpoint_outgrows_the_limit(toy_model, tmp_path):
    out = tmp_path / "run"
    thesis = plant(out / "checkpoints" / "thesis.txt")
    result = under_file_size_limit(LIMIT, console_script("cory-train"), *toy_args(toy_model, out))
    assert result.returncode == 1, result.stderr[-3000:]
    message = the_error(result.stderr, "cory-train")
    checkpoint = out / "checkpoints" / "iter_000000.safetensors"
    assert message.startswith(f"could not write the checkpoint {checkpoint}: File too large (the file-size limit, ")
    assert message.endswith("KiB to write). No earlier checkpoint exists: a rerun starts at iteration 0.")
    assert [p.name for p in checkpoint.parent.iterdir()] == ["thesis.txt"] and thesis.read_text() == THESIS


@pytest.mark.parametrize("name", [METRICS_FILE, pytest.param(SAMPLES_FILE, marks=pytest.mark.ci)])
def test_a_resume_whose_metrics_or_samples_outgrow_the_limit(toy_model, tmp_path, name):
    """A resume rewrites metrics.csv and samples.jsonl whole (without what the crash cut short): a long run's file,
    past the limit, is left as it was."""
    out = tmp_path / "run"
    cory_train.main(toy_args(toy_model, out))
    grown = out / name
    head, *rows = grown.read_text().splitlines(keepends=True)
    grown.write_text(head + "".join(rows) * (LIMIT // len("".join(rows)) + 1))  # as many rows as a long run's
    before, thesis = grown.read_bytes(), plant(out / "thesis.txt")
    result = under_file_size_limit(LIMIT, console_script("cory-train"), *toy_args(toy_model, out, "--resume"))
    assert result.returncode == 1, result.stderr[-3000:]
    message = the_error(result.stderr, "cory-train")
    assert past_the_limit(message, grown), message
    assert "iter_000000.safetensors (1 iterations done), is intact" in message and f"--resume (--out {out})" in message
    assert grown.read_bytes() == before and thesis.read_text() == THESIS and not list(out.glob("*.tmp"))


@pytest.mark.ci
def test_the_plots_at_the_end_of_a_run(toy_model, tmp_path):
    out = tmp_path / "run"
    cory_train.main(toy_args(toy_model, out))
    plot = out / "task_reward.png"
    before = plot.read_bytes()
    result = under_file_size_limit(PLOT_LIMIT, console_script("cory-train"), *toy_args(toy_model, out, "--resume"))
    assert result.returncode == 1, result.stderr[-3000:]
    message = the_error(result.stderr, "cory-train")
    assert past_the_limit(message, plot, "8 KiB"), message
    assert plot.read_bytes() == before and not list(out.glob("*.tmp"))


def test_plot_runs_keeps_the_earlier_figure(trained, tmp_path):
    figure = plant(tmp_path / "comparison.png")
    script = str(ROOT / "examples" / "plot_runs.py")
    result = under_file_size_limit(PLOT_LIMIT, sys.executable, script, "--run", f"CORY={trained}", "--out", str(figure))
    assert result.returncode == 1, result.stderr[-3000:]
    assert past_the_limit(the_error(result.stderr, "plot_runs.py"), figure, "8 KiB")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["comparison.png"] and figure.read_text() == THESIS


@pytest.mark.ci
def test_cory_eval_keeps_the_earlier_result(trained, tmp_path):
    earlier = plant(tmp_path / "evaluation.json")
    args = ["--checkpoint", str(trained), "--num-prompts", "2", "--samples-per-prompt", "1", "--out", str(earlier)]
    result = under_file_size_limit(1024, console_script("cory-eval"), *args, "--max-new-tokens", "3")
    assert result.returncode == 1, result.stderr[-3000:]
    assert past_the_limit(the_error(result.stderr, "cory-eval"), earlier, "1 KiB")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["evaluation.json"] and earlier.read_text() == THESIS
