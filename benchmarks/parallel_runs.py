"""``cory-bench --jobs``: runs in parallel processes of one thread each against one run at a time, side by side.

A benchmark's runs are independent, so they may share the machine two ways: one run at a time with every
thread (``--jobs 1``), or N runs at once in processes of one thread each (``--jobs N``). This script trains
the same ``--runs`` seeds of CORY on the signalling game, on the embedded model, both ways (each in a fresh
temporary folder, the same settings), and prints the wall time of each and their ratio: the throughput of
``--jobs N`` in runs per hour over that of ``--jobs 1``.

    python benchmarks/parallel_runs.py                      # 2 runs, --jobs 2, 4 iterations of batch 32
    python benchmarks/parallel_runs.py --runs 4 --jobs 4 --iterations 2 --model tiny
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python benchmarks/parallel_runs.py` from anywhere

from cory_agents.evaluation import reward_benchmark  # noqa: E402


def wall_time(jobs: int, args: argparse.Namespace) -> float:
    """Seconds ``cory-bench --jobs JOBS`` takes to train ``args.runs`` seeds of CORY from scratch."""
    with tempfile.TemporaryDirectory(prefix="cory-jobs-") as folder:
        argv = [
            *("--task", "signal", "--reward", "signal", "--prompt-source", "auto", "--model", args.model),
            *("--algos", "cory", "--seeds", str(args.runs), "--iterations", str(args.iterations)),
            *("--batch-size", str(args.batch_size), "--report-to", "none", "--checkpoint-every", "100"),
            *("--jobs", str(jobs), "--progress", "False", "--out", str(Path(folder) / "bench")),
        ]
        start = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()):  # the benchmark's report: not what is measured
            reward_benchmark.main(argv)
        return time.perf_counter() - start


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=2, help="seeds trained each way")
    parser.add_argument("--jobs", type=int, default=2, help="processes of the parallel way")
    parser.add_argument("--iterations", type=int, default=4, help="iterations per run")
    parser.add_argument("--batch-size", type=int, default=32, help="conversations per iteration")
    parser.add_argument("--model", default="smollm2-135m", help="the model (default: the embedded one)")
    args = parser.parse_args(argv)
    if args.runs < 1 or args.jobs < 2:
        parser.error(f"--runs must be at least 1 and --jobs at least 2, got {args.runs} and {args.jobs}")
    one = wall_time(1, args)
    parallel = wall_time(args.jobs, args)
    print(
        f"{args.runs} runs of CORY on the signalling game ({args.iterations} iterations, batch {args.batch_size}, "
        f"{args.model}): --jobs 1 {one:.1f} s, --jobs {args.jobs} {parallel:.1f} s; throughput of --jobs "
        f"{args.jobs} / --jobs 1: {one / parallel:.2f}x"
    )


if __name__ == "__main__":
    main()
