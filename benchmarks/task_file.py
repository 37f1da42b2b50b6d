"""A large task file against a small one: time to the end of the first iteration, and peak memory.

Each run is a fresh process (its peak resident memory is its own): ``cory-train``'s run, built from
a config with ``--task-file``, on a tiny random Llama over the toy tokenizer (the model costs next to
nothing, so what differs is the file), through one PPO iteration. The file is the signalling game's
rows (``query``, ``secret``, ``words``), ``--rows`` of them against 3, written once into ``--folder``.

Target (issue 48): a file of 1,000,000 rows reaches the end of its first iteration within 10 s and
1 GB of the 3-row file's. The task file streams (cory_env.tasks.prompt_file): it is read once, row by
row, and only where each row starts is kept.

    python benchmarks/task_file.py --rows 1000000
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: Run in a fresh process: build the run, play and learn one iteration; print seconds and peak memory.
ONE_RUN = """
import json, resource, sys, time
start = time.perf_counter()
from cory_agents.training.config import TrainConfig
from cory_agents.training.trainer import Trainer
model, task_file, out = sys.argv[1:4]
config = TrainConfig(
    model=model, task="signal", task_file=task_file, algo="cory", iterations=1, batch_size=4, mini_batch_size=4,
    ppo_epochs=1, out=out, report_to="none", context_length=128, checkpoint_every=100,
)
trainer = Trainer(config)
built = time.perf_counter()
trainer.run_iteration()
done = time.perf_counter()
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # kilobytes on Linux
print(json.dumps({"build_s": built - start, "first_iteration_s": done - start, "peak_bytes": peak}))
"""

WORDS = ["red", "blue", "green", "gold"]


def write_rows(path: Path, rows: int) -> Path:
    """``rows`` signalling-game rows, the secret cycling through the words."""
    if not path.exists():
        with path.open("w") as f:
            for i in range(rows):
                f.write(json.dumps({"query": f"round {i}", "secret": WORDS[i % 4], "words": ", ".join(WORDS)}) + "\n")
    return path


def one_run(model: Path, task_file: Path, out: Path) -> dict[str, float]:
    result = subprocess.run(
        [sys.executable, "-c", ONE_RUN, str(model), str(task_file), str(out)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    if result.returncode != 0:
        raise SystemExit(f"the run of {task_file} failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows of the large file")
    parser.add_argument("--folder", type=Path, default=None, help="where the files go (default: a new temporary one)")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from tests.support.toy import save_tiny_llama, toy_tokenizer

    folder = args.folder or Path(tempfile.mkdtemp(prefix="cory-task-file-"))
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = toy_tokenizer()
    model = save_tiny_llama(folder / "model", tokenizer) if not (folder / "model").exists() else folder / "model"
    small = write_rows(folder / "rows-3.jsonl", 3)
    large = write_rows(folder / f"rows-{args.rows}.jsonl", args.rows)
    print(f"{large}: {large.stat().st_size / 2**20:.0f} MiB", flush=True)
    runs = {name: one_run(model, path, folder / f"run-{name}") for name, path in (("3 rows", small), ("large", large))}
    for name, r in runs.items():
        print(
            f"{name:>8}: build {r['build_s']:.1f} s, first iteration done at {r['first_iteration_s']:.1f} s, "
            f"peak {r['peak_bytes'] / 2**30:.2f} GiB"
        )
    extra_s = runs["large"]["first_iteration_s"] - runs["3 rows"]["first_iteration_s"]
    extra_gib = (runs["large"]["peak_bytes"] - runs["3 rows"]["peak_bytes"]) / 2**30
    print(
        f"{args.rows} rows over 3: +{extra_s:.1f} s to the first iteration's end (target < 10 s), "
        f"+{extra_gib:.2f} GiB peak (target < 1 GiB)"
    )


if __name__ == "__main__":
    main()
