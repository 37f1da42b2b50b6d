"""One-shot check of FSDP training on GPUs (examples/accelerate/fsdp.yaml), for a machine with CUDA.

With N GPUs (N = min(2, GPUs)), for CORY and for PPO with gradient accumulation:

1. ``accelerate launch --config_file examples/accelerate/fsdp.yaml --num_processes N``: one
   iteration with the weights sharded over the N processes (NCCL; with one GPU, FSDP over a
   group of one process, which runs the same sharded code path);
2. the same run with ``multi_gpu.yaml`` (data parallel, gradient all-reduce; with one GPU a
   plain run);
3. checks that both end with the same weights and Adam state (to float rounding), that the
   checkpoint holds whole tensors and that training moved them; then one FSDP run of 2
   iterations with ``fsdp_reshard_after_forward false`` and ``--bf16``, finite metrics.

A tiny random Llama over a toy word tokenizer (tests/support/toy.py): five short launches, no download.

    HF_HUB_OFFLINE=1 PYTHONPATH=. python benchmarks/fsdp_check.py --out fsdp_check.json
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
import pandas as pd
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cory_agents.cli.errors import one_line_errors  # noqa: E402
from cory_agents.distributed.data_parallel import fingerprint  # noqa: E402
from cory_agents.evaluation.report import check_output_file, write_json  # noqa: E402
from cory_agents.training.checkpoint import latest_checkpoint, load_checkpoint  # noqa: E402
from tests.support.toy import save_tiny_llama, toy_tokenizer  # noqa: E402

CONFIGS = ROOT / "examples" / "accelerate"


def launch(config: str, processes: int, model: Path, out: Path, *extra: str) -> dict:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    launcher = [a for a in extra if a.startswith("--fsdp_")]
    trainer = [a for a in extra if not a.startswith("--fsdp_")]
    command = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--config_file",
        str(CONFIGS / config),
        "--num_processes",
        str(processes),
        "--main_process_port",
        str(port),
        *" ".join(launcher).split(),
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
        *" ".join(trainer).split(),
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    start = time.perf_counter()
    result = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    report = dict(
        config=config, processes=processes, returncode=result.returncode, seconds=round(time.perf_counter() - start, 1)
    )
    if result.returncode != 0:
        report["stderr_tail"] = result.stderr[-3000:]
    return report


def max_difference(a, b) -> float:
    """Largest absolute difference between two nested states' float tensors (inf if they differ in form)."""
    if torch.is_tensor(a):
        if not torch.is_tensor(b) or a.shape != b.shape:
            return float("inf")
        return float((a.double() - b.double()).abs().max()) if a.numel() and a.is_floating_point() else 0.0
    if isinstance(a, dict):
        if set(a) != set(b):
            return float("inf")
        return max([max_difference(a[k], b[k]) for k in a] or [0.0])
    return 0.0


def compare(model: Path, tmp: Path, processes: int, name: str, extra: str) -> dict:
    runs = {
        "fsdp": launch("fsdp.yaml", processes, model, tmp / f"{name}-fsdp", "--iterations 1", extra),
        "data_parallel": launch("multi_gpu.yaml", processes, model, tmp / f"{name}-dp", "--iterations 1", extra),
    }
    report: dict = {"runs": runs}
    if any(r["returncode"] for r in runs.values()):
        return report
    fsdp = load_checkpoint(latest_checkpoint(tmp / f"{name}-fsdp"))
    dp = load_checkpoint(latest_checkpoint(tmp / f"{name}-dp"))
    report["max_abs_difference"] = {
        n: {part: max_difference(fsdp["learners"][n][part], dp["learners"][n][part]) for part in ("model", "optimizer")}
        for n in dp["learners"]
    }
    report["whole_tensors_on_cpu"] = all(
        t.device.type == "cpu" for s in fsdp["learners"].values() for t in s["model"].values()
    )
    saved = {n: fingerprint(s["model"]) for n, s in fsdp["learners"].items()}
    processes = fsdp.get("processes") or [{"weights_sha256": saved}]  # none with one process
    report["processes_agree"] = all(p["weights_sha256"] == saved for p in processes)
    report["ok"] = (
        report["whole_tensors_on_cpu"]
        and report["processes_agree"]
        and all(d["model"] < 1e-4 and d["optimizer"] < 1e-4 for d in report["max_abs_difference"].values())
    )
    return report


@one_line_errors
def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="fsdp_check.json")
    args = parser.parse_args(argv)
    check_output_file(args.out, example=parser.get_default("out"))  # before the run, which writes it at the end
    if not torch.cuda.is_available():
        sys.exit(
            "no CUDA device: this check is for a GPU machine "
            "(tests/agents/distributed/test_fsdp.py covers the CPU paths)"
        )
    processes = min(2, torch.cuda.device_count())
    report: dict = {
        "gpus": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())],
        "torch": torch.__version__,
        "processes": processes,
    }
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        model = save_tiny_llama(tmp / "model", toy_tokenizer())
        for name, extra in [("cory", "--algo cory"), ("ppo", "--algo ppo --gradient-accumulation-steps 2")]:
            report[name] = compare(model, tmp, processes, name, extra)
            print(name, json.dumps(report[name], indent=2), flush=True)
        bf16 = launch(
            "fsdp.yaml",
            processes,
            model,
            tmp / "bf16",
            "--iterations 2 --bf16 --algo cory",
            "--fsdp_reshard_after_forward false",
        )
        if bf16["returncode"] == 0:
            metrics = pd.read_csv(tmp / "bf16" / "metrics.csv")
            bf16["metrics_finite"] = bool(np.isfinite(metrics.drop(columns=["iteration"]).to_numpy(float)).all())
        report["bf16_no_reshard"] = bf16
        print("bf16_no_reshard", json.dumps(bf16, indent=2), flush=True)
    report["ok"] = report["cory"].get("ok") and report["ppo"].get("ok") and bf16.get("metrics_finite", False)
    write_json(args.out, report)
    print(f"ok={report['ok']}; wrote {args.out}")


if __name__ == "__main__":
    main()
