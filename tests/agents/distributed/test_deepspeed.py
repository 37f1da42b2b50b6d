"""DeepSpeed ZeRO-2 training under ``accelerate launch --config_file examples/accelerate/deepspeed_zero2.yaml``.

Two CPU processes over gloo (CUDA hidden), a tiny random Llama. The strong check: a ZeRO-2 run
ends with the same weights and Adam state (to float rounding) as the data-parallel run
(multi_gpu.yaml, explicit gradient all-reduce) with the same seeds, and its checkpoint has the
single-process format (a plain learner loads it). Skipped where DeepSpeed is not installed
(it is optional: ``pip install deepspeed``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch.multiprocessing as mp
from transformers import HfArgumentParser

from cory_agents.distributed.data_parallel import DataParallel, fingerprint
from cory_agents.distributed.zero import ZeROSettings
from cory_agents.training.config import TrainConfig
from cory_agents.training.trainer import Trainer
from tests.support import ROOT
from tests.support.launches import (
    MULTI_GPU_CONFIG,
    accelerate_launch,
    assert_states_close,
    free_port,
    one_iteration_config,
    whole_state,
)
from tests.support.runs import PROMPTS
from tests.support.runs import toy_cli_args as launch_args  # the CLI flags of a tiny run
from tests.support.toy import fraction_good

ZERO2_CONFIG = ROOT / "examples" / "accelerate" / "deepspeed_zero2.yaml"


def deepspeed_path() -> str | None:
    """Where ``deepspeed`` is imported from (for the launched processes' PYTHONPATH), or None."""
    try:
        import deepspeed
    except Exception:  # noqa: BLE001 - not installed, or installed but broken: skip either way
        return None
    return str(Path(deepspeed.__file__).parent.parent)


def cxx_compiler() -> str | None:
    """The C++ compiler DeepSpeed builds its CPU communication op with on first use (torch's ``CXX``)."""
    return shutil.which(os.environ.get("CXX", "c++"))


needs_deepspeed = pytest.mark.skipif(
    deepspeed_path() is None or cxx_compiler() is None,
    reason="DeepSpeed is not installed (optional: pip install deepspeed), or there is no C++ compiler for its CPU op",
)


def launch(args: list[str], config: Path = ZERO2_CONFIG, launcher: Sequence[str] = ()) -> subprocess.CompletedProcess:
    """:func:`accelerate_launch`, with deepspeed importable from where this process imports it."""
    return accelerate_launch(args, config, launcher, PYTHONPATH=f"{ROOT}{os.pathsep}{deepspeed_path()}")


# ---------------------------------------------------------------- settings, refusals (no processes)
ZERO_ENV = {"ACCELERATE_USE_DEEPSPEED": "true", "ACCELERATE_DEEPSPEED_ZERO_STAGE": "2"}


@pytest.mark.parametrize(
    "env, message",
    [
        ({"ACCELERATE_DEEPSPEED_ZERO_STAGE": "3"}, "stage 3 is not supported.*examples/accelerate/fsdp.yaml"),
        ({"ACCELERATE_DEEPSPEED_ZERO_STAGE": "0"}, "zero_stage must be 1 or 2"),
        ({"ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE": "cpu"}, "offload"),
        ({"ACCELERATE_DEEPSPEED_CONFIG_FILE": "ds.json"}, "config file.*zero_stage"),
        ({"ACCELERATE_GRADIENT_ACCUMULATION_STEPS": "4"}, "--gradient-accumulation-steps"),
        ({"ACCELERATE_GRADIENT_CLIPPING": "1.0"}, "--max-grad-norm"),
    ],
)
def test_unsupported_deepspeed_settings_are_refused_with_the_fix(monkeypatch, env, message):
    for k, v in {**ZERO_ENV, **env}.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(ValueError, match=message):
        ZeROSettings.from_environment()


def test_deepspeed_settings_come_from_the_launcher(monkeypatch):
    monkeypatch.delenv("ACCELERATE_USE_DEEPSPEED", raising=False)
    assert ZeROSettings.from_environment() is None
    for k, v in {
        **ZERO_ENV,
        "ACCELERATE_DEEPSPEED_ZERO_STAGE": "1",
        "ACCELERATE_GRADIENT_CLIPPING": "none",
        "ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE": "none",
    }.items():
        monkeypatch.setenv(k, v)
    assert ZeROSettings.from_environment() == ZeROSettings(stage=1)
    # Not launched (no process group): a plain single process.
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    assert DataParallel.from_environment().zero is None


def test_zero_refuses_lora(monkeypatch, toy_model, tmp_path):
    # What from_environment returns inside a launched ZeRO run (a process group needs other processes).
    launched = DataParallel()
    launched.zero = ZeROSettings()
    monkeypatch.setattr(DataParallel, "from_environment", classmethod(lambda cls: launched))
    with pytest.raises(ValueError, match="full fine-tuning only.*multi_gpu.yaml"):
        Trainer(one_iteration_config(toy_model, tmp_path, lora=True), prompts=PROMPTS, reward_fn=fraction_good)


# ---------------------------------------------------------------- what each process holds
@needs_deepspeed
def test_each_process_holds_half_of_every_learners_adam_state(toy_model, tmp_path):
    pythonpath = f"{ROOT}{os.pathsep}{deepspeed_path()}"
    mp.start_processes(
        _spawned_zero_worker,
        args=(free_port(), str(toy_model), str(tmp_path), pythonpath),
        nprocs=2,
        start_method="spawn",
    )
    r = [json.loads((tmp_path / f"{i}.json").read_text()) for i in range(2)]
    for name in ("llm_0", "llm_1"):
        assert r[0][name]["engine"] == "DeepSpeedEngine" and r[0][name]["zero_optimizer"] == "DeepSpeedZeroOptimizer"
        # The two partitions cover every trainable weight's Adam state (up to alignment padding), about half each.
        local = [x[name]["adam_local"] for x in r]
        assert r[0][name]["whole"] <= sum(local) < r[0][name]["whole"] + 64
        assert max(local) < 0.6 * r[0][name]["whole"]


def _spawned_zero_worker(rank, port, model, results, pythonpath):

    sys.path[:0] = pythonpath.split(os.pathsep)  # the spawned interpreter finds the tests and deepspeed
    from tests.support.zero_worker import zero_worker

    zero_worker(rank, port, model, results, pythonpath)


# ---------------------------------------------------------------- accelerate launch, 2 processes
@needs_deepspeed
@pytest.mark.parametrize(
    "extra, launcher",
    [
        pytest.param("--algo cory --role-exchange-period 1 --gradient-accumulation-steps 2", "", marks=pytest.mark.ci),
        pytest.param("--algo cory --learner grpo --group-size 2", "", marks=pytest.mark.slow),
        pytest.param("--algo ppo --adaptive-kl --score-scaling", "--zero_stage 1", marks=pytest.mark.slow),
    ],
)
def test_zero_run_matches_the_data_parallel_run(toy_model, tmp_path, extra, launcher):
    """One iteration (same rollouts: the weights start equal) under ZeRO-2 (or 1) and under the all-reduce:
    the same updated weights and Adam state; the checkpoint loads into a plain single-process learner."""
    common = [*extra.split(), "--iterations", "1"]
    args = launch_args(toy_model, tmp_path / "zero", *common)
    result = launch(args, launcher=launcher.split())
    assert result.stdout.count("metrics:") == 1
    launch(launch_args(toy_model, tmp_path / "dp", *common), MULTI_GPU_CONFIG)
    zero, dp = whole_state(tmp_path / "zero"), whole_state(tmp_path / "dp")
    learners = list(dp["learners"])
    for name in learners:
        for part in ("model", "optimizer"):
            assert_states_close(zero["learners"][name][part], dp["learners"][name][part], f"{name}/{part}")
    saved = {n: fingerprint(zero["learners"][n]["model"]) for n in learners}
    assert [p["weights_sha256"] for p in zero["processes"]] == [saved, saved]
    (config,) = HfArgumentParser(TrainConfig).parse_args_into_dataclasses(args=args)
    plain = Trainer(config)  # one process, no DeepSpeed: the initial weights, then the checkpoint's
    for name, learner in plain.learners.items():
        assert fingerprint(learner.state_dict()["model"]) != saved[name], "no update happened"
        learner.load_state_dict(zero["learners"][name])
        assert fingerprint(learner.state_dict()["model"]) == saved[name]
    metrics = pd.read_csv(tmp_path / "zero" / "metrics.csv")
    assert np.isfinite(metrics.drop(columns=["iteration"]).to_numpy(dtype=float)).all()


@needs_deepspeed
@pytest.mark.slow
def test_zero2_resume_matches_an_uninterrupted_run(toy_model, tmp_path):
    common = ["--algo", "cory", "--role-exchange-period", "1", "--checkpoint-every", "1"]
    launch(launch_args(toy_model, tmp_path / "whole", *common, "--iterations", "3"))
    launch(launch_args(toy_model, tmp_path / "split", *common, "--iterations", "2"))
    launch(launch_args(toy_model, tmp_path / "split", *common, "--iterations", "3", "--resume"))
    timing = ["tokens_per_s", "seconds"]
    a = pd.read_csv(tmp_path / "whole" / "metrics.csv").drop(columns=timing)
    b = pd.read_csv(tmp_path / "split" / "metrics.csv").drop(columns=timing)
    assert b["iteration"].tolist() == [0, 1, 2]
    pd.testing.assert_frame_equal(a, b, check_exact=True)
    whole, split = whole_state(tmp_path / "whole"), whole_state(tmp_path / "split")
    assert [p["weights_sha256"] for p in whole["processes"]] == [p["weights_sha256"] for p in split["processes"]]
