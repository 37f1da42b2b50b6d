"""Runs of two CPU processes (gloo, CUDA hidden) under ``accelerate launch``, and their checkpoints
compared; :func:`one_iteration_config` is the one-iteration run of a single process that places learners."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import torch

from cory_agents.training.checkpoint import latest_checkpoint, load_checkpoint
from cory_agents.training.config import TrainConfig
from tests.support import ROOT

MULTI_GPU_CONFIG = ROOT / "examples" / "accelerate" / "multi_gpu.yaml"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def hide_cuda_env(**extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "HF_HUB_OFFLINE": "1",
        "OMP_NUM_THREADS": "1",
        "CUDA_VISIBLE_DEVICES": "",
        "TOKENIZERS_PARALLELISM": "false",
        **extra,
    }


def one_iteration_config(model: Path, out: Path, **kw) -> TrainConfig:
    defaults = dict(
        model=str(model),
        iterations=1,
        batch_size=4,
        mini_batch_size=2,
        ppo_epochs=1,
        lr=1e-2,
        min_new_tokens=3,
        max_new_tokens=4,
        out=str(out),
        report_to="none",
        context_length=48,
    )
    return TrainConfig(**{**defaults, **kw})


def launch_command(args: list[str], config: Path = MULTI_GPU_CONFIG, launcher: Sequence[str] = ()) -> list[str]:
    return [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--config_file",
        str(config),
        "--num_processes",
        "2",
        "--main_process_port",
        str(free_port()),
        *launcher,
        str(ROOT / "examples" / "train_cory.py"),
        *args,
    ]


def accelerate_launch(
    args: list[str], config: Path = MULTI_GPU_CONFIG, launcher: Sequence[str] = (), **env: str
) -> subprocess.CompletedProcess:
    """``accelerate launch --config_file config`` of examples/train_cory.py on 2 CPU processes."""
    command = launch_command(args, config, launcher)
    result = subprocess.run(command, env=hide_cuda_env(**env), cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    return result


def whole_state(out: Path) -> dict:
    return load_checkpoint(latest_checkpoint(out))


def assert_states_close(a: dict, b: dict, path: str = "", rtol: float = 1e-4, atol: float = 1e-6) -> None:
    """Nested checkpoint states equal, tensors to float rounding (summation orders differ)."""
    if torch.is_tensor(a):
        assert torch.is_tensor(b) and a.shape == b.shape and a.dtype == b.dtype, path
        if a.is_floating_point():
            torch.testing.assert_close(a, b, rtol=rtol, atol=atol, msg=lambda m: f"{path}: {m}")
        else:
            assert torch.equal(a, b), path
    elif isinstance(a, dict):
        assert set(a) == set(b), (path, set(a) ^ set(b))
        for k in a:
            assert_states_close(a[k], b[k], f"{path}/{k}", rtol, atol)
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            assert_states_close(x, y, f"{path}/{i}", rtol, atol)
