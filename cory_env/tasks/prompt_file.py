"""A prompt file read as it is drawn: where each row starts, and each row parsed when a batch draws it.

A task file (``--task-file``) of a million rows held as :class:`~cory_env.prompts.Prompt` objects
took 3.1 GB and 82 s before the first iteration. :class:`PromptFile` reads the file once, row by
row, with the checks a list of rows gets (a JSON object per line, the query column, a non-empty
query, the task's own row check), and keeps only where each row starts (8 bytes a row), its line
(for messages) and the fields its rows have. :meth:`PromptFile.sample` draws as
:class:`~cory_env.prompts.PromptList` does, with the same random numbers (so the same rows), and
parses just the rows drawn.

:func:`~cory_env.tasks.custom.custom_prompts` streams a file of more than :data:`STREAMED_ROWS` rows
this way; a smaller one is read into a list, whose prompts the environment also checks against the
context length before the first episode (a streamed file's rows are checked as they are drawn).

Example:
    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "rows.jsonl"
    >>> _ = path.write_text('{"query": "2 + 2 =", "answer": "4"}\\n{"query": "3 + 4 =", "answer": "7"}\\n')
    >>> source = PromptFile(path)
    >>> len(source), source.fields, source.row(1)
    (2, ('answer',), Prompt(query='3 + 4 =', metadata={'answer': '7'}, messages=None))
"""

from __future__ import annotations

import csv
import functools
import json
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from cory_env.errors import UsageError
from cory_env.prompts import Prompt

#: Files of more rows than this are streamed (:class:`PromptFile`), smaller ones read into a list.
STREAMED_ROWS = 10_000

#: The byte-order mark Notepad and Excel's "CSV UTF-8" write: not part of the first row.
BOM = b"\xef\xbb\xbf"

RowToPrompt = Callable[[Mapping[str, Any], str], Prompt]


class PromptFile:
    """The rows of a ``.jsonl`` or ``.csv`` prompt file, indexed once and parsed as they are drawn.

    Args:
        path: the file (UTF-8; a byte-order mark and Windows line ends are fine).
        to_prompt: ``to_prompt(row, place)``: a row's :class:`~cory_env.prompts.Prompt`, raising a
            :class:`~cory_env.errors.UsageError` that names ``place`` (``"FILE, line N"``) for a bad
            row; default: the ``query`` column, and the other columns as metadata.
        check_row: the task's check of a prompt (:attr:`cory_env.tasks.Task.check_row`).

    Raises:
        UsageError: a row that is not a JSON object, not UTF-8, or refused by ``to_prompt`` or
            ``check_row`` (naming its line), or a file without rows.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        to_prompt: RowToPrompt | None = None,
        check_row: Callable[[Prompt], None] | None = None,
    ):
        self.path = Path(path)
        self.to_prompt = to_prompt or functools.partial(row_prompt, "query", None)
        self.is_csv = self.path.suffix.lower() == ".csv"
        self.header: list[str] = []
        starts, lines, fields, every = [], [], {}, None
        for start, line, row in self._rows_from(0):
            place = f"{self.path}, line {line}"
            prompt = self.to_prompt(row, place)
            if check_row is not None:
                try:
                    check_row(prompt)
                except UsageError as exc:
                    raise UsageError(f"{place}: {exc}") from None
            starts.append(start)
            lines.append(line)
            fields.update(dict.fromkeys(prompt.metadata))
            every = set(prompt.metadata) if every is None else every & set(prompt.metadata)
        if not starts:
            raise UsageError(f"{self.path} holds no prompts: give at least one row")
        self.starts = np.asarray(starts, dtype=np.int64)  #: each row's first byte
        self.lines = np.asarray(lines, dtype=np.int64)  #: each row's line (its last, for a CSV row over several)
        self.fields: tuple[str, ...] = tuple(fields)  #: the metadata fields some row has, in the file's order
        self.fields_in_every_row: frozenset[str] = frozenset(every or ())  #: those every row has

    def __len__(self) -> int:
        return len(self.starts)

    def sample(self, rng: np.random.Generator, n: int) -> list[Prompt]:
        """``n`` rows drawn uniformly with replacement: the draws of :meth:`PromptList.sample
        <cory_env.prompts.PromptList.sample>` for a list of as many rows."""
        return self.rows(rng.integers(len(self), size=n))

    def row(self, index: int) -> Prompt:
        return self.rows([index])[0]

    def rows(self, indices: Sequence[int] | np.ndarray) -> list[Prompt]:
        """The prompts of the rows ``indices``, in that order, each parsed from the file."""
        prompts = []
        with self.path.open("rb") as f:
            for i in indices:
                _, line, row = next(self._rows_from(int(self.starts[i]), f))
                prompts.append(self.to_prompt(row, f"{self.path}, line {line}"))
        return prompts

    def place(self, index: int) -> str:
        """Where row ``index`` is, as messages name it."""
        return f"{self.path}, line {int(self.lines[index])}"

    def _rows_from(self, start: int, f: Any = None) -> Iterator[tuple[int, int, dict[str, Any]]]:
        """``(first byte, line, row)`` of each row from byte ``start`` on (0: the whole file, its header
        read; a row's start: that row and on, the header already known). Line numbers are the file's
        only from 0."""
        if f is None:
            with self.path.open("rb") as file:
                yield from self._rows_from(start, file)
            return
        f.seek(start)
        if start == 0 and f.read(len(BOM)) != BOM:
            f.seek(0)
        position = [f.tell(), 0, 0]  # the next line's first byte, the lines read, the last line's first byte
        lines = _lines(f, position, self.path)
        if not self.is_csv:
            for text in lines:
                if text.strip():
                    yield position[2], position[1], _json_object(text, self.path, position[1])
            return
        reader = csv.reader(lines)
        if start == 0:
            self.header = next(reader, [])
        while True:
            first = position[0]
            values = next(reader, None)
            if values is None:
                return
            if values:  # csv.DictReader skips blank lines too
                row: dict[Any, Any] = dict(zip(self.header, values))
                if len(values) > len(self.header):
                    row[None] = values[len(self.header) :]  # as csv.DictReader keeps extra values
                row.update(dict.fromkeys(self.header[len(values) :]))  # and missing ones, None
                yield first, position[1], row


def _lines(f: Any, position: list[int], path: Path) -> Iterator[str]:
    """The file's lines from where ``f`` is, decoded, counting in ``position`` the next line's first byte,
    the lines read and the last line's first byte (newlines kept, so that csv reads quoted line breaks)."""
    for raw in f:
        position[2] = position[0]
        position[0] += len(raw)
        position[1] += 1
        try:
            yield raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise UsageError(
                f"{path}, line {position[1]}: not UTF-8 text ({exc.reason}); save it as UTF-8 "
                f"(Excel: 'CSV UTF-8'; Notepad: 'UTF-8')"
            ) from exc


def _json_object(text: str, path: Path, line: int) -> dict[str, Any]:
    try:
        row = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{path}, line {line}: not valid JSON ({exc}): {text[:80]!r}") from exc
    if not isinstance(row, dict):
        raise UsageError(f"{path}, line {line}: each line must be a JSON object, got {text[:80]!r}")
    return row


def query_text(value: Any, place: str) -> str:
    """``value``, a row's query: a non-empty string, else refused naming ``place``."""
    if not isinstance(value, str) or not value.strip():
        raise UsageError(f"{place}: the query must be a non-empty string, got {value!r}")
    return value


def row_prompt(query_field: str, metadata_fields: Sequence[str] | None, row: Mapping[str, Any], place: str) -> Prompt:
    """One row's prompt: the ``query_field`` column, and ``metadata_fields`` (default: the other columns). A query
    that is a list of messages (TRL's conversational format: ``{"role", "content"}`` dicts; a row without
    ``query`` may hold them in TRL's column ``prompt``) makes a conversation, played in chat form."""
    if query_field == "query" and "query" not in row and isinstance(row.get("prompt"), list):
        query_field = "prompt"  # TRL's conversational column
    wanted = [query_field, *(metadata_fields or [])]
    missing = [f for f in wanted if f not in row]
    if missing:
        raise UsageError(
            f"{place}: no column {', '.join(map(repr, missing))}; "
            f"the columns are {', '.join(map(repr, row))}. "
            + ("Choose the query column with query_field (--query-field)." if query_field in missing else "")
        )
    fields = metadata_fields if metadata_fields is not None else [k for k in row if k != query_field]
    metadata = {k: row[k] for k in fields}
    if isinstance(row[query_field], list):
        return Prompt.from_messages(row[query_field], metadata, where=place)
    return Prompt(query_text(row[query_field], place), metadata)
