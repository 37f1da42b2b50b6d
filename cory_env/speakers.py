"""Speakers: what the environment needs to know about each agent's model.

An agent speaks in its own model's tokens. Its :class:`Speaker` holds the tokenizer that turns
its context into token ids (and its response back into text), the size of its vocabulary (its
action space), its padding token and the tokens that end its turn. A team that shares one
tokenizer has one speaker for every agent (the fast path: nothing is converted); a team of
different models has one per agent, and the text between them is the only thing they share.

Example:
    >>> from cory_env.tasks.toy import toy_tokenizer
    >>> [s.vocab_size for s in make_speakers(toy_tokenizer(), 3)]
    [18, 18, 18]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True, eq=False)
class Speaker:
    """One agent's model, as the environment sees it (agents with the same settings share one)."""

    tokenizer: Any
    vocab_size: int
    pad_token_id: int
    stop_token_ids: np.ndarray  # sorted, int64


def make_speakers(
    tokenizer: Any,
    num_agents: int,
    vocab_size: int | Sequence[int] | None = None,
    stop_token_ids: Sequence[int] | Sequence[Sequence[int]] | None = None,
) -> list[Speaker]:
    """One :class:`Speaker` per agent, from one tokenizer (shared) or a list of ``num_agents``.

    ``vocab_size`` (default ``len(tokenizer)``) and ``stop_token_ids`` (default the tokenizer's
    EOS) are one value for every agent, or a list with one per agent.
    """
    tokenizers = _per_agent(tokenizer, num_agents, "tokenizer", is_one=lambda t: not isinstance(t, (list, tuple)))
    sizes = _per_agent(
        vocab_size, num_agents, "vocab_size", is_one=lambda v: v is None or isinstance(v, (int, np.integer))
    )
    stops = _per_agent(
        stop_token_ids,
        num_agents,
        "stop_token_ids",
        is_one=lambda s: s is None or all(isinstance(t, (int, np.integer)) for t in s),
    )
    speakers, made = [], {}
    for i, (tok, size, stop) in enumerate(zip(tokenizers, sizes, stops)):
        key = (id(tok), size, None if stop is None else tuple(stop))
        if key not in made:  # agents that share a tokenizer share one speaker
            made[key] = _speaker(tok, size, stop, agent=i)
        speakers.append(made[key])
    return speakers


def check_seating(seating: Any, num_agents: int) -> list[int]:
    """``seating`` (the agent whose speaker sits at each chain position) as a list, if it is a
    permutation of ``0 .. num_agents - 1``; otherwise an error that says so."""
    try:
        order = [int(i) for i in seating]
    except (TypeError, ValueError):
        order = []
    if sorted(order) != list(range(num_agents)):
        raise ValueError(
            f"seating must be a permutation of 0..{num_agents - 1} (the agent seated at each position), got {seating!r}"
        )
    return order


def _speaker(tokenizer: Any, vocab_size: int | None, stop_token_ids: Sequence[int] | None, agent: int) -> Speaker:
    size = int(vocab_size if vocab_size is not None else len(tokenizer))
    pad = _pad_token_id(tokenizer)
    if stop_token_ids is None:
        eos = tokenizer.eos_token_id
        stop_token_ids = [] if eos is None else ([eos] if isinstance(eos, int) else list(eos))
    stops = np.asarray(sorted(set(int(t) for t in stop_token_ids)), dtype=np.int64)
    for t in [pad, *stops]:
        if not 0 <= t < size:
            raise ValueError(f"special token id {t} of agent {agent + 1} is outside its vocabulary [0, {size})")
    return Speaker(tokenizer, size, pad, stops)


def _per_agent(value: Any, n: int, name: str, is_one) -> list[Any]:
    if is_one(value):
        return [value] * n
    values = list(value)
    if len(values) != n:
        raise ValueError(
            f"{name} lists {len(values)} values for a chain of {n} agents: give one for every agent, "
            f"or a single one that they all share"
        )
    return values


def _pad_token_id(tokenizer: Any) -> int:
    for tid in (tokenizer.pad_token_id, tokenizer.eos_token_id):
        if tid is not None:
            return int(tid if isinstance(tid, int) else tid[0])
    return 0
