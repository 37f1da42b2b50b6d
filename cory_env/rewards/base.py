"""The reward-function contract, and the checked call the environment makes.

A reward function scores a batch of complete responses::

    def my_reward(queries: list[str], responses: list[str], **metadata) -> list[float]

``metadata`` holds one list per key of the prompts' :attr:`~cory_env.prompts.Prompt.metadata`
(for example ``answer=[...]`` for GSM8K). Functions that do not need it accept ``**_``.

It returns one real number per response: a list of ``float`` or ``int``, or a numeric numpy
array or torch tensor. Anything else (a ``bool``, a string, even ``"0.5"``, ``None``, NaN or
infinity) is refused with a :class:`RewardFunctionError` that names the function, the item
and what it was.

**A reward that hangs.** A call may be given a time limit (``timeout``, ``--reward-timeout``):
past it the call fails with :class:`RewardTimeoutError`, naming the reward. The call runs in a
worker thread, so that the caller can also abandon it (``cancel``, set when a training run is
asked to stop): it gets :data:`CANCEL_GRACE_S` seconds to return, then fails with
:class:`RewardCallCancelled`. An abandoned call's thread is left to finish (Python cannot stop
a thread); it ends with the process. The worker keeps the caller's gradient mode (torch's is
per thread).
"""

from __future__ import annotations

import inspect
import numbers
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np
import torch

from cory_env.errors import CoryError


class RewardFunction(Protocol):
    def __call__(self, queries: list[str], responses: list[str], **metadata: Any) -> Sequence[float]: ...


#: Seconds an abandoned reward call (see ``cancel``) still has to return before it fails.
CANCEL_GRACE_S = 5.0


class RewardFunctionError(CoryError, RuntimeError):
    """A reward function raised, or returned something that is not one finite score per response."""


class RewardTimeoutError(RewardFunctionError):
    """A reward call ran past its time limit (``--reward-timeout``)."""


class RewardCallCancelled(RewardFunctionError):
    """A reward call that its caller abandoned (a stop request) and that did not return in the grace time."""


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
    timeout: float | None = None,
    cancel: threading.Event | None = None,
) -> np.ndarray:
    """Call ``fn`` on a batch and check it returned one finite real number per response.

    Returns a float64 array of shape ``(len(responses),)``. Raises
    :class:`RewardFunctionError` naming the function (``name``, default
    :func:`reward_name`) and the offending item. A :class:`RewardFunctionError` raised
    inside ``fn`` (an already checked reward) passes through unchanged.

    ``timeout`` (seconds) limits the call (:class:`RewardTimeoutError`); once ``cancel`` is
    set during the call, it has :data:`CANCEL_GRACE_S` seconds left (:class:`RewardCallCancelled`);
    a call that starts after ``cancel`` was set runs to its end (or its ``timeout``): the run was
    asked to finish its iteration. With either, ``fn`` runs in a worker thread (the caller's
    gradient mode carried over; a reward that needs the main thread, as signal-based time limits
    do, must not use them); with neither, in the caller's thread.
    """
    name = name or reward_name(fn)
    try:
        if timeout is None and cancel is None:
            raw = fn(queries, responses, **(metadata or {}))
        else:
            raw = _call_with_deadline(lambda: fn(queries, responses, **(metadata or {})), name, timeout, cancel)
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
    _check_real_numbers(raw, name, queries, responses)
    if isinstance(raw, torch.Tensor):
        raw = raw.detach().to("cpu", torch.float64)  # one that needs grad, on a GPU or in bfloat16
    try:
        scores = np.asarray(raw, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError) as exc:
        raise RewardFunctionError(
            f"reward function {name} must return one float per response, got {type(raw).__name__}: {raw!r:.200}"
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


#: The keywords a reward that scores every turn takes: the round and the chain position (0-based), and the
#: answers of the turns played before this one (``earlier``: per conversation, in the order played).
TURN_KEYWORDS = ("round", "position", "earlier")


def told_turn(
    keys: Sequence[str], metadata: Mapping[str, Any], round: int, position: int, history: Sequence[Any]
) -> dict[str, Any]:
    """What a reward that scores every turn is told of the turn it scores (those of :data:`TURN_KEYWORDS` it takes,
    ``keys``; a prompt field of the same name wins: the reward got it before): ``history`` holds the turns played
    before it, ``(position, round, answers)``.

    >>> told_turn(("position", "earlier"), {}, 0, 1, [(0, 0, ["a", "b"])])
    {'position': 1, 'earlier': [['a'], ['b']]}
    """
    told: dict[str, Any] = {}
    for key in keys:
        if key in metadata:
            continue
        if key == "earlier":
            B = len(history[0][2]) if history else 0
            told[key] = [[answers[b] for _, _, answers in history] for b in range(B)]
        else:
            told[key] = round if key == "round" else position
    return told


def turn_keywords(fn: Any) -> tuple[str, ...]:
    """The turn keywords a reward function takes (it scores every turn): those of ``round``,
    ``position`` and ``earlier`` its signature names, or all if it names one and takes ``**kwargs`` too (a
    :class:`~cory_env.rewards.registry.CheckedReward` or ``functools.partial`` is looked through).
    The environment passes them; a function that names neither is called as before."""
    for _ in range(8):  # a CheckedReward around a partial around the function: a few layers at most
        inner = getattr(fn, "fn", None) or getattr(fn, "func", None)
        if not callable(inner) or inner is fn:
            break
        fn = inner
    try:
        parameters = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return ()
    named = tuple(
        name
        for name in TURN_KEYWORDS
        if name in parameters
        and parameters[name].kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    )
    if named and any(p.kind is p.VAR_KEYWORD for p in parameters.values()):
        return TURN_KEYWORDS
    return named


def _call_with_deadline(
    call: Callable[[], Any], name: str, timeout: float | None, cancel: threading.Event | None
) -> Any:
    """``call()`` in a worker thread, waited for until ``timeout`` or :data:`CANCEL_GRACE_S` after ``cancel``."""
    outcome: dict[str, Any] = {}
    done = threading.Event()
    grad = torch.is_grad_enabled()

    def work() -> None:
        try:
            with torch.set_grad_enabled(grad):
                outcome["value"] = call()
        except BaseException as exc:  # noqa: BLE001 - raised again in the caller's thread
            outcome["error"] = exc
        finally:
            done.set()

    start = time.monotonic()
    if cancel is not None and cancel.is_set():
        cancel = None  # asked to stop before the call began: the iteration finishes, this call with it
    threading.Thread(target=work, name=f"reward {name}", daemon=True).start()
    cancelled_at = None
    while not done.wait(0.05):  # short waits: the caller's signal handlers run in between
        now = time.monotonic()
        if cancel is not None and cancel.is_set():
            cancelled_at = now if cancelled_at is None else cancelled_at
            if now - cancelled_at >= CANCEL_GRACE_S:
                raise RewardCallCancelled(
                    f"reward function {name} was abandoned: the run was asked to stop during its call, which had not "
                    f"returned {now - start:.0f} s after it began ({CANCEL_GRACE_S:.0f} s after the stop request)"
                )
        if timeout is not None and now - start >= timeout:
            raise RewardTimeoutError(
                f"reward function {name} did not return within {timeout:g} s (--reward-timeout). If it is slow but "
                f"working, give a larger --reward-timeout, 0 for no limit, or mark the function slow "
                f"(my_reward.slow = True); if it hangs (a server that does not answer, a lock), fix that"
            )
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def _check_real_numbers(raw: Any, name: str, queries: list[str], responses: list[str]) -> None:
    """Refuse scores that are not real numbers (bools, strings, None, objects), naming the first such item."""
    if isinstance(raw, torch.Tensor):
        if raw.dtype == torch.bool or raw.is_complex():
            raise RewardFunctionError(
                f"reward function {name} returned a tensor of {raw.dtype}: rewards must be "
                f"real numbers, for example rewards.float()"
            )
        return
    if isinstance(raw, np.ndarray) and raw.dtype.kind in "iuf":
        return
    if isinstance(raw, (str, bytes)) or not isinstance(raw, (Sequence, np.ndarray)):
        return  # a scalar or another kind of container: the count check below names it
    for i, item in enumerate(np.asarray(raw, dtype=object).reshape(-1) if isinstance(raw, np.ndarray) else raw):
        if _is_real_number(item):
            continue
        where = f"query {queries[i]!r}, response {responses[i]!r}" if i < len(responses) else "past the last response"
        hint = " (a string of a number: return float(...) of it)" if isinstance(item, (str, bytes)) else ""
        raise RewardFunctionError(
            f"reward function {name} returned {type(item).__name__} {item!r:.80} for item {i} ({where}); rewards "
            f"must be real numbers (float or int), not {type(item).__name__}{hint}"
        )


def _is_real_number(item: Any) -> bool:
    if isinstance(item, (bool, np.bool_)):
        return False
    if isinstance(item, numbers.Real):
        return True
    if isinstance(item, torch.Tensor):  # a one-value tensor
        return item.ndim == 0 and item.dtype != torch.bool and not item.dtype.is_complex
    if isinstance(item, np.ndarray):
        return item.ndim == 0 and item.dtype.kind in "iuf"
    return False


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
