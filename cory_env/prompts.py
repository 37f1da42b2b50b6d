"""Prompt sources: where the queries of an episode come from.

A prompt source is anything with ``__len__`` and ``sample(rng, n)`` returning ``n``
:class:`Prompt` objects. The environment draws one batch of prompts per ``reset``
with its own seeded generator, so episodes are reproducible under ``reset(seed=...)``.

Example:
    >>> import numpy as np
    >>> source = as_prompt_source(["The movie was", "I think"])
    >>> [p.query for p in source.sample(np.random.default_rng(1), 3)]
    ['The movie was', 'I think', 'I think']
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

from cory_env.errors import UsageError


@dataclass(frozen=True)
class Prompt:
    """One query, with whatever a reward function needs to score answers to it.

    ``metadata`` is passed to the reward function as keyword lists, one value per
    conversation (for example ``answer`` for GSM8K). ``messages``, where given, is the row as a
    conversation (TRL's conversational format: ``{"role", "content"}`` dicts), which the agents see
    through their chat templates (:mod:`cory_env.chat_prompts`); :meth:`from_messages` makes such a row.
    """

    query: str
    metadata: Mapping[str, Any] = field(default_factory=dict)
    messages: tuple[Mapping[str, str], ...] | None = None

    @classmethod
    def from_messages(
        cls,
        messages: Sequence[Mapping[str, str]],
        metadata: Mapping[str, Any] | None = None,
        where: str = "a prompt row",
    ) -> Prompt:
        """A row that is a conversation; its ``query`` (what reward functions receive) is its last user message
        (bad messages are refused naming ``where``).

        >>> Prompt.from_messages([{"role": "user", "content": "Name a colour."}]).query
        'Name a colour.'
        """
        from cory_env.chat import check_messages

        checked = check_messages(messages, where)
        query = next(m["content"] for m in reversed(checked) if m["role"] == "user")
        return cls(query, dict(metadata or {}), checked)


def as_prompt(row: Prompt | str | Sequence[Mapping[str, str]]) -> Prompt:
    """A prompt row from a :class:`Prompt`, a string, or a list of messages (TRL's conversational format)."""
    if isinstance(row, Prompt):
        return row
    if isinstance(row, Sequence) and not isinstance(row, str) and row and isinstance(row[0], Mapping):
        return Prompt.from_messages(row)
    return Prompt(str(row))


@runtime_checkable
class PromptSource(Protocol):
    """What the environment needs from a prompt source."""

    def __len__(self) -> int: ...

    def sample(self, rng: np.random.Generator, n: int) -> list[Prompt]:
        """Return ``n`` prompts drawn with ``rng`` (with replacement)."""
        ...


class PromptList:
    """A fixed list of prompts, sampled uniformly with replacement."""

    def __init__(self, prompts: Sequence[Prompt | str]):
        self.prompts = [as_prompt(p) for p in prompts]
        if not self.prompts:
            raise UsageError(
                "the prompt source is empty: give at least one prompt (a non-empty list of strings or Prompt objects)"
            )

    def __len__(self) -> int:
        return len(self.prompts)

    def sample(self, rng: np.random.Generator, n: int) -> list[Prompt]:
        return [self.prompts[i] for i in rng.integers(len(self.prompts), size=n)]


def metadata_lists(prompts: Sequence[Prompt]) -> dict[str, list[Any]]:
    """The prompts' metadata as a reward function's keyword arguments: one list per key, in prompt order
    (``None`` where a prompt lacks the key)."""
    keys = sorted({k for p in prompts for k in p.metadata})
    return {k: [p.metadata.get(k) for p in prompts] for k in keys}


def as_prompt_source(prompts: PromptSource | Sequence[Prompt | str]) -> PromptSource:
    """Accept a prompt source, or a list of strings / :class:`Prompt` objects.

    Raises ``ValueError`` for an empty source and ``TypeError`` for anything else.
    """
    if isinstance(prompts, str):
        raise TypeError("prompts must be a list of strings, not a single string: use [prompt]")
    if isinstance(prompts, PromptSource):
        if len(prompts) == 0:
            raise UsageError(f"the prompt source {type(prompts).__name__} is empty: it must hold at least one prompt")
        return prompts
    if isinstance(prompts, Sequence):
        return PromptList(prompts)
    raise TypeError(
        f"prompts must be a PromptSource (with __len__ and sample(rng, n)) or a list of "
        f"strings, got {type(prompts).__name__}"
    )


class RepeatedPrompts:
    """Another source's prompts, each ``times`` times in a row: several responses per prompt.

    ``sample(rng, n)`` draws ``n // times`` prompts from ``source`` and repeats each
    ``times`` times, so conversations ``[k*times, (k+1)*times)`` share a query: the
    groups that group-relative learners (GRPO, RLOO) compare responses within. Under
    CORY each observer in a group sees its own pioneer's response.
    """

    def __init__(self, source: PromptSource | Sequence[Prompt | str], times: int):
        if isinstance(times, bool) or not isinstance(times, (int, np.integer)) or times < 1:
            raise ValueError(f"times must be a positive int (responses per prompt), got {times!r}")
        self.source = as_prompt_source(source)
        self.times = int(times)

    def __len__(self) -> int:
        return len(self.source)

    def sample(self, rng: np.random.Generator, n: int) -> list[Prompt]:
        if n % self.times:
            raise UsageError(
                f"{n} conversations do not split into groups of {self.times} responses per prompt: "
                f"make the number of conversations (the batch size) a multiple of {self.times}"
            )
        return [p for p in self.source.sample(rng, n // self.times) for _ in range(self.times)]


def repeat_each(source: PromptSource | Sequence[Prompt | str], times: int) -> RepeatedPrompts:
    """Present each prompt of ``source`` ``times`` times in a row (see :class:`RepeatedPrompts`).

    Example:
        >>> source = repeat_each(["The movie was", "I think"], 2)
        >>> [p.query for p in source.sample(np.random.default_rng(1), 4)]
        ['The movie was', 'The movie was', 'I think', 'I think']
    """
    return RepeatedPrompts(source, times)


def row_fields(
    source: PromptSource, declared: Sequence[str] | None, private: Mapping[str, Any] | None = None
) -> tuple[str, ...]:
    """The prompt-row fields templates may name (``{secret}``): ``declared``, or by default the
    metadata keys of a :class:`PromptList`'s rows or a streamed prompt file's (looked for through a
    source that wraps one; other sources: none), but never a chain field's name (``query``, ``response``, ``round``, ...:
    such a column still goes to the reward); private fields always."""
    if declared is not None:
        if isinstance(declared, str) or not all(isinstance(f, str) and f.isidentifier() for f in declared):
            raise UsageError(f"prompt_fields must be a list of field names, got {declared!r:.80}")
        if clash := [f for f in declared if _CHAIN_FIELD.match(f)]:
            raise UsageError(
                f"prompt_fields {clash} name the chain's own template fields ({{query}}, {{response}}, "
                f"{{response_k}}, {{responses}}, {{round}}): rename those prompt fields"
            )
        fields = list(declared)
    elif (rows := _listed(source)) is not None:
        fields = _template_fields(k for p in rows for k in p.metadata)
    elif (file := _streamed(source)) is not None:
        fields = _template_fields(file.fields)
    else:
        fields = []
    return tuple(dict.fromkeys([*fields, *(private or {})]))


def _template_fields(keys: Iterable[Any]) -> list[str]:
    """The metadata keys a template may name, sorted: identifiers that are not a chain field's name."""
    return sorted({k for k in keys if isinstance(k, str) and k.isidentifier() and not _CHAIN_FIELD.match(k)})


#: The names of the chain's own template fields (cory_env.templates), which a prompt field may not take.
_CHAIN_FIELD = re.compile(r"(query|response|responses|round|response_\d+|response_\d+_\d+)$")


def _listed(source: Any) -> list[Prompt] | None:
    """The rows of a :class:`PromptList`, or of the list a source wraps (``source``, ``prompts``); else ``None``."""
    for _ in range(8):
        if isinstance(source, PromptList):
            return source.prompts
        if isinstance(getattr(source, "prompts", None), list) and all(isinstance(p, Prompt) for p in source.prompts):
            return source.prompts
        source = getattr(source, "source", None)
        if source is None:
            return None
    return None


def _is_streamed(source: Any) -> bool:
    return hasattr(source, "fields_in_every_row") and hasattr(source, "rows")


def _streamed(source: Any) -> Any:
    """A streamed prompt file (:class:`~cory_env.tasks.prompt_file.PromptFile`), or the one a source wraps; else ``None``."""
    for _ in range(8):
        if _is_streamed(source):
            return source
        source = getattr(source, "source", None)
        if source is None:
            return None
    return None


def row_values(prompt: Prompt, fields: Sequence[str], row: int) -> dict[str, Any]:
    """The values of ``fields`` in one prompt row, for a template; a row without one is refused,
    naming the row and the field."""
    values = {}
    for f in fields:
        if f not in prompt.metadata:
            have = ", ".join(sorted(map(str, prompt.metadata))) or "none"
            raise UsageError(
                f"prompt row {row} (query {prompt.query[:80]!r}) has no field {f!r}, which a template names "
                f"(its fields: {have}): give every prompt a {f!r} (a column of the task file), or drop {{{f}}} "
                f"from the template"
            )
        values[f] = prompt.metadata[f]
    return values


def check_rows_have_fields(source: PromptSource, named: Sequence[Sequence[Sequence[str]]]) -> None:
    """For a :class:`PromptList` or a streamed prompt file (or a source that wraps one), check now that every
    row has every field a template names (``named``: per round, per position); other sources are checked as
    they are drawn."""
    fields: list[str] = list(dict.fromkeys(f for row in named for turn in row for f in turn))
    if (file := _streamed(source)) is not None and set(fields) - file.fields_in_every_row:
        rows: Sequence[Prompt] | None = file.rows(range(len(file)))  # the file holds a row without one: find it
    else:
        rows = _listed(source)
    if rows is not None and fields:
        for i, prompt in enumerate(rows):
            row_values(prompt, fields, i)
