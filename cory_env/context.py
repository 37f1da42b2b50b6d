"""An agent's context in its turn: the prompt laid out, the response appended token by token,
and the fixed-width window an observation shows.

A :class:`Turn` holds one agent's contexts, one row per conversation, in a buffer of
``L + max_new_tokens`` columns (``L = context_length``): the prompt right-aligned in columns
``[0, L)`` (left padding before it), token ``t`` of the response in column ``L + t``. After
``t`` steps the observation is the window ``[t, L + t)``: the context left-padded to width
``L``, newest token in the last column. Nothing inside a window is ever rewritten, so
observations are zero-copy read-only views, and every step shifts all rows by one column,
so a KV cache stays aligned in the batched form.

Before its turn an agent observes an all-padding context with ``num_new_tokens == 0``
(:func:`empty_context`). A prompt must leave room in the window for the response and, for a
later agent of a chain, for the earlier answers its template names: :func:`tokenize_fitting`
and :func:`check_prompts_fit` raise :class:`PromptTooLongError` naming the fix.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from cory_env.errors import UsageError


class PromptTooLongError(UsageError):
    """A prompt (plus the tokens to generate) does not fit the context window."""


@dataclass
class Turn:
    """One agent's turn: its context buffer and how far its response has got."""

    tokens: np.ndarray  # (B, L + max_new_tokens) prompt right-aligned in [0, L), response from L
    mask: np.ndarray
    prompt_texts: list[str]
    prompt_width: int  # longest prompt in the batch, in tokens
    over: np.ndarray  # (B,) bool: this conversation's turn has ended
    response_length: np.ndarray  # (B,) tokens appended (stop token included)
    context_length: int  # L, the width of an observation
    t: int = 0  # steps taken in this turn
    cached: int = 0  # leading prompt columns a KV cache over the agent's previous turn holds (a carried turn)

    @classmethod
    def start(
        cls, ids: Sequence[Sequence[int]], texts: list[str], context_length: int, max_new_tokens: int, pad_token_id: int
    ) -> Turn:
        """Lay out tokenized prompts, one per conversation, right-aligned, with room for the response."""
        turn = cls._empty(len(ids), texts, max(len(row) for row in ids), context_length, max_new_tokens, pad_token_id)
        turn._right_align(ids)
        return turn

    @classmethod
    def _empty(cls, B: int, texts: list[str], width: int, L: int, T: int, pad_token_id: int, cached: int = 0) -> Turn:
        """A turn of ``B`` conversations whose prompts (``width`` columns) are still to be written."""
        return cls(
            tokens=np.full((B, L + T), pad_token_id, dtype=np.int64),
            mask=np.zeros((B, L + T), dtype=np.int64),
            prompt_texts=texts,
            prompt_width=width,
            over=np.zeros(B, dtype=bool),
            response_length=np.zeros(B, dtype=np.int64),
            context_length=L,
            cached=cached,
        )

    def _right_align(self, ids: Sequence[Sequence[int]]) -> None:
        """Write each conversation's ``ids`` so that they end at the prompt's last column."""
        L = self.context_length
        for b, row in enumerate(ids):
            if len(row):
                self.tokens[b, L - len(row) : L] = row
                self.mask[b, L - len(row) : L] = 1

    @classmethod
    def carry(
        cls,
        previous: Turn,
        new_ids: Sequence[Sequence[int]],
        texts: list[str],
        max_new_tokens: int,
        stop_token_ids: np.ndarray,
        pad_token_id: int,
    ) -> Turn | None:
        """The agent's next turn continuing ``previous`` (its last one, played in these columns): the earlier
        prompt and answer as they were, each answer's stop token masked out (the new tokens write the turn's end
        as the template does), then ``new_ids`` (one list per conversation, left-padded into one block), so a KV
        cache over ``previous`` stays valid; ``None`` if that does not fit the window."""
        ids, mask = previous.columns()
        P, n = previous.prompt_width, previous.response_length
        rows = np.flatnonzero(n > 0)
        last = ids[rows, P + n[rows] - 1]
        stopped = rows[(last[:, None] == stop_token_ids[None, :]).any(axis=1)]
        mask[stopped, P + n[stopped] - 1] = 0
        D = max(len(row) for row in new_ids)
        W, L = ids.shape[1] + D, previous.context_length
        if W > L - max_new_tokens:
            return None
        # The cache holds every earlier column but the last: the previous turn's last token was drawn, never fed.
        turn = cls._empty(len(new_ids), texts, W, L, max_new_tokens, pad_token_id, cached=ids.shape[1] - 1)
        turn.tokens[:, L - W : L - D], turn.mask[:, L - W : L - D] = ids, mask
        turn._right_align(new_ids)
        return turn

    def window(self) -> tuple[np.ndarray, np.ndarray]:
        """The observed context: ``(input_ids, attention_mask)``, ``(B, L)`` read-only views."""
        t, L = self.t, self.context_length
        ids, mask = self.tokens[:, t : t + L], self.mask[:, t : t + L]
        ids.flags.writeable = mask.flags.writeable = False
        return ids, mask

    @property
    def past_length(self) -> int:
        """Trailing window columns before the new ones that a KV cache over this turn holds (at the start of a
        carried turn: over the agent's previous one)."""
        return self.cached if self.t == 0 else self.prompt_width + self.t - 1

    @property
    def num_new_tokens(self) -> int:
        """Trailing window columns new since the previous step: the prompt (of a carried turn: what follows the
        cached columns), then one token."""
        return self.prompt_width - self.cached if self.t == 0 else 1

    def append(self, tokens: np.ndarray, stop_token_ids: np.ndarray, max_new_tokens: int) -> bool:
        """Append one token per conversation (ignored where the turn is over); whether the turn is
        now over everywhere (a stop token, or ``max_new_tokens`` reached)."""
        active = ~self.over
        col = self.context_length + self.t
        np.copyto(self.tokens[:, col], tokens, where=active)
        self.mask[:, col] = active
        self.response_length += active
        # Equality against each stop id: np.isin sorts both arrays, ten times slower for a few stop ids.
        self.over |= active & (tokens[:, None] == stop_token_ids[None, :]).any(axis=1)
        self.t += 1
        if self.t >= max_new_tokens:
            self.over[:] = True
        return bool(self.over.all())

    def response_ids(self) -> list[list[int]]:
        """Each conversation's response tokens (its stop token included)."""
        L = self.context_length
        return [self.tokens[b, L : L + n].tolist() for b, n in enumerate(self.response_length)]

    def columns(self) -> tuple[np.ndarray, np.ndarray]:
        """The turn's prompt and response as played: ``(input_ids, attention_mask)``, ``(B, P + t)``
        copies (``P`` the longest prompt; prompts left-padded, responses right-padded)."""
        L = self.context_length
        cols = slice(L - self.prompt_width, L + self.t)
        return self.tokens[:, cols].copy(), self.mask[:, cols].copy()

    def masked_window(self) -> np.ndarray:
        """The observed token ids, ``-1`` where the observation's attention mask is 0 (:meth:`state`'s row)."""
        ids, mask = self.window()
        return np.where(mask == 1, ids, -1)


@dataclass
class PlayedTurn:
    """One finished turn of an agent, as a learner takes it (:meth:`PioneerObserverEnv.played_turns`).

    ``input_ids``/``attention_mask`` ``(B, P + T)``: the prompt, left-padded, then the response of
    ``T`` columns, right-padded (the layout of :class:`~cory_agents.learners.base.Episode`).
    ``reward`` is what the agent received for this turn: its score at the turn's end with
    ``turn_rewards``, otherwise 0 but at its last turn, which carries the episode's reward.
    """

    round: int  # 0-based
    position: int  # the chain position that played it
    input_ids: np.ndarray
    attention_mask: np.ndarray
    response_width: int  # T
    response_length: np.ndarray  # (B,)
    task_reward: np.ndarray  # (B,) the turn's own score
    reward: np.ndarray  # (B,) received for this turn


def starts_turn(observation: Mapping[str, Any]) -> bool:
    """Whether ``observation`` is the first of an agent's turn: nothing cached (``past_length == 0``), or a carried
    turn's start, whose new columns follow the cached ones of its earlier turn (``num_new_tokens > 1``); a turn's
    later steps add one token each."""
    return int(observation["past_length"][0]) == 0 or int(observation["num_new_tokens"][0]) > 1


def empty_context(pad_token_id: int, num_conversations: int, context_length: int) -> tuple[np.ndarray, np.ndarray]:
    """What an agent observes before its turn: all padding, read-only."""
    ids = np.full((num_conversations, context_length), pad_token_id, dtype=np.int64)
    mask = np.zeros((num_conversations, context_length), dtype=np.int64)
    ids.flags.writeable = mask.flags.writeable = False
    return ids, mask


def encode(tokenizer: Any, texts: list[str], add_special_tokens: bool = True) -> list[list[int]]:
    """``tokenizer(texts, add_special_tokens=...)["input_ids"]``, through a fast tokenizer's Rust backend directly
    where it has one (``encode_batch_fast``: the same ids, without the offsets and Python conversions; the
    environment tokenizes every turn's prompts), unless the backend pads or truncates (a ``tokenizer.json`` that
    says so), which the tokenizer's own call switches off."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    plain = backend is not None and backend.padding is None and backend.truncation is None  # as the call would set
    if plain and hasattr(backend, "encode_batch_fast"):
        return [e.ids for e in backend.encode_batch_fast(texts, add_special_tokens=add_special_tokens)]
    return [list(ids) for ids in tokenizer(texts, add_special_tokens=add_special_tokens)["input_ids"]]


def tokenize_fitting(
    tokenizer: Any,
    texts: list[str],
    role: str,
    context_length: int,
    max_new_tokens: int,
    reserved: int = 0,
    add_special_tokens: bool = True,
) -> list[list[int]]:
    """Tokenize ``role``'s prompts and check that each, plus ``reserved`` tokens (earlier answers
    still to come), leaves room in the window for a response of ``max_new_tokens`` (a chat template's
    rendering is tokenized without ``add_special_tokens``: it writes its own, as ``apply_chat_template`` does)."""
    ids = encode(tokenizer, texts, add_special_tokens)
    room = context_length - max_new_tokens - reserved
    for text, row in zip(texts, ids):
        if len(row) > room:
            extra = f" and up to {reserved} tokens of earlier responses" if reserved else ""
            raise PromptTooLongError(
                f"the {role}'s prompt has {len(row)} tokens{extra}, but context_length={context_length} "
                f"leaves room for {room + reserved} with max_new_tokens={max_new_tokens}: {text[:120]!r}. "
                f"Raise context_length (to {len(row) + reserved + max_new_tokens} for this prompt; at most the "
                f"model's window), lower max_new_tokens, or use shorter prompts."
            )
        if len(row) == 0:
            raise ValueError(f"the {role}'s prompt is empty after tokenization: {text!r}")
    return ids


def check_prompts_fit(
    tokenizers: Sequence[Any],
    role: str,
    texts: list[str],
    queries: list[str],
    extra: int,
    context_length: int,
    max_new_tokens: int,
    needed: int = 0,
    add_special_tokens: bool = True,
) -> None:
    """Check at once that every one of ``role``'s prompts (``texts``, rendered from ``queries``),
    plus ``extra`` tokens, fits ``context_length`` in each of ``tokenizers``; the error names how
    many do not, the longest, and the ``context_length`` that would hold them all (at least
    ``needed``: what the other turns of a chain need)."""
    for tokenizer in tokenizers:
        lengths = prompt_lengths(tokenizer, texts, extra, add_special_tokens)
        over = np.flatnonzero(lengths > context_length)
        if over.size:
            worst = int(over[np.argmax(lengths[over])])
            raise PromptTooLongError(
                f"{over.size} of {len(texts)} prompts do not fit context_length={context_length} as the {role}'s "
                f"prompt with {extra} tokens of responses (max_new_tokens up to {max_new_tokens}); the longest needs "
                f"{int(lengths[worst])}, for the query {queries[worst][:120]!r}. Raise context_length to "
                f"{max(int(lengths.max()), needed)} (at most the model's window), lower max_new_tokens, or drop the "
                f"longest prompts."
            )


def prompt_lengths(tokenizer: Any, texts: Sequence[str], extra: int, add_special_tokens: bool = True) -> np.ndarray:
    """Each prompt's length in ``tokenizer``'s tokens, plus ``extra``."""
    return np.array([len(row) for row in encode(tokenizer, list(texts), add_special_tokens)]) + extra


def check_chain_prompts_fit(
    turns: Iterable[tuple[str, Sequence[str], int]],
    queries: list[str],
    tokenizers: Sequence[Any],
    context_length: int,
    max_new_tokens: int,
) -> None:
    """:func:`check_prompts_fit` for every turn of a chain, given as ``(role, prompts, answer slots)``
    (the prompts rendered with empty answers): each prompt with the longest response and, in each
    slot, an earlier answer as long. Turns whose prompts are the same (a default chain's later
    agents) are checked once, as the one of them that needs the most room."""
    needs: dict[tuple[str, ...], tuple[int, str]] = {}
    for role, texts, slots in turns:
        texts = tuple(texts)
        extra = max_new_tokens * (1 + slots)
        if extra > needs.get(texts, (-1, ""))[0]:
            needs[texts] = (extra, role)
    # The length every turn fits in, so that the error names one that holds them all.
    needed = max(int(prompt_lengths(t, texts, extra).max()) for texts, (extra, _) in needs.items() for t in tokenizers)
    for texts, (extra, role) in needs.items():
        check_prompts_fit(tokenizers, role, list(texts), queries, extra, context_length, max_new_tokens, needed)


def new_token_range(max_new_tokens: int | tuple[int, int]) -> tuple[int, int]:
    """``max_new_tokens`` (an int, or a ``(low, high)`` range to draw each episode's limit from) as ``(low, high)``."""
    if isinstance(max_new_tokens, (int, np.integer)) and not isinstance(max_new_tokens, bool):
        lo = hi = int(max_new_tokens)
    else:
        try:
            lo, hi = (int(v) for v in max_new_tokens)  # type: ignore[union-attr]
        except (TypeError, ValueError) as exc:
            raise TypeError(f"max_new_tokens must be an int or a (low, high) pair, got {max_new_tokens!r}") from exc
    if not 1 <= lo <= hi:
        raise UsageError(f"max_new_tokens must satisfy 1 <= low <= high, got {max_new_tokens!r}")
    return lo, hi


def check_context_length(
    context_length: int, max_new_tokens: int, tokenizers: Sequence[Any], roles: Sequence[str]
) -> None:
    """Check that the window fits every agent's model (its tokenizer's ``model_max_length``) and
    leaves room for a prompt."""
    for k, tokenizer in enumerate(tokenizers):
        window = getattr(tokenizer, "model_max_length", None)
        if window is not None and window < 10**7 and context_length > window:
            who = f" of agent {k + 1} ({roles[k]})" if len({id(t) for t in tokenizers}) > 1 else ""
            raise UsageError(
                f"context_length={context_length} exceeds the tokenizer{who}'s model_max_length={window}; "
                f"use context_length <= {window}"
            )
    if context_length <= max_new_tokens:
        raise UsageError(
            f"context_length={context_length} leaves no room for a prompt with "
            f"max_new_tokens up to {max_new_tokens}; raise context_length"
        )
