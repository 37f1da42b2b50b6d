"""Decoding with a static KV cache and a compiled one-token step (``--compile``).

:class:`~cory_agents.acting.actor.LMActor`'s eager path runs one Hugging Face forward per token with a
``DynamicCache`` that grows by concatenation: a few hundred small operators per token whatever the
model's size, each a kernel launch on a GPU. This module gives an actor a :class:`StaticDecoder`:

- a ``transformers.StaticCache`` per turn length: a turn's cache is the smallest of :data:`BUCKETS` that
  holds its prompt and longest answer (at most ``cache_length``, the environment's context window),
  kept and reset, not rebuilt, at the next turn of that length; keys and values are written in place,
  so every decode step of a length has the same shapes, and attention reads about what a dynamic
  cache would rather than the whole window (on a CPU the whole 256-token window made decoding slower
  than eager: docs/benchmarks.md);
- the prefill (a turn's prompt, of any length) runs eager into that cache; a turn that carries the agent's
  earlier one (chat form, :mod:`cory_env.chat_prompts`) prefills only its new columns into the cache of that turn
  where no other agent's turn has reset it since (an actor per learner: never): in place where it still has
  room, else after a copy of the earlier turn into the larger cache this turn needs (full-attention layers;
  a sliding-window layer's cache, which rolls, is prefilled afresh); otherwise the whole context;
- each later step, one new token per conversation, runs a compiled function of fixed shapes: token
  ids ``(B, 1)`` and the new token's attention mask, in buffers of their own, with the step's
  bookkeeping inside the graph (the mask over the whole cache updated in place, the positions
  counted) and, on CUDA or for vocabularies up to :data:`FUSED_VOCABULARY`, the next token drawn
  too (from a uniform number the actor's generator drew, as
  :func:`~cory_agents.acting.actor.sample_categorical` draws it). ``torch.compile`` with
  ``dynamic=False`` and Dynamo's guards on the model's modules skipped: on CUDA
  ``mode="reduce-overhead"`` (CUDA graphs: one launch for the step), on a CPU Inductor's C++ wrapper
  (no Python between its kernels). It compiles once per cache length met. The compiled function
  takes the model as an argument: actors of models of one architecture share its graph, and a team
  of two architectures gets one each (the parameters' shapes are still guarded: tested).

The logits agree with the eager path's to float rounding (the attention reads masked zeros beyond
the written tokens instead of a shorter cache): greedy decoding gives the same tokens, and sampling
the same tokens wherever the rounding does not move a draw across a token's boundary
(tests/agents/acting/test_static_decode.py).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn
from transformers import StaticCache, StaticLayer

from cory_agents.acting.sampling import draw

#: A turn's cache length: the smallest of these that holds its prompt and longest answer (each length met compiles
#: the step once: a few per run), so that attention reads about what a dynamic cache would, not the whole window.
BUCKETS = (64, 128, 256, 512, 1024, 2048, 4096, 8192)
#: The largest vocabulary whose tokens a CPU step draws inside the compiled graph (:attr:`StaticDecoder.fused_sampling`).
FUSED_VOCABULARY = 8192


def decode_step(
    model: nn.Module,
    cache: StaticCache,
    ids: torch.Tensor,
    mask: torch.Tensor,
    count: torch.Tensor,
    index: torch.Tensor,
    column: torch.Tensor,
) -> torch.Tensor:
    """One token per conversation, ``ids`` ``(B, 1)``, through ``model`` with its static ``cache``: ``(B, V)`` float32
    logits. The step's bookkeeping is in the compiled graph too: ``column`` ``(B,)`` (the new token's attention mask)
    is written into ``mask`` ``(B, cache_length)`` at ``index`` (a 0-d tensor: the tokens already cached), and
    ``count`` ``(B,)`` (each conversation's real tokens) gives the new token's position (as ``generate`` counts)."""
    mask.index_copy_(1, index.view(1), column.view(-1, 1))
    count.add_(column)
    positions = (count - 1).clamp(min=0).view(-1, 1)
    out = model(
        input_ids=ids, attention_mask=mask, position_ids=positions, cache=cache, use_cache=True, logits_to_keep=1
    )
    return out.logits[:, -1, :].float()


def sample_step(
    model: nn.Module,
    cache: StaticCache,
    ids: torch.Tensor,
    mask: torch.Tensor,
    count: torch.Tensor,
    index: torch.Tensor,
    column: torch.Tensor,
    uniform: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`decode_step`, then the next tokens drawn as :func:`~cory_agents.acting.actor.sample_categorical` draws
    them (the softmax's cumulative probabilities in float64, divided by their total, against ``uniform`` ``(B, 1)``,
    drawn by the caller from the actor's generator): ``(tokens, logits, valid)``, ``valid`` ``(B, 1)`` whether each row was a
    distribution (not NaN or inf, not all 0)."""
    logits = decode_step(model, cache, ids, mask, count, index, column)
    tokens, valid = draw(torch.softmax(logits, dim=-1), uniform)
    return tokens, logits, valid


def compiled(fn: Any, device: torch.device) -> Any:
    """``fn`` compiled for ``device``, its shapes fixed: CUDA graphs on CUDA (``mode="reduce-overhead"``), Inductor's
    C++ wrapper on a CPU (no Python between its kernels). Guards on the model's modules are skipped: the step is
    called with the same model, whose weights change in place only."""
    options: dict[str, Any] = {"guard_filter_fn": torch.compiler.skip_guard_on_all_nn_modules_unsafe}
    if device.type == "cuda":
        return torch.compile(fn, dynamic=False, mode="reduce-overhead", options=options)
    return torch.compile(fn, dynamic=False, options={**options, "cpp_wrapper": True})


class StaticDecoder:
    """A static KV cache and the compiled decode step of one actor's model (module docstring).

    Args:
        model: the causal LM that acts.
        cache_length: the longest turn in tokens: the environment's ``context_length`` (a prompt and its answer).
        max_new_tokens: the longest answer (the turn limit's upper end); with it each turn's cache is the
            smallest of :data:`BUCKETS` that holds its prompt and answer, as long as ``cache_length`` at most,
            else every turn's is ``cache_length`` long.
        compile: compile the decode step (``False``: the same static cache, eager steps).
        bf16: the steps run under bfloat16 autocast.
    """

    def __init__(
        self,
        model: nn.Module,
        cache_length: int,
        max_new_tokens: int | None = None,
        *,
        compile: bool = True,
        bf16: bool = False,
    ):
        self.model, self.cache_length, self.bf16 = model, int(cache_length), bf16
        self.max_new_tokens = max_new_tokens
        device = next(model.parameters()).device
        self.decode = compiled(decode_step, device) if compile else decode_step
        self.sample = compiled(sample_step, device) if compile else sample_step
        #: Whether the compiled step draws the tokens too: on CUDA, or for a small vocabulary (on a CPU Inductor's
        #: float64 scan over a large vocabulary is slower than ATen's: docs/benchmarks.md).
        self.fused_sampling = device.type == "cuda" or model.config.get_text_config().vocab_size <= FUSED_VOCABULARY
        self.slots: dict[int, tuple[StaticCache, dict[str, torch.Tensor]]] = {}  # by cache length, for batch size B
        self.cache: StaticCache | None = None  # the current turn's
        self.buffers: dict[str, torch.Tensor] = {}  # the step's inputs: one layout, one address, every step
        self.length = 0  # tokens written in the current turn's cache
        self.limit = 0  # its cache length
        self.agent: str | None = None  # whose turn the cache holds
        #: Whose turn each cache holds, and how many of its tokens: an agent's later turn continues its cache if no
        #: other agent's turn of that cache length has reset it since.
        self.held: dict[int, tuple[str, int]] = {}

    def prefill(
        self, agent: str, ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor, past: int = 0
    ) -> torch.Tensor:
        """Start ``agent``'s turn: its context ``ids`` ``(B, C)`` (left-padded; ``mask`` its attention mask,
        ``positions`` its positions), eager; ``(B, V)`` float32 logits of the next token. With ``past`` the first
        ``past`` columns are the agent's previous turn, which its cache holds: only the others are prefilled, into
        that cache where it has room for them and an answer, else into a larger one the previous turn is copied to
        (:meth:`_move`); where no cache holds the previous turn, the whole context, into a reset cache."""
        B, C = ids.shape
        if C > self.cache_length:
            raise ValueError(self._too_long(C))
        limit = self.bucket(C)
        held = next((n for n, (who, length) in self.held.items() if who == agent and length == past), 0)
        if past and held and self.slots[held][1]["mask"].shape[0] == B and (held >= limit or self._movable(held)):
            if held >= limit:  # the new columns, into the cache it holds
                self._switch(agent, held, B, ids, mask)
            else:  # the earlier turn, into a cache with room for this one
                self._move(agent, held, limit, B, ids, mask, past)
            new = slice(past, C)
            self.buffers["mask"][:, new] = mask[:, new]
            self.buffers["count"].add_(mask[:, new].sum(-1))
            ids, positions = ids[:, new], positions[:, new]
        else:
            self._switch(agent, limit, B, ids, mask)
            self.cache.reset()
            self.buffers["mask"].zero_()
            self.buffers["mask"][:, :C] = mask
            self.buffers["count"].copy_(mask.sum(-1))
        self.length = C
        self.held[self.limit] = (agent, C)
        with torch.autocast(ids.device.type, dtype=torch.bfloat16, enabled=self.bf16):
            out = self.model(
                input_ids=ids,
                attention_mask=self.buffers["mask"],
                position_ids=positions,
                cache=self.cache,
                use_cache=True,
                logits_to_keep=1,
            )
        return out.logits[:, -1, :].float()

    def _movable(self, limit: int) -> bool:
        """Whether the cache of ``limit`` tokens can be copied into a longer one: its layers are written plain static
        layers (a sliding-window layer keeps its own rolling layout, other kinds their own)."""
        return all(type(layer) is StaticLayer and layer.is_initialized for layer in self.slots[limit][0].layers)

    def _move(
        self, agent: str, held: int, limit: int, B: int, ids: torch.Tensor, mask: torch.Tensor, past: int
    ) -> None:
        """Make the cache of ``limit`` tokens ``agent``'s, holding the ``past`` tokens of its earlier turn copied from
        the cache of ``held`` tokens (keys, values, attention mask and counts), where its later turn outgrew it."""
        cache, buffers = self.slots[held]
        self._switch(agent, limit, B, ids, mask)
        self.cache.reset()
        for old, new in zip(cache.layers, self.cache.layers, strict=True):
            if not new.is_initialized:
                new.lazy_initialization(old.keys, old.values)
            new.keys[:, :, :past].copy_(old.keys[:, :, :past])
            new.values[:, :, :past].copy_(old.values[:, :, :past])
            new.cumulative_length.fill_(past)
        self.buffers["mask"].zero_()
        self.buffers["mask"][:, :past] = buffers["mask"][:, :past]
        self.buffers["count"].copy_(buffers["count"])

    def _switch(self, agent: str, limit: int, B: int, ids: torch.Tensor, mask: torch.Tensor) -> None:
        """Make ``agent``'s cache of ``limit`` tokens the current one (a new length, batch size or agent gets its
        cache, and a compiled step of its shapes at its first step)."""
        slot = self.slots.get(limit)
        if slot is None or slot[1]["mask"].shape[0] != B:
            device = ids.device
            buffers = {
                "mask": torch.zeros(B, limit, dtype=mask.dtype, device=device),
                "count": torch.zeros(B, dtype=mask.dtype, device=device),
                "index": torch.zeros((), dtype=torch.long, device=device),
                "ids": torch.zeros(B, 1, dtype=ids.dtype, device=device),
                "column": torch.zeros(B, dtype=mask.dtype, device=device),
                "uniform": torch.zeros(B, 1, dtype=torch.float64, device=device),
            }
            slot = self.slots[limit] = (StaticCache(config=self.model.config, max_cache_len=limit), buffers)
        self.cache, self.buffers = slot
        self.agent, self.limit = agent, limit

    def step(
        self,
        agent: str,
        ids: np.ndarray,
        column: np.ndarray,
        past: int,
        *,
        sample: bool = False,
        generator: torch.Generator | None = None,
    ) -> tuple[torch.Tensor | None, torch.Tensor, torch.Tensor | None]:
        """One token of ``agent``'s turn: ``ids`` ``(B,)`` the new tokens, ``column`` ``(B,)`` their attention mask,
        ``past`` the tokens before them. With ``sample`` the next tokens are drawn in the compiled step too, from
        ``generator`` (the global one if None): ``(tokens, logits, valid)``; without, ``(None, logits, None)``."""
        if agent != self.agent or past != self.length:
            raise RuntimeError(
                f"{agent!r} continues a turn of {past} tokens, but the static cache holds {self.length} tokens of "
                f"{self.agent!r}'s: a compiled actor plays one turn at a time, every step of it in order"
            )
        if past + 1 > self.limit:
            raise ValueError(self._too_long(past + 1))
        b = self.buffers
        b["ids"].view(-1).copy_(torch.from_numpy(np.ascontiguousarray(ids)))
        b["column"].copy_(torch.from_numpy(np.ascontiguousarray(column)))
        b["index"].fill_(past)
        self.length += 1
        self.held[self.limit] = (agent, self.length)
        inputs = (self.model, self.cache, b["ids"], b["mask"], b["count"], b["index"], b["column"])
        with torch.autocast(b["ids"].device.type, dtype=torch.bfloat16, enabled=self.bf16):
            if not sample:
                return None, self.decode(*inputs), None
            b["uniform"].uniform_(generator=generator)  # the draw sample_categorical makes: one per row
            return self.sample(*inputs, b["uniform"])

    def bucket(self, prompt: int) -> int:
        """The cache length of a turn whose prompt has ``prompt`` columns: the smallest of :data:`BUCKETS` that
        holds it and the longest answer, at most ``cache_length`` (without ``max_new_tokens``: ``cache_length``)."""
        if self.max_new_tokens is None:
            return self.cache_length
        need = prompt + self.max_new_tokens
        return min([b for b in BUCKETS if b >= need] + [self.cache_length])

    def _too_long(self, length: int) -> str:
        return (
            f"the turn reached {length} tokens, past its static cache's {max(self.limit, length - 1)} (of at most "
            f"{self.cache_length}): build the actor with a cache_length of the environment's context window, which "
            f"holds a turn's prompt and answer (the run's --context-length), and max_new_tokens its longest answer"
        )
