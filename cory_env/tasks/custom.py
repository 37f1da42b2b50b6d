"""Your own prompts: a list, a ``datasets.Dataset``, or a JSONL / CSV file.

Each row gives one prompt: the ``query_field`` column is the query, and the other
columns (or those named in ``metadata_fields``) become the prompt's metadata, which the
reward function receives as keyword lists. A math file with ``query`` and ``answer``
columns therefore works with the ``gsm8k`` reward as it is::

    {"query": "Tom has 3 apples and buys 4 more. How many does he have?", "answer": "7"}

CSV values are read as strings (so an ``answer`` column keeps ``"007"`` or ``"1,000"``
as written); JSONL values keep their JSON types. Files are UTF-8; a byte-order mark (Notepad,
Excel's "CSV UTF-8") and Windows line ends (CRLF) give the same prompts as the plain file.

Example:
    >>> source = custom_prompts([{"query": "2 + 2 =", "answer": "4"}])
    >>> source.prompts[0]
    Prompt(query='2 + 2 =', metadata={'answer': '4'}, messages=None)
    >>> task = custom_task("problems.jsonl", like="gsm8k")  # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cory_env.errors import UsageError
from cory_env.prompts import Prompt, PromptList
from cory_env.tasks.prompt_file import STREAMED_ROWS, PromptFile, query_text, row_prompt

if TYPE_CHECKING:
    from cory_env.tasks import Task

#: File types :func:`custom_prompts` reads, by extension.
FILE_TYPES = (".jsonl", ".csv")

CustomData = Any  # a datasets.Dataset, a list of strings or dicts, or a path to a .jsonl / .csv file


class PromptFileNotFoundError(UsageError, FileNotFoundError):
    """The prompt file (``--task-file``) does not exist: fix the path."""


def custom_prompts(
    data: CustomData,
    query_field: str = "query",
    metadata_fields: Sequence[str] | None = None,
    check_row: Callable[[Prompt], None] | None = None,
) -> PromptList | PromptFile:
    """A prompt source from your own data: a :class:`~cory_env.prompts.PromptList`, or for a file of more
    than :data:`~cory_env.tasks.prompt_file.STREAMED_ROWS` rows a :class:`~cory_env.tasks.prompt_file.PromptFile`
    that reads each row when it is drawn.

    Args:
        data: a list of query strings; a list of dicts; a ``datasets.Dataset``; or the
            path of a ``.jsonl`` (one JSON object per line) or ``.csv`` (with a header) file.
        query_field: the column holding the query (not used for a list of strings).
        metadata_fields: the columns passed to the reward as metadata; ``None``: all
            columns but the query.
        check_row: called with each prompt (a task's :attr:`~cory_env.tasks.Task.check_row`); the
            ``UsageError`` it raises for a row is raised naming the row (a file's line, a list's index).

    Raises:
        PromptFileNotFoundError: the file does not exist (a ``FileNotFoundError``).
        UsageError (a ``ValueError``): unsupported file type, a line that is not JSON, a missing column
            (the message names the columns present), an empty or non-string query, a row that
            ``check_row`` refuses, or no rows at all. A file's row is named by its line.
        TypeError: ``data`` is none of the above.
    """
    where = "the data"
    if isinstance(data, (str, os.PathLike)):
        file = PromptFile(_checked_path(Path(data)), partial(row_prompt, query_field, metadata_fields), check_row)
        return file if len(file) > STREAMED_ROWS else PromptList(file.rows(range(len(file))))
    if _is_dataset(data):
        rows = list(data)
    elif isinstance(data, Sequence) and not isinstance(data, (bytes, bytearray)):
        rows = list(data)
    else:
        raise TypeError(
            "data must be a list of strings or dicts, a datasets.Dataset, or the path of a .jsonl or .csv file, "
            f"got {type(data).__name__}"
        )
    if not rows:
        raise UsageError(f"{where} holds no prompts: give at least one row")
    places = [f"{where}, row {index}" for index in range(len(rows))]
    if all(isinstance(r, str) for r in rows):
        prompts = [Prompt(query_text(r, place)) for r, place in zip(rows, places)]
    elif all(isinstance(r, Mapping) for r in rows):
        prompts = _prompts_from_rows(rows, query_field, metadata_fields, places)
    else:
        kinds = sorted({type(r).__name__ for r in rows})
        raise TypeError(f"{where}: rows must all be strings or all be dicts, got {', '.join(kinds)}")
    if check_row is not None:  # the task's: a row it can never score is refused now, not found out in training
        for prompt, place in zip(prompts, places):
            try:
                check_row(prompt)
            except UsageError as exc:
                raise UsageError(f"{place}: {exc}") from None
    return PromptList(prompts)


def _is_dataset(data: Any) -> bool:
    try:
        import datasets
    except ImportError:  # pragma: no cover - datasets is a dependency
        return False
    return isinstance(data, datasets.Dataset)


def _checked_path(path: Path) -> Path:
    """``path``, if it is a prompt file of a type :func:`custom_prompts` reads."""
    if not path.is_file():
        raise PromptFileNotFoundError(
            f"prompt file {str(path)!r} does not exist"
            + (" (it is a folder)" if path.is_dir() else f" (working directory: {os.getcwd()})")
        )
    suffix = path.suffix.lower()
    if suffix not in FILE_TYPES:
        raise UsageError(f"prompt file {str(path)!r}: unsupported type {suffix or '(none)'!r}; use one of {FILE_TYPES}")
    return path


def _prompts_from_rows(
    rows: Iterable[Mapping[str, Any]], query_field: str, metadata_fields: Sequence[str] | None, places: list[str]
) -> list[Prompt]:
    return [row_prompt(query_field, metadata_fields, row, place) for row, place in zip(rows, places)]


def custom_task(
    data: CustomData,
    *,
    like: str | Task = "sentiment",
    name: str = "custom",
    query_field: str = "query",
    metadata_fields: Sequence[str] | None = None,
    test_data: CustomData | None = None,
    pioneer_template: Any = None,
    observer_template: Any = None,
    default_reward: str | None = None,
) -> Task:
    """A task whose prompts are your data, and everything else from the task ``like``.

    The templates, default reward and generation lengths are ``like``'s unless given.
    Templates are checked with :func:`cory_env.templates.check_template`. The data is
    read at once, so errors show here rather than in the middle of training.

    Args:
        data: the training prompts (see :func:`custom_prompts`).
        like: the registered task (or a :class:`~cory_env.tasks.Task`) to take the rest from.
        test_data: held-out prompts for ``split="test"``; without it, asking for the
            test split is an error.
        pioneer_template: a ``str.format`` template with ``{query}``, or a callable.
        observer_template: a template with ``{query}`` and ``{response}``, or a callable.
        default_reward: reward name for this task (default: ``like``'s).
    """
    from cory_env.tasks import get_task

    base = get_task(like) if isinstance(like, str) else like
    splits = {"train": custom_prompts(data, query_field, metadata_fields, base.check_row)}
    if test_data is not None:
        splits["test"] = custom_prompts(test_data, query_field, metadata_fields, base.check_row)

    def prompts(tokenizer: Any = None, *, split: str = "train", seed: int = 0, source: str = "auto") -> PromptList:
        if split not in splits:
            raise UsageError(
                f"the custom task {name!r} has no {split!r} split: its splits are {sorted(splits)} "
                "(give test_data for a held-out split)"
            )
        return splits[split]

    return dataclasses.replace(
        base,
        name=name,
        prompts=prompts,
        pioneer_template=base.pioneer_template if pioneer_template is None else pioneer_template,
        observer_template=base.observer_template if observer_template is None else observer_template,
        default_reward=base.default_reward if default_reward is None else default_reward,
        sources=("auto",),
        description=f"your prompts, with {base.name}'s settings",
    )
