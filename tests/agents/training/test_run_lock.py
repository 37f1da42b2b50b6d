"""One run per output folder: a second run, or a --resume, into a folder a live run holds fails at once."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest

from cory_agents.training import run_lock
from cory_agents.training.run_lock import LOCK_NAME, RunFolderInUseError, RunLock
from tests.support import ROOT
from tests.support.runs import cli, cli_env, toy_cli_args

HOLD = "import sys, time; from cory_agents.training.run_lock import RunLock; lock = RunLock(sys.argv[1]).acquire(); print('held', flush=True); time.sleep(120)"


def hold_in_another_process(folder):
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(folder)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    return holder


def test_a_folder_held_by_a_live_process_is_refused_naming_it(tmp_path):
    holder = hold_in_another_process(tmp_path)
    try:
        with pytest.raises(RunFolderInUseError) as refused:
            RunLock(tmp_path).acquire()
        message = str(refused.value)
        assert str(tmp_path) in message and f"process {holder.pid} on " in message and f"kill {holder.pid}" in message
        with pytest.raises(RunFolderInUseError):
            RunLock(tmp_path).check_free()
    finally:
        holder.kill()
        holder.wait()


def test_a_killed_holder_leaves_no_lock_and_its_record_is_reported(tmp_path, caplog):
    holder = hold_in_another_process(tmp_path)
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    RunLock(tmp_path).check_free()  # the operating system released the lock
    with caplog.at_level(logging.WARNING, logger="cory_agents.training.run_lock"):
        with RunLock(tmp_path) as lock:
            assert lock.held and json.loads((tmp_path / LOCK_NAME).read_text())["pid"] == os.getpid()
    assert f"process {holder.pid} on" in caplog.text and "ended without releasing it" in caplog.text
    assert (tmp_path / LOCK_NAME).read_text() == ""  # released: no holder recorded
    with RunLock(tmp_path):  # and no warning for a lock released properly
        pass
    assert caplog.text.count("ended without releasing it") == 1


def test_the_lock_is_released_when_the_run_raises(tmp_path):
    with pytest.raises(ZeroDivisionError):
        with RunLock(tmp_path):
            raise ZeroDivisionError
    with RunLock(tmp_path) as again:
        assert again.held


#: Takes the folder's lock the way a run does but writes its record only after sys.argv[2] seconds (never if < 0).
HOLD_UNRECORDED = (
    "import fcntl, json, os, sys, time; from cory_agents.training.run_lock import LOCK_NAME; "
    "file = open(os.path.join(sys.argv[1], LOCK_NAME), 'a+'); fcntl.flock(file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB); "
    "print('held', flush=True); delay = float(sys.argv[2]); "
    "delay >= 0 and (time.sleep(delay), file.write(json.dumps({'pid': os.getpid(), 'host': 'h'})), file.flush()); "
    "time.sleep(120)"
)


@pytest.mark.skipif(sys.platform == "win32", reason="the holder takes the lock with flock")
@pytest.mark.parametrize("delay", [0.3, -1.0])
def test_a_run_refused_before_the_holder_wrote_its_record_waits_for_it(tmp_path, monkeypatch, delay):
    if delay >= 0:  # a wait that a slow holder's record cannot outlast; it returns as soon as the record is there
        monkeypatch.setattr(run_lock, "RECORD_WAIT", 60.0)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_UNRECORDED, str(tmp_path), str(delay)], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(RunFolderInUseError) as refused:
            RunLock(tmp_path).acquire()
        if delay >= 0:  # the record came within the wait: the refusal names the holder
            assert f"process {holder.pid} on h" in str(refused.value) and f"kill {holder.pid}" in str(refused.value)
        else:  # it never came: the refusal says so instead of naming a process
            assert "a process that has not yet written its record" in str(refused.value)
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()


@pytest.mark.ci
def test_two_runs_started_together_into_one_folder_one_is_refused(toy_model, tmp_path):
    out, gate = tmp_path / "run", tmp_path / "gate"
    args = cli(
        *toy_cli_args(
            toy_model, out, "--algo", "ppo", "--iterations", "3", "--reward", "tests.support.toy:gated_fraction_good"
        )
    )
    # The run that takes the folder waits in its first reward call until the other has ended.
    environment = cli_env() | {"TOY_REWARD_GATE": str(gate), "OMP_NUM_THREADS": "1"}
    logs = [(tmp_path / f"stderr-{i}").open("w+") for i in range(2)]
    runs = [
        subprocess.Popen(args, env=environment, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=log, text=True)
        for log in logs
    ]
    deadline = time.monotonic() + 300
    while all(run.poll() is None for run in runs) and time.monotonic() < deadline:
        time.sleep(0.05)
    gate.touch()
    codes = [run.wait(timeout=300) for run in runs]
    stderrs = []
    for log in logs:
        log.seek(0)
        stderrs.append(log.read())
        log.close()
    assert sorted(codes) == [0, 1], [text[-2000:] for text in stderrs]
    winner, lost = runs[codes.index(0)].pid, stderrs[codes.index(1)]
    assert f"{out} is in use by another run: process {winner} on" in lost and "Traceback" not in lost
    assert pd.read_csv(out / "metrics.csv")["iteration"].tolist() == [0, 1, 2]  # the winner's rows, once


def test_a_resume_of_a_folder_a_live_run_holds_is_refused_before_loading_models(toy_model, tmp_path):
    holder = hold_in_another_process(tmp_path)
    try:
        result = subprocess.run(
            cli(*toy_cli_args(toy_model, tmp_path, "--resume", "true", "--iterations", "2")),
            env=cli_env(),
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert result.returncode == 1, result.stderr[-2000:]
        assert f"{tmp_path} is in use by another run: process {holder.pid}" in result.stderr
        assert not (tmp_path / "metrics.csv").exists()
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.parametrize("variable", ["RANK", "PMI_RANK", "OMPI_COMM_WORLD_RANK", "MV2_COMM_WORLD_RANK"])
def test_only_the_launchs_first_process_probes_the_lock(monkeypatch, variable):
    """torchrun/accelerate set RANK, mpirun (accelerate's CPU launcher) its own variables: every
    launcher's rank is read, so two processes of one run never probe the lock together."""
    from cory_agents.distributed.data_parallel import process_rank

    for name in ("RANK", "PMI_RANK", "OMPI_COMM_WORLD_RANK", "MV2_COMM_WORLD_RANK"):
        monkeypatch.delenv(name, raising=False)
    assert process_rank() == 0
    monkeypatch.setenv(variable, "3")
    assert process_rank() == 3
