"""Per-iteration training metrics: a crash-safe CSV, the experiment trackers and sampled texts.

``<out_dir>/metrics.csv`` holds one row per iteration (wide format)::

    iteration,llm_0/task_reward_mean,llm_0/kl,llm_1/task_reward_mean,llm_1/kl,tokens_per_s
    0,0.12,0.0,0.10,0.0,812.5

Keys are ``"<learner>/<metric>"`` (``llm_0/kl``, ``llm_1/role``) or global, without a
slash (``tokens_per_s``, ``seconds``). The first row fixes the column order. A key first
seen later becomes a new last column: the file is rewritten atomically with the wider
header and earlier rows get an empty cell (NaN in ``read_metrics``). Every row is flushed,
so a killed run keeps what it logged.

The experiment trackers (``report_to``: TensorBoard by default, W&B, MLflow, ... through
accelerate's tracking API, :mod:`cory_agents.training.trackers`) get the same scalars, tags grouped by prefix
as in CleanRL: learner keys as they are, global keys under ``charts/``; and the run's settings
as hyperparameters. ``<out_dir>/samples.jsonl`` holds sampled texts, one JSON object per line.

Example::

    with MetricsLogger("runs/cory_s0", report_to="tensorboard,wandb", config={"lr": 3e-5}) as logger:
        for it in range(n_iterations):
            ...
            logger.log(it, {"llm_0/task_reward_mean": 0.4, "llm_0/kl": 1.2, "tokens_per_s": 900.0})
            logger.log_samples(it, [{"learner": "llm_0", "role": "pioneer",
                                     "query": q, "response": r, "reward": 0.4}])

Resuming from a checkpoint saved after iteration ``k``::

    logger = MetricsLogger("runs/cory_s0", resume=True)
    logger.truncate(after_iteration=k)  # drop what was logged after the checkpoint, before the crash

TensorBoard then hides the steps after ``k`` that the crashed run wrote; the other trackers
start a new run (docs/training.md, "Experiment trackers").
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from cory_agents.training.checkpoint import write_failure
from cory_agents.training.trackers import DEFAULT, Trackers, resolve_report_to
from cory_env.errors import CoryError
from cory_env.write_failures import write_whole

METRICS_FILE = "metrics.csv"
SAMPLES_FILE = "samples.jsonl"


class MetricsLogger:
    """Appends one row of scalars per iteration to ``metrics.csv`` (and to the experiment trackers).

    Args:
        out_dir: run folder; created if missing.
        resume: keep an existing ``metrics.csv`` / ``samples.jsonl`` and append to them;
            otherwise they are deleted and the run starts afresh.
        report_to: the experiment trackers, as ``--report-to``: ``"tensorboard"`` (event
            files in ``out_dir``), a comma-separated list, ``"all"`` or ``"none"``. An unknown
            or uninstalled tracker raises here, before any file is touched. The trackers start
            here (with ``resume``: in :meth:`truncate`, or on the first :meth:`log`).
        config: the run's settings, stored by the trackers as hyperparameters.
    """

    def __init__(
        self,
        out_dir: str | Path,
        resume: bool = False,
        *,
        report_to: str | Sequence[str] = DEFAULT,
        config: Mapping[str, Any] | None = None,
    ):
        trackers = resolve_report_to(report_to)  # a bad name fails before any file is touched
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.csv_path = self.out_dir / METRICS_FILE
        self.samples_path = self.out_dir / SAMPLES_FILE
        self.columns: list[str] = []  # "iteration" first, then metric keys in first-seen order
        if resume and self.csv_path.exists():
            self.columns, rows = _read_csv(self.csv_path)
            self._rewrite(self.csv_path, _csv_text(self.columns, rows))  # drops a last line cut short by a crash
        else:
            self.csv_path.unlink(missing_ok=True)
        if resume and self.samples_path.exists():
            self._rewrite(self.samples_path, _jsonl_text(_read_jsonl(self.samples_path)))
        else:
            self.samples_path.unlink(missing_ok=True)
        self._csv = open(self.csv_path, "a", newline="", encoding="utf-8")
        self._samples = open(self.samples_path, "a", encoding="utf-8")
        self.trackers = Trackers(trackers, self.out_dir, config=config)
        if not resume:  # a tracker that cannot start (a login, a server) fails now; a resume starts them in truncate()
            self.trackers.start()

    def log(self, iteration: int, metrics: dict[str, float]) -> None:
        """Append the row for ``iteration``; values may be floats, ints, numpy or 0-d torch scalars.

        Raises:
            RunWriteError: the file could not be written (a full disk, no permission).
        """
        if "iteration" in metrics:
            raise ValueError("'iteration' is the row key, not a metric")
        row = {key: float(value) for key, value in metrics.items()}
        try:
            if not self.columns:
                self.columns = ["iteration", *row]
                csv.writer(self._csv).writerow(self.columns)
            new_keys = [key for key in row if key not in self.columns]
            if new_keys:
                self._widen(new_keys)
            cells = [str(int(iteration))] + [_cell(row.get(key)) for key in self.columns[1:]]
            csv.writer(self._csv).writerow(cells)
            self._csv.flush()
        except RunWriteError:  # a rewrite's, which says so itself
            raise
        except OSError as exc:
            raise RunWriteError(write_failure(self.out_dir, self.csv_path, exc)) from exc

        self.trackers.log({key if "/" in key else f"charts/{key}": value for key, value in row.items()}, int(iteration))

    def log_samples(self, iteration: int, records: list[dict[str, Any]]) -> None:
        """Append one JSON line per record (learner, role, query, response, reward, ...), tagged with ``iteration``."""
        try:
            for record in records:
                self._samples.write(json.dumps({"iteration": int(iteration), **record}, default=_jsonable) + "\n")
            self._samples.flush()
        except OSError as exc:
            raise RunWriteError(write_failure(self.out_dir, self.samples_path, exc)) from exc

    def truncate(self, after_iteration: int) -> None:
        """Keep only what was logged for iterations ``<= after_iteration`` (CSV, samples, TensorBoard's view).

        Call it when resuming from a checkpoint saved after ``after_iteration``: the
        iterations logged after that checkpoint and before the crash are run again.
        Files are rewritten atomically (temporary file, then ``os.replace``).
        """
        self._csv.close()
        if self.columns:
            _, rows = _read_csv(self.csv_path)
            self._rewrite(self.csv_path, _csv_text(self.columns, [r for r in rows if int(r[0]) <= after_iteration]))
        self._csv = open(self.csv_path, "a", newline="", encoding="utf-8")

        self._samples.close()
        records = [r for r in _read_jsonl(self.samples_path) if r.get("iteration", 0) <= after_iteration]
        self._rewrite(self.samples_path, _jsonl_text(records))
        self._samples = open(self.samples_path, "a", encoding="utf-8")

        # TensorBoard hides events at steps >= purge_step written by earlier writers.
        self.trackers.restart(purge_step=after_iteration + 1)
        self.trackers.start()

    def close(self) -> None:
        """Flush and close the files and end the trackers' runs (safe to call twice).

        Raises:
            RunWriteError: what was left to write could not be written (every file is closed all the same).
        """
        failed = None
        for path, file in ((self.csv_path, self._csv), (self.samples_path, self._samples)):
            try:
                file.close()  # closed even when its last flush fails
            except OSError as exc:
                failed = failed or RunWriteError(write_failure(self.out_dir, path, exc))
        self.trackers.finish()
        if failed is not None:
            raise failed

    def __enter__(self) -> MetricsLogger:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        try:
            self.close()
        except RunWriteError:
            if exc_type is None:  # else the error that ends the block says what went wrong first
                raise

    def _widen(self, new_keys: list[str]) -> None:
        """Add columns at the end: rewrite the file with the wider header, old rows padded with empty cells."""
        self._csv.close()
        _, rows = _read_csv(self.csv_path)
        self.columns += new_keys
        self._rewrite(self.csv_path, _csv_text(self.columns, [r + [""] * len(new_keys) for r in rows]))
        self._csv = open(self.csv_path, "a", newline="", encoding="utf-8")

    def _rewrite(self, path: Path, text: str) -> None:
        """Replace ``path`` with ``text`` whole (:func:`~cory_env.write_failures.write_whole`); where that fails
        (a full disk), the file is as it was, and :class:`RunWriteError` says so."""
        try:
            write_whole(path, text)
        except OSError as exc:
            raise RunWriteError(write_failure(self.out_dir, path, exc, size=len(text.encode("utf-8")))) from exc


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


class RunWriteError(CoryError, OSError):
    """A file of the run's (metrics.csv, samples.jsonl) could not be written: a full disk, no permission.
    The checkpoints are written apart and atomically, so the last one is intact."""


def _read_csv(path: Path) -> tuple[list[str], list[list[str]]]:
    rows = list(csv.reader(_complete_lines(path)))
    if not rows:
        return [], []
    header = rows[0]
    return header, [r for r in rows[1:] if len(r) == len(header)]


def _csv_text(header: list[str], rows: list[list[str]]) -> str:
    text = io.StringIO(newline="")
    writer = csv.writer(text)
    if header:
        writer.writerow(header)
    writer.writerows(rows)
    return text.getvalue()


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


def _jsonl_text(records: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(r) + "\n" for r in records)


def _jsonable(value: Any) -> Any:
    """numpy arrays/scalars and torch tensors to plain Python, for ``json.dumps``."""
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")
