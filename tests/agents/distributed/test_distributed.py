"""Data-parallel training under accelerate: synchronised updates, per-process data, exact resume.

The launched runs use ``accelerate launch --config_file examples/accelerate/multi_gpu.yaml
--num_processes 2`` with CUDA hidden: on a machine without CUDA, accelerate's multi-GPU
launcher (torchrun) starts two CPU processes (gloo). ``accelerate launch --cpu --num_processes 2``
would start only one (accelerate starts several CPU processes only through mpirun), which the
trainer refuses with a message (tested below).
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import torch.multiprocessing as mp
from transformers import HfArgumentParser

from cory_agents.algorithms.advantages import whiten
from cory_agents.distributed.data_parallel import DataParallel, fingerprint
from cory_agents.training.checkpoint import latest_checkpoint, load_checkpoint
from cory_agents.training.config import TrainConfig
from cory_agents.training.trainer import Trainer
from tests.support import ROOT
from tests.support.distributed_worker import collectives_worker
from tests.support.launches import accelerate_launch, free_port, hide_cuda_env, launch_command, one_iteration_config
from tests.support.runs import PROMPTS
from tests.support.runs import toy_cli_args as launch_args  # the CLI flags of a tiny run
from tests.support.toy import fraction_good


# ---------------------------------------------------------------- collectives, in 2 real processes
def test_collectives_over_two_processes(tmp_path):
    mp.start_processes(collectives_worker, args=(free_port(), str(tmp_path)), nprocs=2, start_method="spawn")
    r = [json.loads((tmp_path / f"{i}.json").read_text()) for i in range(2)]
    assert [(x["index"], x["n"], x["main"], x["seed"]) for x in r] == [(0, 2, True, 7), (1, 2, False, 8)]
    for x in r:
        assert x["gather"] == [0, 10, 1, 11]
        assert x["objects"] == [{"rank": 0}, {"rank": 1}]
        assert x["mean"] == {"a": 0.5, "b": 1.0}
        assert x["sum"] == {"tokens": 7.0}
        np.testing.assert_allclose(x["whiten"], x["whiten_expected"], rtol=1e-5, atol=1e-6)
        assert x["grads"] == [[1.0] * 3, [2.0] * 2]
        assert x["params"] == [1.0] * 3  # the main process's values
        assert x["in_sync"]
    assert r[1]["diverged_error"] is not None and "process 1's weights differ" in r[1]["diverged_error"]
    assert r[0]["diverged_error"] is not None  # every process raises, none waits forever


def test_a_single_process_is_the_identity(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    dp = DataParallel.from_environment()
    assert (dp.num_processes, dp.process_index, dp.is_main_process, dp.seed(5)) == (1, 0, True, 5)
    x = np.array([0.25, 0.5])
    assert dp.gather(x) is x
    assert dp.mean({"kl": 0.1}) == {"kl": 0.1}
    t, m = torch.tensor([[1.0, 2.0, 4.0]]), torch.ones(1, 3)
    assert torch.equal(dp.whiten(t, m), whiten(t, m))


@pytest.mark.parametrize(
    "env, message",
    [
        ({"ACCELERATE_USE_MEGATRON_LM": "true"}, "Megatron-LM is not supported"),
        (  # ZeRO-1/2: tests/agents/distributed/test_deepspeed.py
            {"ACCELERATE_USE_DEEPSPEED": "true", "ACCELERATE_DEEPSPEED_ZERO_STAGE": "3"},
            "stage 3 is not supported.*fsdp.yaml",
        ),
        (
            {"ACCELERATE_USE_FSDP": "true"},
            "FSDP version 1 is not supported",
        ),  # FSDP2: tests/agents/distributed/test_fsdp.py
        ({"ACCELERATE_MIXED_PRECISION": "fp16"}, "mixed precision 'fp16' is not supported"),
        ({"ACCELERATE_USE_CPU": "True", "MASTER_ADDR": "127.0.0.1"}, "started one process.*--multi_gpu"),
    ],
)
def test_unsupported_launches_are_refused_with_the_fix(monkeypatch, env, message):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(ValueError, match=message):
        DataParallel.from_environment()


# ---------------------------------------------------------------- learner placement (single process)
def test_learner_devices_place_each_learner(toy_model, tmp_path):
    config = one_iteration_config(toy_model, tmp_path, learner_devices="cpu, cpu")
    trainer = Trainer(config, prompts=PROMPTS, reward_fn=fraction_good)
    for learner in trainer.learners.values():
        assert learner.device == torch.device("cpu")
    # Learners on one device share one frozen reference.
    assert trainer.learners["llm_0"].reference is trainer.learners["llm_1"].reference
    metrics, _ = trainer.run_iteration()
    assert np.isfinite(metrics["llm_1/policy_loss"])


@pytest.mark.parametrize(
    "kw, message",
    [
        (dict(learner_devices="cpu"), "1 device.*for 2 learner"),
        (dict(algo="ppo", learner_devices="cpu,cpu"), "2 device.*for 1 learner"),
        (dict(learner_devices="cpu,gpu7"), "--learner-devices 'gpu7': .*give cpu, cuda, cuda:N"),
        (dict(learner_devices="cpu,cuda:9"), "cuda:9 is not available"),
        (dict(learner_devices="cpu,cpu", device="cpu"), "either --device or --learner-devices"),
        (dict(device="cuda:9"), "--device: cuda:9 is not available: .*(CPU build|GPU)"),
        (dict(device="gpu"), "--device 'gpu'.*give cpu, cuda, cuda:N or auto"),
    ],
)
def test_bad_devices_are_refused(toy_model, tmp_path, kw, message):
    with pytest.raises(ValueError, match=message):
        Trainer(one_iteration_config(toy_model, tmp_path, **kw), prompts=PROMPTS, reward_fn=fraction_good)


# ---------------------------------------------------------------- accelerate launch, 2 processes
def initial_fingerprints(args: list[str]) -> dict[str, str]:
    (config,) = HfArgumentParser(TrainConfig).parse_args_into_dataclasses(args=args)
    trainer = Trainer(config)  # a single process builds the same initial weights
    return {n: fingerprint(learner.trainable_state_dict()) for n, learner in trainer.learners.items()}


def check_data_parallel_run(out: Path, args: list[str], learners: list[str]) -> None:
    state = load_checkpoint(latest_checkpoint(out))
    processes = state["processes"]
    assert len(processes) == 2
    # Every process ended with the weights the main process saved, and they moved.
    saved = {n: fingerprint(state["learners"][n]["model"]) for n in learners}
    assert processes[0]["weights_sha256"] == processes[1]["weights_sha256"] == saved
    initial = initial_fingerprints(args)
    assert all(initial[n] != saved[n] for n in learners), "no update happened"
    # Each process played its own conversations.
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    first = [s for s in samples if s["iteration"] == 0]
    played = {p: [(s["query"], s["response"]) for s in first if s["process"] == p] for p in (0, 1)}
    assert played[0] and played[1] and played[0] != played[1]
    assert processes[0]["generators"][learners[0]][1].tolist() != processes[1]["generators"][learners[0]][1].tolist()
    metrics = pd.read_csv(out / "metrics.csv")
    assert metrics["iteration"].tolist() == [0, 1]
    assert np.isfinite(metrics[f"{learners[0]}/policy_loss"]).all()


def test_accelerate_launch_cory_keeps_the_processes_in_sync(toy_model, tmp_path):
    args = launch_args(toy_model, tmp_path / "run", "--algo", "cory", "--iterations", "2", "--role-exchange-period=1")
    result = accelerate_launch(args)
    assert result.stdout.count("metrics:") == 1  # only the main process reports
    check_data_parallel_run(tmp_path / "run", args, ["llm_0", "llm_1"])
    # Its per-process random states cannot be resumed by another number of processes.
    (config,) = HfArgumentParser(TrainConfig).parse_args_into_dataclasses(args=[*args, "--resume", "--iterations", "3"])
    with pytest.raises(ValueError, match="written by 2 process.*this run has 1"):
        Trainer(config).train(progress=False)


@pytest.mark.slow
@pytest.mark.parametrize(
    "extra",
    [
        "--algo ppo --adaptive-kl --score-scaling --score-norm",
        "--algo cory --lora",
        "--algo cory --num-agents 3",
        "--algo cory --learner happo --happo-factor-clip 2",
        "--algo cory --learner difference",
        "--algo cory --learner difference --difference-replays 2 --no-common-random-numbers",
    ],
)
def test_accelerate_launch_variants_keep_the_processes_in_sync(toy_model, tmp_path, extra):
    args = launch_args(toy_model, tmp_path / "run", "--iterations", "2", *extra.split())
    accelerate_launch(args)
    learners = (
        ["pioneer"] if "--algo ppo" in extra else [f"llm_{i}" for i in range(3 if "--num-agents 3" in extra else 2)]
    )
    check_data_parallel_run(tmp_path / "run", args, learners)


@pytest.mark.slow
def test_accelerate_launch_resume_matches_an_uninterrupted_run(toy_model, tmp_path):
    common = ["--algo", "cory", "--role-exchange-period", "1", "--checkpoint-every", "1", "--adaptive-kl"]
    accelerate_launch(launch_args(toy_model, tmp_path / "whole", *common, "--iterations", "3"))
    accelerate_launch(launch_args(toy_model, tmp_path / "split", *common, "--iterations", "2"))
    accelerate_launch(launch_args(toy_model, tmp_path / "split", *common, "--iterations", "3", "--resume"))
    timing = ["tokens_per_s", "seconds"]
    a = pd.read_csv(tmp_path / "whole" / "metrics.csv").drop(columns=timing)
    b = pd.read_csv(tmp_path / "split" / "metrics.csv").drop(columns=timing)
    assert b["iteration"].tolist() == [0, 1, 2]
    pd.testing.assert_frame_equal(a, b, check_exact=True)
    whole, split = (load_checkpoint(latest_checkpoint(tmp_path / r))["processes"] for r in ("whole", "split"))
    assert [p["weights_sha256"] for p in whole] == [p["weights_sha256"] for p in split]


@pytest.mark.slow
def test_sigterm_to_one_process_stops_both_after_the_same_iteration(toy_model, tmp_path):
    import psutil  # accelerate's dependency

    common = ["--algo", "cory", "--role-exchange-period", "1", "--checkpoint-every", "100", "--iterations", "8"]
    accelerate_launch(launch_args(toy_model, tmp_path / "whole", *common))
    stopped = tmp_path / "stopped"
    launcher = subprocess.Popen(
        launch_command(launch_args(toy_model, stopped, *common)),
        env=hide_cuda_env(),
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    metrics, deadline = stopped / "metrics.csv", time.monotonic() + 300
    while not metrics.exists() or len(metrics.read_text().splitlines()) < 2:
        assert launcher.poll() is None and time.monotonic() < deadline, "the run ended before its first iteration"
        time.sleep(0.05)
    workers = [
        p for p in psutil.Process(launcher.pid).children(recursive=True) if "train_cory.py" in " ".join(p.cmdline())
    ]
    (second,) = [p for p in workers if p.environ().get("RANK") == "1"]
    second.send_signal(signal.SIGTERM)  # the other process never receives one
    _, stderr = launcher.communicate(timeout=300)
    done = len(pd.read_csv(metrics))
    assert done < 8, "the signal came too late to test a stop"
    names = [p.name for p in (stopped / "checkpoints").iterdir()]
    assert names == [f"iter_{done - 1:06d}.safetensors"], stderr[-3000:]
    assert len(load_checkpoint(latest_checkpoint(stopped))["processes"]) == 2

    accelerate_launch(launch_args(toy_model, stopped, *common, "--resume"))
    timing = ["tokens_per_s", "seconds"]
    a = pd.read_csv(tmp_path / "whole" / "metrics.csv").drop(columns=timing)
    b = pd.read_csv(metrics).drop(columns=timing)
    pd.testing.assert_frame_equal(a, b, check_exact=True)
