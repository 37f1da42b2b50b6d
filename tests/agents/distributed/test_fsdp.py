"""FSDP (PyTorch FSDP2) training under ``accelerate launch --config_file examples/accelerate/fsdp.yaml``.

Two CPU processes over gloo (CUDA hidden), a tiny random Llama. The strong check: an FSDP run
ends with the same weights and Adam state (to float rounding) as the data-parallel run
(multi_gpu.yaml, explicit gradient all-reduce) with the same seeds, and its checkpoint has the
single-process format (a plain learner loads it).
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch
import torch.multiprocessing as mp
from safetensors.torch import load_file
from transformers import HfArgumentParser

from cory_agents.distributed.data_parallel import DataParallel, fingerprint
from cory_agents.distributed.fsdp import FSDPSettings, shard
from cory_agents.training.config import TrainConfig
from cory_agents.training.trainer import Trainer
from tests.support import ROOT
from tests.support.fsdp_worker import fsdp_worker
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

FSDP_CONFIG = ROOT / "examples" / "accelerate" / "fsdp.yaml"


# ---------------------------------------------------------------- settings, refusals (no processes)
FSDP_ENV = {"ACCELERATE_USE_FSDP": "true", "FSDP_VERSION": "2"}


@pytest.mark.parametrize(
    "env, message",
    [
        ({"FSDP_VERSION": "1"}, "FSDP version 1 is not supported: set fsdp_version: 2"),
        ({"FSDP_OFFLOAD_PARAMS": "true"}, "fsdp_offload_params"),
        ({"FSDP_ACTIVATION_CHECKPOINTING": "true"}, "--gradient-checkpointing"),
        ({"FSDP_CPU_RAM_EFFICIENT_LOADING": "true"}, "fsdp_cpu_ram_efficient_loading"),
        ({"FSDP_RESHARD_AFTER_FORWARD": "sometimes"}, "must be true or false"),
    ],
)
def test_unsupported_fsdp_settings_are_refused_with_the_fix(monkeypatch, env, message):
    for k, v in {**FSDP_ENV, **env}.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(ValueError, match=message):
        FSDPSettings.from_environment()


def test_fsdp_settings_come_from_the_launcher(monkeypatch):
    monkeypatch.delenv("ACCELERATE_USE_FSDP", raising=False)
    assert FSDPSettings.from_environment() is None
    for k, v in {
        **FSDP_ENV,
        "FSDP_RESHARD_AFTER_FORWARD": "SHARD_GRAD_OP",
        "FSDP_TRANSFORMER_CLS_TO_WRAP": "LlamaDecoderLayer, MyBlock",
    }.items():
        monkeypatch.setenv(k, v)
    assert FSDPSettings.from_environment() == FSDPSettings(False, ("LlamaDecoderLayer", "MyBlock"))


def test_a_wrong_layer_class_is_refused(toy_model):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(toy_model)
    with pytest.raises(ValueError, match="no module of class GPT2Block.*fsdp_transformer_layer_cls_to_wrap"):
        shard(model, FSDPSettings(layer_classes=("GPT2Block",)))


def test_fsdp_refuses_lora_before_loading_models(monkeypatch, toy_model, tmp_path):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    for k, v in FSDP_ENV.items():
        monkeypatch.setenv(k, v)
    assert DataParallel.from_environment().fsdp == FSDPSettings()
    with pytest.raises(ValueError, match="FSDP shards full fine-tuning only.*multi_gpu.yaml"):
        Trainer(one_iteration_config(toy_model, tmp_path, lora=True), prompts=PROMPTS, reward_fn=fraction_good)


# ---------------------------------------------------------------- what each process holds
def test_each_process_holds_half_of_every_learner_and_the_reference(toy_model, tmp_path):
    mp.start_processes(fsdp_worker, args=(free_port(), str(toy_model), str(tmp_path)), nprocs=2, start_method="spawn")
    r = [json.loads((tmp_path / f"{i}.json").read_text()) for i in range(2)]
    for name in ("llm_0", "llm_1"):
        assert r[0][name]["all_sharded"] and r[1][name]["all_sharded"]
        # The two processes' shards partition the weights, and so the Adam state (2 tensors per weight).
        assert r[0][name]["local"] + r[1][name]["local"] == r[0][name]["whole"]
        assert max(r[0][name]["local"], r[1][name]["local"]) < 0.6 * r[0][name]["whole"]
        assert r[0][name]["adam_local"] == 2 * r[0][name]["local"]
    assert r[0]["reference"]["local"] + r[1]["reference"]["local"] == r[0]["reference"]["whole"]
    for x in r:  # a plug-in learner that leaves a trainable module unsharded is stopped, with the fix
        assert "learner 'llm_0' trains 2 parameter(s) that FSDP does not shard" in x["unsharded_error"]
        assert "data_parallel.shard(module)" in x["unsharded_error"]


# ---------------------------------------------------------------- accelerate launch, 2 processes
@pytest.mark.parametrize(
    "extra",
    [
        pytest.param("--algo cory --role-exchange-period 1", marks=pytest.mark.ci),  # make test: the shards
        pytest.param(
            "--algo ppo --adaptive-kl --score-scaling --gradient-accumulation-steps 2", marks=pytest.mark.slow
        ),
        pytest.param("--algo cory --learner grpo --group-size 2", marks=pytest.mark.slow),
        # Team learners: HAPPO's order and factor, difference rewards' replays (they act inside learn).
        pytest.param("--algo cory --learner happo --role-exchange-period 1", marks=pytest.mark.slow),
        pytest.param("--algo cory --learner difference --role-exchange-period 1", marks=pytest.mark.slow),
        # MAPPO's critic: a module the team owns, sharded, stepped and saved whole like the members'.
        pytest.param("--algo cory --learner mappo --role-exchange-period 1", marks=pytest.mark.ci),
    ],
)
def test_fsdp_run_matches_the_data_parallel_run(toy_model, tmp_path, extra):
    """One iteration (same rollouts: the weights start equal) under FSDP and under the all-reduce:
    the same updated weights and Adam state; the checkpoint loads into a plain single-process learner."""
    common = [*extra.split(), "--iterations", "1"]
    args = launch_args(toy_model, tmp_path / "fsdp", *common)
    result = accelerate_launch(args, FSDP_CONFIG)
    assert result.stdout.count("metrics:") == 1
    accelerate_launch(launch_args(toy_model, tmp_path / "dp", *common), MULTI_GPU_CONFIG)
    fsdp, dp = whole_state(tmp_path / "fsdp"), whole_state(tmp_path / "dp")
    learners = list(dp["learners"])
    metrics = {run: pd.read_csv(tmp_path / run / "metrics.csv") for run in ("fsdp", "dp")}
    later = []
    if "happo" in extra:  # the same order; the later agent learned with the factor of the earlier one's change
        order = [f"{n}/update_position" for n in learners]
        assert metrics["fsdp"][order].equals(metrics["dp"][order])
        later = [n for n in learners if metrics["dp"][f"{n}/update_position"].iloc[0] > 0]
        factor = [f"{n}/happo_factor_mean" for n in later]
        np.testing.assert_allclose(metrics["fsdp"][factor], metrics["dp"][factor], rtol=1e-5)
    for name in learners:
        for part in ("model", "optimizer"):
            if name in later:  # the factor's rounding (exp of a sum over the answer) moves Adam's first step
                close_but_for_rounding(fsdp["learners"][name][part], dp["learners"][name][part])  # on tiny gradients
            else:
                assert_states_close(fsdp["learners"][name][part], dp["learners"][name][part], f"{name}/{part}")
    # Whole tensors in the checkpoint, the same on both processes; training moved them.
    saved = {n: fingerprint(fsdp["learners"][n]["model"]) for n in learners}
    critic = {"team/critic": fingerprint(fsdp["team"]["critic"])} if "mappo" in extra else {}
    assert [p["weights_sha256"] for p in fsdp["processes"]] == [saved | critic, saved | critic]
    (config,) = HfArgumentParser(TrainConfig).parse_args_into_dataclasses(args=args)
    plain = Trainer(config)  # one process, no FSDP: the initial weights, then the checkpoint's
    for name, learner in plain.learners.items():
        assert fingerprint(learner.state_dict()["model"]) != saved[name], "no update happened"
        learner.load_state_dict(fsdp["learners"][name])
        assert fingerprint(learner.state_dict()["model"]) == saved[name]
    if "mappo" in extra:  # the team's critic: sharded, stepped, saved whole, as the data-parallel run's
        for part in ("critic", "optimizer"):
            assert_states_close(fsdp["team"][part], dp["team"][part], f"critic/{part}")
        plain.team.load_state_dict(fsdp["team"])
        assert fingerprint(plain.team.state_dict()["critic"]) == fingerprint(fsdp["team"]["critic"])
    metrics = metrics["fsdp"]
    # explained_variance is NaN when the returns are all equal (as SB3's): difference rewards give the last agent
    # its own task reward, all 0 in this tiny first batch.
    metrics = metrics.drop(columns=["iteration", *metrics.filter(like="explained_variance").columns])
    assert np.isfinite(metrics.to_numpy(dtype=float)).all()
    # The exported Hugging Face models hold the whole weights too, gathered from the shards.
    for name in learners:
        exported = {run: load_file(tmp_path / run / "model" / name / "model.safetensors") for run in ("fsdp", "dp")}
        if name in later:
            close_but_for_rounding(exported["fsdp"], exported["dp"])
        else:
            assert_states_close(exported["fsdp"], exported["dp"], f"{name}/exported")


@pytest.mark.slow
def test_fsdp_resume_matches_an_uninterrupted_run(toy_model, tmp_path):
    common = ["--algo", "cory", "--role-exchange-period", "1", "--checkpoint-every", "1", "--gradient-checkpointing"]
    accelerate_launch(launch_args(toy_model, tmp_path / "whole", *common, "--iterations", "3"), FSDP_CONFIG)
    accelerate_launch(launch_args(toy_model, tmp_path / "split", *common, "--iterations", "2"), FSDP_CONFIG)
    resume = launch_args(toy_model, tmp_path / "split", *common, "--iterations", "3", "--resume")
    accelerate_launch(resume, FSDP_CONFIG)
    timing = ["tokens_per_s", "seconds"]
    a = pd.read_csv(tmp_path / "whole" / "metrics.csv").drop(columns=timing)
    b = pd.read_csv(tmp_path / "split" / "metrics.csv").drop(columns=timing)
    assert b["iteration"].tolist() == [0, 1, 2]
    pd.testing.assert_frame_equal(a, b, check_exact=True)
    whole, split = whole_state(tmp_path / "whole"), whole_state(tmp_path / "split")
    assert [p["weights_sha256"] for p in whole["processes"]] == [p["weights_sha256"] for p in split["processes"]]


def close_but_for_rounding(a, b) -> None:
    """Every tensor of two nested states within 1e-4, and at most 1% of their elements beyond float rounding."""
    if torch.is_tensor(a):
        if a.is_floating_point():
            assert (a - b).abs().max() < 1e-4
            assert (~torch.isclose(a, b, rtol=1e-4, atol=1e-6)).float().mean() < 0.01
        return
    for x, y in (
        zip(a.values(), b.values()) if isinstance(a, dict) else zip(a, b) if isinstance(a, (list, tuple)) else ()
    ):
        close_but_for_rounding(x, y)
