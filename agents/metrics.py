"""Per-iteration training metrics: a crash-safe CSV, TensorBoard scalars and sampled texts.

``<out_dir>/metrics.csv`` holds one row per iteration (wide format)::

    iteration,llm_0/task_reward_mean,llm_0/kl,llm_1/task_reward_mean,llm_1/kl,tokens_per_s
    0,0.12,0.0,0.10,0.0,812.5

Keys are ``"<learner>/<metric>"`` (``llm_0/kl``, ``llm_1/role``) or global, without a
slash (``tokens_per_s``, ``seconds``). The first row fixes the column order. A key first
seen later becomes a new last column: the file is rewritten atomically with the wider
header and earlier rows get an empty cell (NaN in ``read_metrics``). Every row is flushed,
so a killed run keeps what it logged.

TensorBoard gets the same scalars, tags grouped by prefix as in CleanRL: learner keys as
they are, global keys under ``charts/``. ``<out_dir>/samples.jsonl`` holds sampled texts,
one JSON object per line.

Example::

    with MetricsLogger("runs/cory_s0") as logger:
        for it in range(n_iterations):
            ...
            logger.log(it, {"llm_0/task_reward_mean": 0.4, "llm_0/kl": 1.2, "tokens_per_s": 900.0})
            logger.log_samples(it, [{"learner": "llm_0", "role": "pioneer",
                                     "query": q, "response": r, "reward": 0.4}])

Resuming from a checkpoint saved after iteration ``k``::

    logger = MetricsLogger("runs/cory_s0", resume=True)
    logger.truncate(after_iteration=k)  # drop what was logged after the checkpoint, before the crash
"""

from __future__ import annotations

import csv
import json
import os
import warnings
from pathlib import Path
from typing import Any

import pandas as pd

METRICS_FILE = "metrics.csv"
SAMPLES_FILE = "samples.jsonl"


class MetricsLogger:
    """Appends one row of scalars per iteration to ``metrics.csv`` (and TensorBoard).

    Args:
        out_dir: run folder; created if missing.
        tensorboard: also write TensorBoard event files into ``out_dir`` (skipped, with
            one warning, if ``torch.utils.tensorboard`` cannot be imported).
        resume: keep an existing ``metrics.csv`` / ``samples.jsonl`` and append to them;
            otherwise they are deleted and the run starts afresh.
    """

    def __init__(self, out_dir: str | Path, tensorboard: bool = True, resume: bool = False):
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.csv_path = self.out_dir / METRICS_FILE
        self.samples_path = self.out_dir / SAMPLES_FILE
        self.columns: list[str] = []  # "iteration" first, then metric keys in first-seen order
        if resume and self.csv_path.exists():
            self.columns, rows = _read_csv(self.csv_path)
            _write_csv(self.csv_path, self.columns, rows)  # drops a last line cut short by a crash
        else:
            self.csv_path.unlink(missing_ok=True)
        if resume and self.samples_path.exists():
            _write_jsonl(self.samples_path, _read_jsonl(self.samples_path))
        else:
            self.samples_path.unlink(missing_ok=True)
        self._csv = open(self.csv_path, "a", newline="", encoding="utf-8")
        self._samples = open(self.samples_path, "a", encoding="utf-8")
        self._tensorboard = tensorboard
        self._writer: Any = None  # SummaryWriter, created on the first log()
        self._purge_step: int | None = None

    def log(self, iteration: int, metrics: dict[str, float]) -> None:
        """Append the row for ``iteration``; values may be floats, ints, numpy or 0-d torch scalars."""
        if "iteration" in metrics:
            raise ValueError("'iteration' is the row key, not a metric")
        row = {key: float(value) for key, value in metrics.items()}
        if not self.columns:
            self.columns = ["iteration", *row]
            csv.writer(self._csv).writerow(self.columns)
        new_keys = [key for key in row if key not in self.columns]
        if new_keys:
            self._widen(new_keys)
        cells = [str(int(iteration))] + [_cell(row.get(key)) for key in self.columns[1:]]
        csv.writer(self._csv).writerow(cells)
        self._csv.flush()

        writer = self._tb_writer()
        if writer is not None:
            for key, value in row.items():
                writer.add_scalar(key if "/" in key else f"charts/{key}", value, int(iteration))
            writer.flush()

    def log_samples(self, iteration: int, records: list[dict[str, Any]]) -> None:
        """Append one JSON line per record (learner, role, query, response, reward, ...), tagged with ``iteration``."""
        for record in records:
            self._samples.write(json.dumps({"iteration": int(iteration), **record}, default=_jsonable) + "\n")
        self._samples.flush()

    def truncate(self, after_iteration: int) -> None:
        """Keep only what was logged for iterations ``<= after_iteration`` (CSV, samples, TensorBoard).

        Call it when resuming from a checkpoint saved after ``after_iteration``: the
        iterations logged after that checkpoint and before the crash are run again.
        Files are rewritten atomically (temporary file, then ``os.replace``).
        """
        self._csv.close()
        if self.columns:
            _, rows = _read_csv(self.csv_path)
            _write_csv(self.csv_path, self.columns, [r for r in rows if int(r[0]) <= after_iteration])
        self._csv = open(self.csv_path, "a", newline="", encoding="utf-8")

        self._samples.close()
        records = [r for r in _read_jsonl(self.samples_path) if r.get("iteration", 0) <= after_iteration]
        _write_jsonl(self.samples_path, records)
        self._samples = open(self.samples_path, "a", encoding="utf-8")

        # TensorBoard hides events at steps >= purge_step written by earlier writers.
        self._purge_step = after_iteration + 1
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def close(self) -> None:
        """Flush and close the files and the TensorBoard writer (safe to call twice)."""
        self._csv.close()
        self._samples.close()
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def __enter__(self) -> MetricsLogger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _widen(self, new_keys: list[str]) -> None:
        """Add columns at the end: rewrite the file with the wider header, old rows padded with empty cells."""
        self._csv.close()
        _, rows = _read_csv(self.csv_path)
        self.columns += new_keys
        _write_csv(self.csv_path, self.columns, [r + [""] * len(new_keys) for r in rows])
        self._csv = open(self.csv_path, "a", newline="", encoding="utf-8")

    def _tb_writer(self) -> Any:
        if self._tensorboard and self._writer is None:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError as err:  # tensorboard not installed
                warnings.warn(f"TensorBoard logging disabled: {err}", stacklevel=3)
                self._tensorboard = False
                return None
            self._writer = SummaryWriter(log_dir=str(self.out_dir), purge_step=self._purge_step)
        return self._writer


def read_metrics(path: str | Path) -> pd.DataFrame:
    """Load ``metrics.csv`` (the file or its run folder) as a DataFrame; missing cells are NaN."""
    path = Path(path)
    return pd.read_csv(path / METRICS_FILE if path.is_dir() else path)


def _cell(value: float | None) -> str:
    return "" if value is None else repr(value)


def _complete_lines(path: Path) -> list[str]:
    """The file's lines, without a last line that a crash cut short (no newline at its end)."""
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines.pop()
    return lines


def _read_csv(path: Path) -> tuple[list[str], list[list[str]]]:
    rows = list(csv.reader(_complete_lines(path)))
    if not rows:
        return [], []
    header = rows[0]
    return header, [r for r in rows[1:] if len(r) == len(header)]


def _write_csv(path: Path, header: list[str], rows: list[list[str]]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        if header:
            writer.writerow(header)
        writer.writerows(rows)
    os.replace(tmp, path)


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    records = []
    for line in _complete_lines(path):
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records


def _write_jsonl(path: Path, records: list[dict[str, Any]]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.writelines(json.dumps(r) + "\n" for r in records)
    os.replace(tmp, path)


def _jsonable(value: Any) -> Any:
    """numpy arrays/scalars and torch tensors to plain Python, for ``json.dumps``."""
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")
