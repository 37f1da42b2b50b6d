"""Decoding with a static KV cache and a compiled one-token step (``--compile``).

:class:`~cory_agents.acting.actor.LMActor`'s eager path runs one Hugging Face forward per token with a
``DynamicCache`` that grows by concatenation: a few hundred small operators per token whatever the
model's size, each a kernel launch on a GPU. This module gives an actor a :class:`StaticDecoder`:

- one ``transformers.StaticCache`` per actor, preallocated for the longest turn the run can play
  (``cache_length``: the environment's context window, which holds a turn's prompt and answer) and reset, not rebuilt, at each turn's
  prefill; the keys and values are written in place, so every decode step has the same shapes;
- the prefill (a turn's prompt, of any length) runs eager into that cache;
- each later step, one new token per conversation, runs a compiled function of fixed shapes:
  token ids ``(B, 1)``, positions ``(B, 1)`` and the attention mask over the whole cache
  ``(B, cache_length)`` (zero past the tokens written), kept in a buffer of its own that each step
  updates in place. ``torch.compile`` with ``dynamic=False``: on CUDA ``mode="reduce-overhead"``
  (CUDA graphs: one launch for the step), on a CPU Inductor's C++ kernels. The compiled function
  takes the model as an argument, so actors of models of one architecture share its graph.

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
from transformers import StaticCache


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
    drawn by the caller from the actor's generator): ``(tokens, logits, valid)``, ``valid`` whether every row was a
    distribution (not NaN or inf, not all 0)."""
    logits = decode_step(model, cache, ids, mask, count, index, column)
    cdf = torch.softmax(logits, dim=-1).double().cumsum(-1)
    total = cdf[:, -1:]
    valid = ((total > 0) & torch.isfinite(total)).all()
    tokens = torch.searchsorted(cdf / total, uniform, right=True).squeeze(1)
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
        cache_length: the cache's length in tokens: the environment's ``context_length`` (a prompt and its answer).
        compile: compile the decode step (``False``: the same static cache, eager steps).
        bf16: the steps run under bfloat16 autocast.
    """

    def __init__(self, model: nn.Module, cache_length: int, *, compile: bool = True, bf16: bool = False):
        self.model, self.cache_length, self.bf16 = model, int(cache_length), bf16
        device = next(model.parameters()).device
        self.decode = compiled(decode_step, device) if compile else decode_step
        self.sample = compiled(sample_step, device) if compile else sample_step
        self.cache: StaticCache | None = None
        self.buffers: dict[str, torch.Tensor] = {}  # the step's inputs: one layout, one address, every step
        self.length = 0  # tokens written this turn
        self.agent: str | None = None  # whose turn the cache holds

    def prefill(self, agent: str, ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Start ``agent``'s turn: its prompts ``ids`` ``(B, P)`` (left-padded; ``mask`` their attention mask,
        ``positions`` theirs) into the reset cache, eager; ``(B, V)`` float32 logits of the next token."""
        B, P = ids.shape
        if P > self.cache_length:
            raise ValueError(self._too_long(P))
        if self.cache is None or self.buffers["mask"].shape[0] != B:
            self.cache = StaticCache(config=self.model.config, max_cache_len=self.cache_length)
            device = ids.device
            self.buffers = {
                "mask": torch.zeros(B, self.cache_length, dtype=mask.dtype, device=device),
                "count": torch.zeros(B, dtype=mask.dtype, device=device),
                "index": torch.zeros((), dtype=torch.long, device=device),
                "ids": torch.zeros(B, 1, dtype=ids.dtype, device=device),
                "column": torch.zeros(B, dtype=mask.dtype, device=device),
                "uniform": torch.zeros(B, 1, dtype=torch.float64, device=device),
            }
        else:
            self.cache.reset()
            self.buffers["mask"].zero_()
        self.buffers["mask"][:, :P] = mask
        self.buffers["count"].copy_(mask.sum(-1))
        self.agent, self.length = agent, P
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
        if past + 1 > self.cache_length:
            raise ValueError(self._too_long(past + 1))
        b = self.buffers
        b["ids"].view(-1).copy_(torch.from_numpy(np.ascontiguousarray(ids)))
        b["column"].copy_(torch.from_numpy(np.ascontiguousarray(column)))
        b["index"].fill_(past)
        self.length += 1
        inputs = (self.model, self.cache, b["ids"], b["mask"], b["count"], b["index"], b["column"])
        with torch.autocast(b["ids"].device.type, dtype=torch.bfloat16, enabled=self.bf16):
            if not sample:
                return None, self.decode(*inputs), None
            b["uniform"].uniform_(generator=generator)  # the draw sample_categorical makes: one per row
            return self.sample(*inputs, b["uniform"])

    def _too_long(self, length: int) -> str:
        return (
            f"the turn reached {length} tokens, past the static cache's {self.cache_length}: build the actor with a "
            f"cache_length of the environment's context window, which holds a turn's prompt and answer (the run's "
            f"--context-length)"
        )
