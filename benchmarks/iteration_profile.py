"""Where a CORY training iteration's time goes beyond its matrix multiplies: one profiled iteration.

The settings are benchmarks/iteration.py's (the embedded model, batch 8, 10 new tokens, 4 PPO epochs,
full-vocabulary KL). After a warm-up iteration, one iteration runs under ``torch.profiler``; its wall time
is split into the matrix multiplies (``mm``, ``addmm``, ``bmm``, their backward kernels and the fused
attention), the other ATen operators by kind (the top ones by self time, CPU), and what no operator
accounts for (Python: the environment, the actor's loop, the learners' bookkeeping).

    python benchmarks/iteration_profile.py
    python benchmarks/iteration_profile.py --compile      # the same with --compile
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python benchmarks/iteration_profile.py` from anywhere

from cory_agents.training.config import TrainConfig  # noqa: E402
from cory_agents.training.trainer import Trainer  # noqa: E402

MATMULS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::_scaled_dot_product", "aten::_mkl_linear", "aten::linear")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--compile", action="store_true", help="decode with a static cache and a compiled step")
    p.add_argument("--top", type=int, default=12, help="non-matmul operators listed")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as out:
        config = TrainConfig(
            algo="cory", batch_size=8, mini_batch_size=8, min_new_tokens=10, max_new_tokens=10, ppo_epochs=4,
            kl_estimator="full", prompt_source="rotten_tomatoes", out=out, report_to="none",
            checkpoint_every=10**6, compile=args.compile,
        )  # fmt: skip
        trainer = Trainer(config)
        trainer.run_iteration()  # warm-up
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            start = time.perf_counter()
            trainer.run_iteration()
            wall = time.perf_counter() - start
    events = prof.key_averages()
    self_s = {e.key: e.self_cpu_time_total / 1e6 for e in events}
    matmul = sum(s for k, s in self_s.items() if k.startswith(MATMULS) or "mkldnn" in k or "_linear" in k)
    others = sorted(((s, k) for k, s in self_s.items() if not (k.startswith(MATMULS) or "mkldnn" in k)), reverse=True)
    ops = sum(self_s.values())
    print(f"CORY iteration{' with --compile' if args.compile else ''}: {wall:.2f} s wall")
    print(f"  matrix multiplies (self time):  {matmul:6.2f} s  {matmul / wall:5.1%}")
    print(f"  other operators (self time):    {ops - matmul:6.2f} s  {(ops - matmul) / wall:5.1%}")
    print(f"  outside any operator (Python):  {wall - ops:6.2f} s  {(wall - ops) / wall:5.1%}")
    print(f"  the other operators, by self time (top {args.top}):")
    for seconds, key in others[: args.top]:
        print(f"    {key:45s} {seconds:6.3f} s  {seconds / wall:5.1%}")


if __name__ == "__main__":
    main()
