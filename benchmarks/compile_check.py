"""Eager against compiled decoding (``--compile``) where users train: a GPU, side by side, in one run.

Three measurements, each a ratio of two paths run interleaved in this process:

1. the overhead-bound regime (rollout.py ``--tiny``'s model: 2 layers, 64 wide, vocabulary 1024) at batch 8
   and 64: decode tokens/s of the eager actor, the compiled actor, ``generate`` and ``generate`` with a
   static cache and a compiled forward;
2. the embedded model's architecture (SmolLM2-135M, its weights if installed, else random) at batch 8
   and 64, bf16 autocast: the eager actor against the compiled one (CUDA graphs on a GPU);
3. a CORY training iteration (batch 64, 10 new tokens, bf16, as benchmarks/cuda_check.py trains), without
   and with ``--compile``: seconds, and the matmul floor (the iteration's matmul FLOPs, counted with
   ``FlopCounterMode``, at the device's measured bf16 matmul rate) and each time over it;
4. the update's passes (benchmarks/update_passes.py) on the embedded model at batch 64, bf16: a pass without
   gradients and a forward + backward, eager against ``torch.compile(dynamic=True)``, and the iterations that
   win the compile back (on a CPU compiling them does not pay: docs/benchmarks.md).

It prints each figure as it goes and writes them all to ``--out`` (JSON). Meant to finish in under 8
minutes on one GPU (the compiles included); ``--device cpu --quick`` checks the script on a CPU.

    python benchmarks/compile_check.py --out compile_check.json          # or: python benchmarks/cuda_check.py --compile-check
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python benchmarks/compile_check.py` from anywhere

from benchmarks.iteration import gemm_rate  # noqa: E402
from benchmarks.rollout import decode_paths, decode_rates, decode_ratios, synchronized, tiny_llama  # noqa: E402
from cory_agents.cli.errors import one_line_errors  # noqa: E402
from cory_agents.evaluation.report import check_output_file, write_json  # noqa: E402

PROMPT = 32


def tiny(device: str, new_tokens: int, rounds: int, batches: tuple[int, ...]) -> dict:
    model, out = tiny_llama().to(device), {}
    for B in batches:
        prompt = torch.randint(3, 1024, (B, PROMPT), device=device)
        rates, _ = decode_rates(
            decode_paths(model, PROMPT + new_tokens), prompt, new_tokens, rounds, synchronized(device)
        )
        out[f"b{B}"] = {name: statistics.median(r) for name, r in rates.items()} | decode_ratios(rates)
        print(f"tiny B={B}", json.dumps(out[f"b{B}"]), flush=True)
    return out


def embedded(device: str, new_tokens: int, rounds: int, batches: tuple[int, ...], bf16: bool) -> dict:
    from benchmarks.cuda_check import model_path
    from cory_env.models import load_causal_lm

    with tempfile.TemporaryDirectory() as folder:
        model = load_causal_lm(model_path(Path(folder)), device=device).eval()
    now, out = synchronized(device), {}
    vocab = model.config.vocab_size
    for B in batches:
        paths = decode_paths(model, PROMPT + new_tokens, bf16=bf16, generate=False)
        prompt = torch.randint(3, vocab, (B, PROMPT), device=device)
        rates, _ = decode_rates(paths, prompt, new_tokens, rounds, now)
        out[f"b{B}"] = {name: statistics.median(r) for name, r in rates.items()} | decode_ratios(rates)
        print(f"embedded B={B}", json.dumps(out[f"b{B}"]), flush=True)
    return out


def iteration(device: str, batch: int, iterations: int) -> dict:
    """A CORY iteration at bf16 without and with ``--compile``: seconds, and over the matmul floor."""
    from torch.utils.flop_counter import FlopCounterMode

    from benchmarks.cuda_check import model_path
    from cory_agents.training.config import TrainConfig
    from cory_agents.training.trainer import Trainer

    now, out, trainers = synchronized(device), {}, {}
    with tempfile.TemporaryDirectory() as folder:
        name = model_path(Path(folder))
        for compiled in (False, True):
            config = TrainConfig(
                algo="cory", model=name, bf16=device == "cuda", device=device, batch_size=batch,
                mini_batch_size=max(1, batch // 4), min_new_tokens=10, max_new_tokens=10, kl_estimator="full",
                prompt_source="rotten_tomatoes", out=str(Path(folder) / f"run{int(compiled)}"), report_to="none",
                checkpoint_every=10**6, compile=compiled,
            )  # fmt: skip
            trainers[compiled] = Trainer(config)
            trainers[compiled].run_iteration()  # warm-up: the compiles
        times: dict[bool, list[float]] = {False: [], True: []}
        for _ in range(iterations):  # interleaved
            for compiled, trainer in trainers.items():
                start = now()
                trainer.run_iteration()
                times[compiled].append(now() - start)
        with FlopCounterMode(display=False) as counter:
            trainers[False].run_iteration()
    rate = gemm_rate(device, device == "cuda")
    floor = counter.get_total_flops() / rate
    eager, compiled = statistics.median(times[False]), statistics.median(times[True])
    out = {
        "eager_s": eager,
        "compiled_s": compiled,
        "compiled/eager_time": compiled / eager,
        "matmul_tflop": counter.get_total_flops() / 1e12,
        "matmul_rate_tflops": rate / 1e12,
        "floor_s": floor,
        "eager/floor": eager / floor,
        "compiled/floor": compiled / floor,
    }
    print("cory iteration", json.dumps(out), flush=True)
    return out


def update_passes(device: str, batch: int, quick: bool) -> dict:
    """The update's passes eager against compiled (benchmarks/update_passes.py); the tiny model when ``quick``."""
    from benchmarks import update_passes as passes
    from benchmarks.cuda_check import model_path

    settings = argparse.Namespace(
        device=device,
        bf16=device == "cuda",
        batch_size=batch,
        mini_batch_size=None,
        response=10,
        ppo_epochs=1,
        rounds=1 if quick else 3,
    )
    with tempfile.TemporaryDirectory() as folder:
        out = passes.measure("tiny" if quick else "embedded", settings, None if quick else model_path(Path(folder)))
    print("update passes", json.dumps(out), flush=True)
    return out


@one_line_errors
def main(argv: list[str]) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="compile_check.json", help="where to write the results")
    p.add_argument("--device", default="cuda", help="cuda (cpu to check the script itself)")
    p.add_argument("--quick", action="store_true", help="fewer tokens, rounds and batches: a check of the script")
    args = p.parse_args(argv)
    check_output_file(args.out, example=p.get_default("out"))  # before the run, which writes it at the end
    new_tokens, rounds, batches, batch = (8, 1, (8,), 4) if args.quick else (32, 3, (8, 64), 64)
    start = time.perf_counter()
    name = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    results: dict = {"device": name, "torch": torch.__version__}
    results["tiny"] = tiny(args.device, new_tokens, rounds, batches)
    results["embedded"] = embedded(args.device, new_tokens, rounds, batches, bf16=args.device == "cuda")
    results["cory_iteration"] = iteration(args.device, batch, 1 if args.quick else 3)
    results["update_passes"] = update_passes(args.device, batch, quick=args.quick)
    results["seconds"] = time.perf_counter() - start
    write_json(args.out, results)
    print(f"{results['seconds']:.0f} s in all; {args.out}", flush=True)
    return results


if __name__ == "__main__":
    main()
