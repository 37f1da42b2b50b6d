"""Writing evaluation results: strict JSON, readable Markdown tables, a script's section of a page.

Shared by :mod:`cory_agents.evaluation.held_out` (``cory-eval``) and
:mod:`cory_agents.evaluation.reward_benchmark` (``cory-bench``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from cory_env.errors import CoryError, UsageError
from cory_env.write_failures import could_not_write, write_whole

#: The learner column of a report's row that averages a run's learners (CORY's two).
MEAN_OF_LEARNERS = "mean"


def jsonable(value: Any) -> Any:
    """NaN and infinities as ``null`` (strict JSON), numpy scalars as Python numbers."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, (np.floating, np.integer)):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class ReportWriteError(CoryError, OSError):
    """A result file could not be written (no space, no permission): the message names it and the cause."""


def check_output_file(path: str | Path, flag: str = "--out", example: str = "evaluation.json") -> None:
    """Before any work: refuse a ``path`` that no file can be written to, a folder or a path below a file, with a
    UsageError naming ``flag`` (for a folder, the fix names ``example`` in it). Missing folders above it are fine
    (:func:`write_json` makes them)."""
    path = Path(path)
    if path.is_dir():
        raise UsageError(f"{flag} {path} is a folder: give the file to write, e.g. {flag} {path / example}")
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise UsageError(
                    f"{flag} {path} is below {parent}, which is a file, not a folder: choose another {flag}"
                )
            break


def write_json(path: str | Path, data: Any) -> Path:
    """Write ``data`` as strict JSON to ``path`` (:func:`write_text`)."""
    return write_text(path, json.dumps(jsonable(data), indent=2, allow_nan=False) + "\n")


def write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` to ``path`` whole or not at all (a temporary file renamed into place), making the folders
    above it. Raises :class:`ReportWriteError` where it cannot (no space, the file-size limit, no permission, a
    folder there), naming the file and, for want of room, the room; the file before it is then as it was."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_whole(path, text)
    except OSError as exc:
        raise ReportWriteError(could_not_write(path, exc, len(text.encode()))) from exc
    return path


def write_sections(page: str | Path, sections: Mapping[tuple[str, str], str]) -> None:
    """Replace what lies between each pair of markers in ``page`` with its body (each marker stays on a line of
    its own), so that a script rewrites its sections of a hand-written page and leaves the rest as it was.

    Raises :class:`ValueError` naming the page and the markers it lacks, before writing anything.
    """
    page = Path(page)
    text = page.read_text(encoding="utf-8")
    for start, end in sections:
        if start not in text or end not in text:
            raise ValueError(f"{page} lacks the markers {start} ... {end}: put them where the section goes")
    for (start, end), body in sections.items():
        head, _, rest = text.partition(start)
        text = head + start + "\n" + body + "\n" + end + rest.partition(end)[2]
    write_text(page, text)


def fmt(value: Any, spread: Any = None, digits: int = 3) -> str:
    """A number for a table (``n/a`` when missing or not finite), with ``± spread`` if given."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "n/a"
    if not isinstance(value, (float, np.floating)):
        return str(value)
    text = f"{value:.{digits}f}"
    if spread is not None and isinstance(spread, (float, np.floating)) and math.isfinite(spread):
        text += f" ± {spread:.{digits}f}"
    return text


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A Markdown table with columns padded to equal width, readable as plain text too."""
    widths = [max(len(str(c)) for c in column) for column in zip(header, *rows)]
    line = lambda cells: "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths)) + " |"  # noqa: E731
    return "\n".join([line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(line, rows)])


EVAL_COLUMNS = (
    ("task_reward_mean", "task reward"),
    ("kl", "KL"),
    ("combined_reward", "combined"),
    ("distinct_1", "distinct-1"),
    ("distinct_2", "distinct-2"),
    ("repetition_rate", "repetition"),
    ("response_length", "length"),
)


def format_result(result: dict[str, Any]) -> str:
    """A readable table of :func:`evaluate`'s result, one row per learner."""
    learners = result["learners"]
    passes = sorted({k for m in learners.values() for k in m if k.startswith("pass@")}, key=lambda k: int(k[5:]))
    header = ["learner", *(h for _, h in EVAL_COLUMNS), *passes]
    rows = []
    for name, m in learners.items():
        spread = {"task_reward_mean": m.get("task_reward_std")}
        cells = [fmt(m[key], spread.get(key)) for key, _ in EVAL_COLUMNS]
        rows.append([name, *cells, *(fmt(m.get(p)) for p in passes)])
    policy = result["policy"]
    what = policy.get("checkpoint") or policy["model"]
    title = (
        f"{what}: {result['task']} ({result['split']} split), reward {result['reward']}, "
        f"{result['num_prompts']} prompts x {result['samples_per_prompt']} samples"
    )
    return title + "\n\n" + markdown_table(header, rows)
