"""The reward-function contract, and the checked call the environment makes.

A reward function scores a batch of complete responses::

    def my_reward(queries: list[str], responses: list[str], **metadata) -> list[float]

``metadata`` holds one list per key of the prompts' :attr:`~cory_env.prompts.Prompt.metadata`
(for example ``answer=[...]`` for GSM8K). Functions that do not need it accept ``**_``.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np


class RewardFunction(Protocol):
    def __call__(
        self, queries: list[str], responses: list[str], **metadata: Any
    ) -> Sequence[float]: ...


class RewardFunctionError(RuntimeError):
    """A reward function raised, or returned something that is not one finite score per response."""


def reward_name(fn: Any) -> str:
    """A readable name for a reward function, for error messages and logs."""
    name = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    module = getattr(fn, "__module__", None)
    return f"{module}.{name}" if module and module != "builtins" else name


def score_responses(
    fn: RewardFunction,
    queries: list[str],
    responses: list[str],
    metadata: Mapping[str, list[Any]] | None = None,
    *,
    name: str | None = None,
) -> np.ndarray:
    """Call ``fn`` on a batch and check it returned one finite float per response.

    Returns a float64 array of shape ``(len(responses),)``. Raises
    :class:`RewardFunctionError` naming the function (``name``, default
    :func:`reward_name`) and the offending item. A :class:`RewardFunctionError` raised
    inside ``fn`` (an already checked reward) passes through unchanged.
    """
    name = name or reward_name(fn)
    try:
        raw = fn(queries, responses, **(metadata or {}))
    except RewardFunctionError:
        raise
    except Exception as exc:
        if isinstance(exc, TypeError) and (mismatch := _signature_mismatch(fn, queries, responses, metadata)):
            keys = "".join(f", {k}=[...]" for k in metadata or {})
            raise RewardFunctionError(
                f"reward function {name} cannot be called as fn(queries, responses{keys}): {mismatch}. "
                f"Define it as def {_def_name(fn)}(queries, responses, **metadata) -> list[float]"
            ) from exc
        raise RewardFunctionError(
            f"reward function {name} raised {type(exc).__name__}: {exc} "
            f"(while scoring {len(responses)} responses; first query {queries[0] if queries else None!r})"
        ) from exc
    try:
        scores = np.asarray(raw, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError) as exc:
        raise RewardFunctionError(
            f"reward function {name} must return one float per response, "
            f"got {type(raw).__name__}: {raw!r:.200}"
        ) from exc
    if np.ndim(raw) == 0 or scores.shape[0] != len(responses):
        raise RewardFunctionError(
            f"reward function {name} returned {scores.size if np.ndim(raw) else 'a scalar'} "
            f"value(s) for {len(responses)} responses: it must return one float per response"
        )
    bad = np.flatnonzero(~np.isfinite(scores))
    if bad.size:
        i = int(bad[0])
        raise RewardFunctionError(
            f"reward function {name} returned {scores[i]} for item {i} "
            f"(query {queries[i]!r}, response {responses[i]!r}); rewards must be finite. "
            f"{bad.size} of {len(responses)} scores are NaN or infinite."
        )
    return scores


def _signature_mismatch(fn: Any, queries: list[str], responses: list[str], metadata: Mapping[str, Any] | None) -> str:
    """Why ``fn``'s signature does not take the reward call's arguments; empty if it does (or is unknown)."""
    try:
        inspect.signature(fn).bind(queries, responses, **(metadata or {}))
    except TypeError as exc:
        return str(exc)
    except ValueError:  # no signature to inspect (some builtins)
        pass
    return ""


def _def_name(fn: Any) -> str:
    name = getattr(fn, "__name__", "")
    return name if name.isidentifier() else "my_reward"
