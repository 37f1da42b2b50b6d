"""The environment's spaces, and the check of an action against them.

Each agent observes a Dict of Box (its context window and three scalars) and acts with one token
id of its own vocabulary, or one per conversation in the batched form (MultiDiscrete). The
global state (:meth:`~cory_env.PioneerObserverEnv.state`) is a Box over every role's window.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium
import numpy as np

from cory_env.speakers import Speaker


def agent_spaces(
    speakers: Sequence[Speaker], num_conversations: int, context_length: int, batched: bool
) -> list[tuple[gymnasium.spaces.Dict, gymnasium.spaces.Space]]:
    """One ``(observation_space, action_space)`` per agent (one speaker each), each its own object
    (seeded independently)."""
    B, L, num_roles = num_conversations, context_length, len(speakers)
    shape = (B, L) if batched else (L,)
    scalar = lambda high: gymnasium.spaces.Box(0, high, shape=(1,), dtype=np.int64)  # noqa: E731
    spaces = []
    for speaker in speakers:
        V = speaker.vocab_size
        obs = gymnasium.spaces.Dict(
            {
                "input_ids": gymnasium.spaces.Box(0, V - 1, shape=shape, dtype=np.int64),
                "attention_mask": gymnasium.spaces.Box(0, 1, shape=shape, dtype=np.int64),
                "past_length": scalar(L),
                "num_new_tokens": scalar(L),
                "role": scalar(max(num_roles - 1, 1)),
            }
        )
        act = gymnasium.spaces.MultiDiscrete(np.full(B, V, dtype=np.int64)) if batched else gymnasium.spaces.Discrete(V)
        spaces.append((obs, act))
    return spaces


def state_space(
    speakers: Sequence[Speaker], num_conversations: int, context_length: int, batched: bool
) -> gymnasium.spaces.Box:
    """Token ids of every role's window, ``-1`` where masked: ``(B, R, L)``, or ``(R, L)`` unbatched."""
    B, L, num_roles = num_conversations, context_length, len(speakers)
    high = max(s.vocab_size for s in speakers) - 1
    return gymnasium.spaces.Box(-1, high, shape=(B, num_roles, L) if batched else (num_roles, L), dtype=np.int64)


def as_token_ids(action: Any, agent: str, num_conversations: int | None, vocab_size: int) -> np.ndarray:
    """``action`` as int64 token ids, one per conversation (``num_conversations=None``: the single
    form, one id), or an error that names the agent, the problem and the fix."""
    if action is None:
        raise ValueError(f"{agent!r} is acting, so its action must be a token id, got None")
    try:
        arr = np.asarray(action)
    except Exception as exc:  # e.g. a CUDA tensor
        raise TypeError(f"action for {agent!r} must be integer token id(s), got {type(action).__name__}") from exc
    batched = num_conversations is not None
    shape = (num_conversations,) if batched else ()
    if arr.dtype.kind not in "iu":
        raise TypeError(
            f"action for {agent!r} must be integer token id(s), got dtype {arr.dtype} ({action!r:.80}); "
            f"convert with int(...) or .astype(np.int64)"
        )
    if arr.shape != shape:
        raise ValueError(
            f"action for {agent!r} must have shape {shape} "
            f"({'one token id per conversation' if batched else 'a single token id'}), got shape {arr.shape}"
        )
    arr = arr.reshape(-1).astype(np.int64, copy=False)
    bad = (arr < 0) | (arr >= vocab_size)
    if bad.any():
        i = int(np.argmax(bad))
        where = f" for conversation {i}" if batched else ""
        raise ValueError(
            f"token id {int(arr[i])}{where} is out of range for {agent!r}: "
            f"valid ids are 0..{vocab_size - 1} (vocab_size={vocab_size})"
        )
    return arr
