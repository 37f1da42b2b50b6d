"""Checkpoint files: safe to load from anyone, written whole or not at all, damage found and survived."""

from __future__ import annotations

import logging
import os
import pickle
import resource
import shutil
import signal
import stat
import subprocess
import sys
import threading

import numpy as np
import pandas as pd
import pytest
import torch

from cory_agents.training.checkpoint import (
    CheckpointError,
    CheckpointSaveError,
    DamagedCheckpointError,
    UntrustedCheckpointError,
    checkpoint_iteration,
    convert_checkpoint,
    latest_checkpoint,
    list_checkpoints,
    load_checkpoint,
    load_latest,
    main,
    save_checkpoint,
)
from cory_agents.training.trainer import Trainer
from tests.support import DATA, ROOT
from tests.support.golden import assert_same_run
from tests.support.runs import PROMPTS, metrics_without_timing, toy_config
from tests.support.toy import fraction_good


def test_the_newest_checkpoint_replaces_the_older_one_with_plain_permissions(tmp_path):
    save_checkpoint(tmp_path, 0, {"iteration": 1, "w": torch.ones(3)})
    path = save_checkpoint(tmp_path, 1, {"iteration": 2, "w": torch.zeros(3)})
    assert list_checkpoints(tmp_path) == [path] and latest_checkpoint(tmp_path) == path
    assert path.name == "iter_000001.safetensors" and checkpoint_iteration(path) == 1
    assert load_checkpoint(path)["iteration"] == 2
    umask = os.umask(0)
    os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask


def test_a_failed_save_leaves_the_previous_checkpoint_and_no_partial_file(tmp_path, monkeypatch):
    first = save_checkpoint(tmp_path, 0, {"iteration": 1})
    with pytest.raises(CheckpointError, match=r"_thread.lock at /unpicklable.*never runs code"):
        save_checkpoint(tmp_path, 1, {"iteration": 2, "unpicklable": threading.Lock()})

    def disk_full(tensors, path, metadata):
        with open(path, "wb") as f:
            f.write(b"half a checkpoint")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("cory_agents.training.checkpoint.save_file", disk_full)
    with pytest.raises(CheckpointSaveError, match="No space left on device") as failed:
        save_checkpoint(tmp_path, 1, {"iteration": 2, "w": torch.ones(3)})
    assert isinstance(failed.value.__cause__, OSError)
    assert list_checkpoints(tmp_path) == [first]
    assert [p.name for p in first.parent.iterdir()] == [first.name]  # no temporary file left


def test_a_save_past_the_file_size_limit_says_what_to_do(tmp_path):
    """A real write that fails (the file-size limit: safetensors' 'File too large', as on a full disk)
    names the file, the cause, the intact checkpoint and the --resume to continue from it."""
    first = save_checkpoint(tmp_path, 3, {"iteration": 4, "w": torch.ones(4)})
    limit = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails, not kills
    resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, limit[1]))
    try:
        with pytest.raises(CheckpointSaveError) as failed:
            save_checkpoint(tmp_path, 4, {"iteration": 5, "w": torch.ones(100_000)})
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limit)
        signal.signal(signal.SIGXFSZ, previous)
    message = str(failed.value)
    assert str(tmp_path / "checkpoints" / "iter_000004.safetensors") in message
    assert "File too large (the file-size limit, ulimit -f, is 64 KiB; 391 KiB to write)" in message
    assert f"{first} (4 iterations done), is intact" in message
    assert f"--resume (--out {tmp_path})" in message
    assert list_checkpoints(tmp_path) == [first] and load_checkpoint(first)["iteration"] == 4
    assert [p.name for p in first.parent.iterdir()] == [first.name]


def test_a_failed_first_save_says_the_run_starts_over(tmp_path, monkeypatch):
    def no_permission(tensors, path, metadata):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr("cory_agents.training.checkpoint.save_file", no_permission)
    with pytest.raises(CheckpointSaveError, match="Permission denied.*No earlier checkpoint exists"):
        save_checkpoint(tmp_path, 0, {"iteration": 1})


def test_temporary_files_are_never_taken_for_checkpoints(tmp_path):
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / ".tmp-abc.safetensors").write_bytes(b"half written")
    (tmp_path / "checkpoints" / "iter_000003.safetensors.damaged").write_bytes(b"set aside")
    assert latest_checkpoint(tmp_path) is None


def test_every_kind_of_state_comes_back_exactly(tmp_path):
    tied = torch.randn(4, 3)
    whole = torch.arange(10.0)
    generator = np.random.Generator(np.random.PCG64(7))
    state = {
        "iteration": 3,
        "floats": [0.1, float("inf"), -0.0],
        "none": None,
        "flag": True,
        "tensors": {
            "bf16": torch.randn(5, dtype=torch.bfloat16),
            "bool": torch.tensor([True, False]),
            "scalar": torch.tensor(2.5),
            "empty": torch.zeros(0, 3),
            "int8": torch.tensor([-3], dtype=torch.int8),
            "strided": torch.randn(4, 6)[:, ::2],
        },
        "tied": [tied, tied],  # one tensor twice: tied weights
        "views": (whole[:4], whole[4:]),  # two views of one memory
        "optimizer": {"state": {0: {"step": torch.tensor(3.0)}, 7: {}}, "param_groups": [{"betas": (0.9, 0.999)}]},
        "rng": generator.bit_generator.state,  # 128-bit integers
        "torch_rng": torch.get_rng_state(),
        "moments": {
            "mean": np.float64(0.25),
            "count": np.int64(9),
            "array": np.arange(6, dtype=np.float32).reshape(2, 3),
        },
        "dtype": torch.float16,
        "__private": "a key that looks like a tag",
    }
    loaded = load_checkpoint(save_checkpoint(tmp_path, 3, state))
    assert loaded.keys() == state.keys()
    assert loaded["floats"] == [0.1, float("inf"), -0.0] and loaded["none"] is None and loaded["flag"] is True
    for name, t in state["tensors"].items():
        assert loaded["tensors"][name].dtype == t.dtype and torch.equal(loaded["tensors"][name], t), name
    assert loaded["tied"][0] is loaded["tied"][1] and torch.equal(loaded["tied"][0], tied)
    assert isinstance(loaded["views"], tuple) and torch.equal(torch.cat(loaded["views"]), whole)
    assert loaded["optimizer"]["state"].keys() == {0, 7} and loaded["optimizer"]["param_groups"][0]["betas"] == (
        0.9,
        0.999,
    )
    restored = np.random.Generator(np.random.PCG64())
    restored.bit_generator.state = loaded["rng"]
    assert restored.random() == generator.random()
    assert torch.equal(loaded["torch_rng"], state["torch_rng"])
    assert type(loaded["moments"]["mean"]) is np.float64 and loaded["moments"]["count"] == 9
    np.testing.assert_array_equal(loaded["moments"]["array"], state["moments"]["array"])
    assert loaded["dtype"] is torch.float16 and loaded["__private"] == state["__private"]


def test_an_optimizer_resumes_from_the_loaded_state(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    for _ in range(2):
        model(torch.randn(4, 3)).sum().backward()
        opt.step()
    loaded = load_checkpoint(save_checkpoint(tmp_path, 0, {"model": model.state_dict(), "opt": opt.state_dict()}))
    twin = torch.nn.Linear(3, 2)
    twin.load_state_dict(loaded["model"])
    twin_opt = torch.optim.AdamW(twin.parameters(), lr=0.1)
    twin_opt.load_state_dict(loaded["opt"])
    x = torch.randn(4, 3)
    for m, o in ((model, opt), (twin, twin_opt)):
        o.zero_grad()
        m(x).sum().backward()
        o.step()
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), twin.parameters()))


# ------------------------------------------------------------------ nothing in a file runs code


class Payload:
    """Unpickling this creates ``marker``: what an attacker's code would do."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_a_pickle_that_would_run_code_is_refused_and_runs_nothing(tmp_path, toy_model):
    marker = tmp_path / "code_ran"
    legacy = tmp_path / "run" / "checkpoints" / "iter_000004.pt"
    legacy.parent.mkdir(parents=True)
    torch.save({"iteration": 5, "payload": Payload(marker)}, legacy)
    assert not marker.exists()
    with pytest.raises(
        UntrustedCheckpointError,
        match=r"old pickle format.*--trust-checkpoint.*cory_agents.training.checkpoint convert",
    ):
        load_checkpoint(legacy)
    config = toy_config(toy_model, tmp_path / "run", algo="ppo", iterations=6, resume=True)
    with pytest.raises(UntrustedCheckpointError, match="--trust-checkpoint"):
        Trainer(config, prompts=PROMPTS, reward_fn=fraction_good).train(progress=False)
    # The same pickle under a safe checkpoint's name is no checkpoint at all.
    disguised = tmp_path / "iter_000004.safetensors"
    disguised.write_bytes(pickle.dumps({"payload": Payload(marker)}))
    with pytest.raises(DamagedCheckpointError, match=str(disguised)):
        load_checkpoint(disguised)
    assert not marker.exists()
    assert main(["verify", str(disguised)]) == 1 and not marker.exists()


def test_your_own_old_checkpoint_loads_when_trusted_and_converts(tmp_path, capsys):
    legacy = tmp_path / "checkpoints" / "iter_000002.pt"
    legacy.parent.mkdir()
    torch.save({"iteration": 3, "w": torch.arange(3.0), "betas": (0.9, 0.99)}, legacy)
    assert load_checkpoint(legacy, trust=True)["iteration"] == 3
    assert main(["convert", str(legacy)]) == 0 and "iter_000002.safetensors" in capsys.readouterr().out
    converted = latest_checkpoint(tmp_path)  # of one iteration in both formats, the safe one is the newest
    assert converted.name == "iter_000002.safetensors" and legacy.exists()
    state = load_checkpoint(converted)
    assert state["betas"] == (0.9, 0.99) and torch.equal(state["w"], torch.arange(3.0))
    with pytest.raises(ValueError, match="already in the safe format"):
        convert_checkpoint(converted)


# ------------------------------------------------------------------ damage


def _state(i):
    return {"iteration": i + 1, "w": torch.full((64, 64), float(i)), "config": {"lr": 0.1}}


@pytest.mark.parametrize("damage", ["truncated", "header only", "bit flipped in a tensor", "bit flipped in the JSON"])
def test_a_damaged_checkpoint_is_named_and_refused(tmp_path, damage):
    path = save_checkpoint(tmp_path, 0, _state(0))
    data = bytearray(path.read_bytes())
    header = int.from_bytes(data[:8], "little") + 8
    if damage == "truncated":
        data = data[: len(data) // 2]
    elif damage == "header only":
        data = data[:header]
    elif damage == "bit flipped in a tensor":
        data[header + 1000] ^= 0x10
    else:
        at = data.index(b'"lr') + 6  # a digit of the config's 0.1 inside the JSON
        data[at] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(DamagedCheckpointError, match=rf"checkpoint {path} is damaged"):
        load_checkpoint(path)
    assert main(["verify", str(tmp_path)]) == 1


def test_load_latest_falls_back_to_the_newest_intact_checkpoint(tmp_path, caplog):
    for i in range(3):
        save_checkpoint(tmp_path, i, _state(i), keep=3)
    newest = latest_checkpoint(tmp_path)
    newest.write_bytes(newest.read_bytes()[:1000])
    with caplog.at_level(logging.WARNING, logger="cory_agents.training.checkpoint"):
        path, state = load_latest(tmp_path)
    assert path.name == "iter_000001.safetensors" and state["iteration"] == 2
    assert (
        "iter_000002.safetensors" in caplog.text
        and "resuming from iter_000001.safetensors (iteration 1)" in caplog.text
    )
    assert newest.with_name(newest.name + ".damaged").exists() and latest_checkpoint(tmp_path) == path
    for p in list_checkpoints(tmp_path):
        p.write_bytes(b"\0" * 100)
    with pytest.raises(DamagedCheckpointError, match=r"no intact checkpoint.*--overwrite.*--keep-checkpoints"):
        load_latest(tmp_path)
    assert load_latest(tmp_path / "elsewhere") is None


def test_resume_skips_a_damaged_newest_checkpoint_and_still_matches_an_uninterrupted_run(toy_model, tmp_path, caplog):
    kw = dict(algo="ppo", checkpoint_every=1, keep_checkpoints=2)
    Trainer(
        toy_config(toy_model, tmp_path / "whole", iterations=4, **kw), prompts=PROMPTS, reward_fn=fraction_good
    ).train(progress=False)
    run = tmp_path / "damaged"
    Trainer(toy_config(toy_model, run, iterations=3, **kw), prompts=PROMPTS, reward_fn=fraction_good).train(
        progress=False
    )
    assert [p.name for p in list_checkpoints(run)] == ["iter_000001.safetensors", "iter_000002.safetensors"]
    newest = latest_checkpoint(run)
    data = bytearray(newest.read_bytes())
    data[-5] ^= 0xFF  # one byte of the last tensor
    newest.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING, logger="cory_agents.training.checkpoint"):
        Trainer(
            toy_config(toy_model, run, iterations=4, resume=True, **kw), prompts=PROMPTS, reward_fn=fraction_good
        ).train(progress=False)
    assert "SHA-256" in caplog.text and "(iteration 1)" in caplog.text
    # Iterations 2 and 3 were played again from iteration 1's checkpoint: the same numbers as without damage.
    pd.testing.assert_frame_equal(
        metrics_without_timing(tmp_path / "whole"), metrics_without_timing(run), check_exact=True
    )
    exported = {p.suffix for p in (run / "model").rglob("*") if p.is_file()}
    assert ".safetensors" in exported and not exported & {".bin", ".pt", ".pth", ".pkl", ".ckpt"}, exported


def test_a_save_syncs_the_file_and_then_its_folder(tmp_path, monkeypatch):
    synced = []
    real = os.fsync

    def fsync(fd):
        synced.append("folder" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file")
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    save_checkpoint(tmp_path, 0, _state(0))
    assert synced[:2] == ["file", "folder"], synced


def test_bad_keep_is_refused(tmp_path):
    with pytest.raises(ValueError, match="keep must be at least 1"):
        save_checkpoint(tmp_path, 0, _state(0), keep=0)


def test_evaluate_and_export_refuse_an_old_checkpoint_unless_trusted(tmp_path):
    import importlib.util

    from cory_agents.evaluation.held_out import EvalConfig, evaluate

    marker = tmp_path / "code_ran"
    legacy = tmp_path / "checkpoints" / "iter_000000.pt"
    legacy.parent.mkdir()
    torch.save({"iteration": 1, "payload": Payload(marker)}, legacy)
    with pytest.raises(UntrustedCheckpointError, match="--trust-checkpoint"):
        evaluate(EvalConfig(checkpoint=str(tmp_path)), progress=False, write=False)
    script = ROOT / "examples" / "export_model.py"
    spec = importlib.util.spec_from_file_location("export_model", script)
    export_model = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(export_model)
    with pytest.raises(UntrustedCheckpointError, match="--trust-checkpoint"):
        export_model.main(["--checkpoint", str(tmp_path)])
    assert "--trust-checkpoint" in export_model.build_parser().format_help()
    assert not marker.exists()


def test_a_checkpoint_written_before_the_move_resumes_exactly(tmp_path):
    """cory-env at 7662da4, when agents/ was one flat folder, wrote this run's checkpoint after 2 of
    its 4 iterations (tests/support/old_checkpoint.py): resumed by today's code, the run goes on exactly as
    the old code went on."""
    golden = DATA / "checkpoint_before_the_move"
    shutil.copytree(golden / "stopped", tmp_path / "stopped")
    subprocess.run(
        [sys.executable, "-m", "tests.support.old_checkpoint", "--resume", str(tmp_path)],
        cwd=ROOT,
        check=True,
        capture_output=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    resumed = pd.read_csv(tmp_path / "stopped" / "metrics.csv").drop(columns=["tokens_per_s", "seconds"])
    before = pd.read_csv(golden / "whole_metrics.csv")
    assert resumed["iteration"].tolist() == [0, 1, 2, 3]
    assert list(resumed.columns) == list(before.columns)
    # Written on another machine: token-derived metrics exactly, the rest within a bound (tests/support/golden.py).
    assert_same_run(resumed, before, "resumed")
