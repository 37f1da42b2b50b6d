"""A stop at any moment ends cleanly: exit 130 (SIGINT) or 143 (SIGTERM), one line, the last checkpoint and the
last export whole; a write that fails (a full disk) is one line too (cory_agents.cli.errors, .training.trainer)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest
from transformers import AutoModelForCausalLM

from cory_agents.cli.errors import one_line_errors
from cory_agents.training import checkpoint as checkpoint_module
from cory_agents.training.checkpoint import list_checkpoints, load_checkpoint, save_checkpoint
from cory_agents.training.export import save_policies
from cory_agents.training.metrics import MetricsLogger, RunWriteError
from tests.support import ROOT
from tests.support.runs import cli, cli_env, toy_cli_args
from tests.support.toy import toy_tokenizer


@pytest.mark.parametrize("signum", [signal.SIGTERM, pytest.param(signal.SIGINT, marks=pytest.mark.ci)])
def test_a_stop_during_the_first_reward_call_is_one_line_and_loses_nothing(toy_model, tmp_path, signum):
    out = tmp_path / "run"
    args = cli(
        *toy_cli_args(toy_model, out, "--algo", "ppo", "--iterations", "2", "--checkpoint-every", "1"),
        *("--reward-timeout", "0", "--reward", "tests.support.toy:hanging_fraction_good"),
    )
    hanging = tmp_path / "hanging"
    env = cli_env() | {"TOY_REWARD_HANG_AFTER": "0", "TOY_REWARD_HANG_MARK": str(hanging)}
    with open(tmp_path / "stderr", "w") as stderr_file:
        stopped = subprocess.Popen(args, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=stderr_file)
        deadline = time.monotonic() + 240
        while not hanging.exists() and time.monotonic() < deadline:  # the first call of the reward has begun
            assert stopped.poll() is None, (tmp_path / "stderr").read_text()[-2000:]
            time.sleep(0.1)
        stopped.send_signal(signum)
        stopped.wait(timeout=60)
    stderr = (tmp_path / "stderr").read_text()
    assert stopped.returncode == 128 + signum, stderr[-2000:]
    assert "Traceback" not in stderr and "no checkpoint was written yet" in stderr
    assert list_checkpoints(out) == [] and not list(out.glob("*.png"))  # no plot drawn from an empty metrics.csv
    # The same command with a reward that answers and --resume starts at iteration 0 and runs whole.
    subprocess.run([*args, "--resume", "true"], env=cli_env(), cwd=ROOT, check=True, capture_output=True, timeout=300)
    assert pd.read_csv(out / "metrics.csv")["iteration"].tolist() == [0, 1]


@one_line_errors
def _terminated(args: list[str]) -> None:
    os.kill(os.getpid(), signal.SIGTERM)  # as a scheduler ends a job (outside cory-train's loop: at once)
    time.sleep(5)
    raise AssertionError("SIGTERM did not stop the command")


def test_sigterm_outside_the_training_loop_is_one_line_and_exit_status_143(run):
    previous = signal.getsignal(signal.SIGTERM)
    assert run(_terminated, "prog", []) == (143, "prog: stopped by SIGTERM\n")
    assert signal.getsignal(signal.SIGTERM) is previous  # the handler before comes back


def test_a_stop_during_a_checkpoint_write_keeps_the_last_checkpoint(tmp_path, monkeypatch):
    save_checkpoint(tmp_path, 0, {"iteration": 1, "weights": {"w": pytest.importorskip("torch").ones(4)}})
    before = list_checkpoints(tmp_path)[0].read_bytes()

    def write_then_stop(tensors, path, metadata=None):
        Path(path).write_bytes(b"half a checkpoint")
        raise KeyboardInterrupt  # the second Ctrl-C, in the middle of the write

    monkeypatch.setattr(checkpoint_module, "save_file", write_then_stop)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(tmp_path, 1, {"iteration": 2, "weights": {"w": pytest.importorskip("torch").zeros(4)}})
    assert [p.name for p in (tmp_path / "checkpoints").iterdir()] == ["iter_000000.safetensors"]  # no .tmp- left
    assert list_checkpoints(tmp_path)[0].read_bytes() == before
    assert load_checkpoint(list_checkpoints(tmp_path)[0])["iteration"] == 1


def test_a_stop_during_an_export_keeps_the_last_export(toy_model, tmp_path):
    model, tokenizer = AutoModelForCausalLM.from_pretrained(toy_model), toy_tokenizer()
    save_policies({"llm_0": model}, {"llm_0": tokenizer}, tmp_path)
    before = {p.relative_to(tmp_path): p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    save = model.save_pretrained

    def save_then_stop(folder, **kwargs):
        save(folder, **kwargs)
        raise KeyboardInterrupt  # after the weights, before the tokenizer and the swap

    model.save_pretrained = save_then_stop
    with pytest.raises(KeyboardInterrupt):
        save_policies({"llm_0": model}, {"llm_0": tokenizer}, tmp_path)
    assert {p.relative_to(tmp_path): p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full (a device every write to fails: ENOSPC)")
@pytest.mark.parametrize("what", ["metrics", "samples"])
def test_a_metrics_or_samples_write_on_a_full_disk_is_one_error(tmp_path, what):
    records = MetricsLogger(tmp_path, report_to="none")
    attribute = "_csv" if what == "metrics" else "_samples"
    getattr(records, attribute).close()
    setattr(records, attribute, open("/dev/full", "a"))  # what a full disk answers a write
    with pytest.raises(RunWriteError) as failed:
        if what == "metrics":
            records.log(0, {"reward": 1.0})
        else:
            records.log_samples(0, [{"query": "q", "response": "r"} for _ in range(2000)])
    message = str(failed.value)
    path = tmp_path / ("metrics.csv" if what == "metrics" else "samples.jsonl")
    assert message.startswith(f"could not write {path}: No space left on device")
    assert "No earlier checkpoint exists" in message and "\n" not in message
