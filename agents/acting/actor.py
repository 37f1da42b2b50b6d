"""Acting in the pioneer/observer environment with a causal language model.

:class:`LMActor` turns observations into token ids with one incremental forward pass
per step: it keeps the model's KV cache across the steps of a turn, using the
observation's ``past_length`` and ``num_new_tokens`` to feed only the new columns (and, where a turn
carries the agent's earlier one, across its turns: chat form).

Example:
    >>> from cory_env import env
    >>> from cory_env.models import load_causal_lm
    >>> e, actor = env(num_conversations=4, max_new_tokens=4), LMActor(load_causal_lm())
    >>> e.reset(seed=0)
    >>> for agent in e.agent_iter():
    ...     obs, reward, term, trunc, info = e.last()
    ...     e.step(None if term else actor.act(agent, obs))
    >>> len(info["response"])  # the observer's last info: one response per conversation
    4
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from transformers import DynamicCache, LogitsProcessorList
from transformers.generation.logits_process import (
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from cory_agents.acting.sampling import not_a_distribution, sample_categorical
from cory_agents.acting.static_decode import StaticDecoder


@dataclass
class StepOutput:
    """What one acting step computed (the PPO agent keeps these for learning)."""

    tokens: torch.Tensor  # (B,) sampled token ids
    logits: torch.Tensor  # (B, V) processed next-token logits the tokens were drawn from


def generate_positions(attention_mask: torch.Tensor) -> torch.Tensor:
    """Position ids of left-padded contexts as ``generate`` gives them: each real token's count
    of real tokens before it (padding gets 0, which nothing attends to)."""
    return (attention_mask.cumsum(-1) - 1).clamp(min=0)


#: What a compiled step's NaN logits at a run's start can come from, and the fix.
STALE_CACHE = (
    "Inductor's cache (TORCHINDUCTOR_CACHE_DIR) may hold a step compiled under other CPU kernel settings "
    "(ATEN_CPU_CAPABILITY, ONEDNN_MAX_CPU_ISA): point TORCHINDUCTOR_CACHE_DIR at a fresh folder"
)


class LMActor:
    """A causal LM policy for the environment, with a KV cache per agent.

    Args:
        model: a Hugging Face causal LM (``AutoModelForCausalLM``).
        do_sample: sample (True) or take the most likely token (False, greedy).
        temperature: sampling temperature, as in ``model.generate``.
        top_k: keep the k most likely tokens (``0``: off, the paper's setting).
        top_p: nucleus sampling (``1.0``: off, the paper's setting).
        generator: a ``torch.Generator`` for reproducible sampling.
        bf16: run the forward passes under bfloat16 autocast.
        cache_length: with it, a static KV cache of that many tokens and a compiled decode step
            (:mod:`cory_agents.acting.static_decode`: ``--compile``): the environment's ``context_length``;
            ``max_new_tokens`` (its turn limit's upper end) lets each turn's cache be as short as it needs. ``compile=False`` keeps the static cache with eager steps.

    One actor can serve several agents (e.g. one model for both roles): the cache
    is kept per agent name.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        *,
        do_sample: bool = True,
        temperature: float = 1.0,
        top_k: int = 0,
        top_p: float = 1.0,
        generator: torch.Generator | None = None,
        bf16: bool = False,
        cache_length: int | None = None,
        max_new_tokens: int | None = None,
        compile: bool = True,
    ):
        self.model = model
        #: The static cache and compiled step (``cache_length`` given), else None: the eager dynamic cache.
        self.static = (
            StaticDecoder(model, cache_length, max_new_tokens, compile=compile, bf16=bf16) if cache_length else None
        )
        self.bf16 = bf16
        self.do_sample = do_sample
        self.generator = generator
        warpers: list[Any] = []
        if temperature != 1.0:
            warpers.append(TemperatureLogitsWarper(temperature))
        if top_k:
            warpers.append(TopKLogitsWarper(top_k))
        if top_p < 1.0:
            warpers.append(TopPLogitsWarper(top_p))
        self.logits_processor = LogitsProcessorList(warpers)
        #: Whether a decode step samples inside the compiled step (the paper's setting: no temperature, top-k or top-p).
        self.fused_sampling = bool(self.static and self.static.fused_sampling and do_sample and not warpers)
        self._caches: dict[str, DynamicCache] = {}
        self._cached_length: dict[str, int] = {}

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def forget(self, agent: str | None = None) -> None:
        """Drop the KV cache of one agent (or all)."""
        for name in [agent] if agent is not None else list(self._caches):
            self._caches.pop(name, None)
            self._cached_length.pop(name, None)

    @torch.no_grad()
    def act(self, agent: str, observation: dict[str, np.ndarray]) -> np.ndarray | int:
        """The next token id(s) for ``agent``: an int in the single form, ``(B,)`` array batched."""
        out = self.step(agent, observation)
        tokens = out.tokens.cpu().numpy()
        return int(tokens[0]) if np.ndim(observation["input_ids"]) == 1 else tokens

    @torch.no_grad()
    def step(self, agent: str, observation: dict[str, np.ndarray]) -> StepOutput:
        """One incremental forward pass, then pick the next tokens."""
        if self.fused_sampling and observation["num_new_tokens"][0] == 1 and observation["past_length"][0]:
            # a compiled decode step that samples too
            tokens, logits, valid = self.static.step(
                agent, *self._new_column(observation), sample=True, generator=self.generator
            )
            if not bool(valid.all()):
                raise not_a_distribution(valid, f"with --compile, at a run's first iteration: {STALE_CACHE}")
            return StepOutput(tokens=tokens, logits=logits)
        logits = self.next_token_logits(agent, observation)
        if self.logits_processor:
            input_ids = torch.tensor(np.atleast_2d(observation["input_ids"]), device=logits.device)
            scores = self.logits_processor(input_ids, logits)
        else:  # the paper's setting (temperature 1, no top-k/top-p): skip copying the whole context
            scores = logits
        if self.do_sample:
            tokens = sample_categorical(torch.softmax(scores, dim=-1), self.generator)
        else:
            tokens = scores.argmax(dim=-1)
        return StepOutput(tokens=tokens, logits=scores)

    @staticmethod
    def _new_column(observation: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray, int]:
        """A decode step's inputs from its observation: the new tokens, their attention mask, the tokens before."""
        new = int(observation["num_new_tokens"][0])
        if new != 1:
            raise ValueError(f"a decode step after the prompt takes one new token per conversation, got {new}")
        ids, mask = np.atleast_2d(observation["input_ids"]), np.atleast_2d(observation["attention_mask"])
        return ids[:, -1], mask[:, -1], int(observation["past_length"][0])

    def next_token_logits(self, agent: str, observation: dict[str, np.ndarray]) -> torch.Tensor:
        """``(B, V)`` float32 logits for the next token, reusing ``agent``'s KV cache."""
        past = int(observation["past_length"][0])
        new = int(observation["num_new_tokens"][0])
        if new == 0:
            raise ValueError(f"{agent!r} has no context yet: it is not its turn")
        if self.static is not None and past and new == 1:
            return self.static.step(agent, *self._new_column(observation))[1]
        if self.static is not None:  # a turn's prompts (after those of its earlier turn, if carried): the prefill
            device = self.device
            ids = torch.tensor(np.atleast_2d(observation["input_ids"])[:, -(past + new) :], device=device)
            mask = torch.tensor(np.atleast_2d(observation["attention_mask"])[:, -(past + new) :], device=device)
            return self.static.prefill(agent, ids, mask, generate_positions(mask), past=past)
        if past == 0:
            self._caches[agent] = DynamicCache()
        elif self._cached_length.get(agent) != past:
            raise RuntimeError(
                f"{agent!r}'s observation continues a context of {past} tokens, but its KV cache holds "
                f"{self._cached_length.get(agent, 0)}: feed every observation of a turn to act(), in order"
            )
        device = self.device
        ids = torch.tensor(np.atleast_2d(observation["input_ids"])[:, -new:], device=device)
        mask = torch.tensor(np.atleast_2d(observation["attention_mask"])[:, -(past + new) :], device=device)
        positions = generate_positions(mask)[:, -new:]
        keep = torch.tensor([new - 1], device=device) if past == 0 else 1  # the last column's logits
        cache = self._caches[agent]
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=self.bf16):
            out = self.model(
                input_ids=ids,
                attention_mask=mask,
                position_ids=positions,
                logits_to_keep=keep,
                cache=cache,
                use_cache=True,
            )
        self._cached_length[agent] = past + new
        return out.logits[:, -1, :].float()
