"""One-shot check of multi-device training, for a machine with one or more GPUs.

1. ``--learner-devices``: CORY with llm_0 and llm_1 on different devices (``cuda:0,cuda:1``
   with two GPUs; ``cuda:0,cpu`` with one, which crosses devices just the same). Checks that
   each learner's weights, sampling generator and frozen reference sit on its device, that
   two iterations run with finite metrics and change the weights; reports peak memory per GPU.
2. With two GPUs or more: ``accelerate launch`` with examples/accelerate/multi_gpu.yaml, one
   process per GPU (NCCL), 2 iterations; checks that every process ended with the weights the
   main process saved (the checkpoint's per-process fingerprints).

A tiny random Llama over a toy word tokenizer (tests/support/toy.py) keeps it short and needs no
download.

    HF_HUB_OFFLINE=1 PYTHONPATH=. python benchmarks/multi_device_check.py --out multi_device_check.json
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cory_agents.cli.errors import one_line_errors  # noqa: E402
from cory_agents.distributed.data_parallel import fingerprint  # noqa: E402
from cory_agents.evaluation.report import check_output_file, write_json  # noqa: E402
from cory_agents.training.checkpoint import latest_checkpoint, load_checkpoint  # noqa: E402
from cory_agents.training.config import TrainConfig  # noqa: E402
from cory_agents.training.trainer import Trainer  # noqa: E402
from tests.support.toy import fraction_good, save_tiny_llama, toy_tokenizer  # noqa: E402

PROMPTS = ["the movie was", "the plot is", "acting is very"]


def learner_placement(model: Path, out: Path, devices: str) -> dict:
    config = TrainConfig(
        model=str(model),
        algo="cory",
        learner_devices=devices,
        iterations=2,
        batch_size=16,
        mini_batch_size=8,
        ppo_epochs=2,
        lr=1e-2,
        min_new_tokens=4,
        max_new_tokens=6,
        context_length=48,
        out=str(out),
        report_to="none",
        role_exchange_period=1,
    )
    for i in range(torch.cuda.device_count()):
        torch.cuda.reset_peak_memory_stats(i)
    trainer = Trainer(config, prompts=PROMPTS, reward_fn=fraction_good)
    wanted = dict(zip(trainer.learners, [torch.device(d) for d in devices.split(",")]))
    placement = {}
    for name, learner in trainer.learners.items():
        model_devices = {str(p.device) for p in learner.model.parameters()}
        reference_devices = {str(p.device) for p in learner.reference.parameters()}
        placement[name] = dict(
            model=sorted(model_devices),
            reference=sorted(reference_devices),
            sampling_generator=str(learner.sampling_generator.device),
        )
        want = wanted[name].type
        ok = all(torch.device(d).type == want for d in model_devices | reference_devices)
        assert ok and learner.sampling_generator.device.type == want, (name, placement[name])
    before = {n: fingerprint(learner.trainable_state_dict()) for n, learner in trainer.learners.items()}
    start = time.perf_counter()
    metrics = [trainer.run_iteration()[0] for _ in range(config.iterations)]
    seconds = time.perf_counter() - start
    after = {n: fingerprint(learner.trainable_state_dict()) for n, learner in trainer.learners.items()}
    finite = all(np.isfinite(v) for m in metrics for v in m.values())
    assert finite, metrics
    assert all(before[n] != after[n] for n in before), "a learner did not update"
    return dict(
        learner_devices=devices,
        placement=placement,
        seconds=round(seconds, 2),
        metrics_finite=finite,
        weights_changed=True,
        roles=[m["llm_0/role"] for m in metrics],
        peak_memory_mib={
            f"cuda:{i}": round(torch.cuda.max_memory_allocated(i) / 2**20, 1) for i in range(torch.cuda.device_count())
        },
    )


def data_parallel_launch(model: Path, out: Path, processes: int) -> dict:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    command = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--config_file",
        str(ROOT / "examples" / "accelerate" / "multi_gpu.yaml"),
        "--num_processes",
        str(processes),
        "--main_process_port",
        str(port),
        str(ROOT / "examples" / "train_cory.py"),
        "--model",
        str(model),
        "--reward",
        "tests.support.toy:fraction_good",
        "--prompt-source",
        "rotten_tomatoes",
        "--batch-size",
        "8",
        "--mini-batch-size",
        "4",
        "--ppo-epochs",
        "2",
        "--lr",
        "1e-2",
        "--iterations",
        "2",
        "--min-new-tokens",
        "3",
        "--max-new-tokens",
        "5",
        "--context-length",
        "48",
        "--out",
        str(out),
        "--report-to",
        "none",
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    start = time.perf_counter()
    result = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, timeout=900)
    report = dict(processes=processes, returncode=result.returncode, seconds=round(time.perf_counter() - start, 1))
    if result.returncode != 0:
        report["stderr_tail"] = result.stderr[-3000:]
        return report
    state = load_checkpoint(latest_checkpoint(out))
    saved = {n: fingerprint(s["model"]) for n, s in state["learners"].items()}
    report["processes_in_sync"] = all(p["weights_sha256"] == saved for p in state["processes"])
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    report["sample_processes"] = sorted({s["process"] for s in samples})
    return report


@one_line_errors
def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="multi_device_check.json")
    args = parser.parse_args(argv)
    check_output_file(args.out, example=parser.get_default("out"))  # before the run, which writes it at the end
    if not torch.cuda.is_available():
        sys.exit(
            "no CUDA device: this check is for a GPU machine "
            "(tests/agents/distributed/test_distributed.py covers the CPU paths)"
        )
    gpus = torch.cuda.device_count()
    report: dict = {"gpus": [torch.cuda.get_device_name(i) for i in range(gpus)], "torch": torch.__version__}
    with tempfile.TemporaryDirectory() as tmp:
        model = save_tiny_llama(Path(tmp) / "model", toy_tokenizer())
        devices = "cuda:0,cuda:1" if gpus >= 2 else "cuda:0,cpu"
        report["learner_placement"] = learner_placement(model, Path(tmp) / "placement", devices)
        print(json.dumps(report["learner_placement"], indent=2), flush=True)
        if gpus >= 2:
            report["data_parallel"] = data_parallel_launch(model, Path(tmp) / "dp", gpus)
        else:
            report["data_parallel"] = "skipped: needs 2 GPUs (NCCL cannot run two processes on one GPU)"
        print(json.dumps(report["data_parallel"], indent=2), flush=True)
    write_json(args.out, report)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
