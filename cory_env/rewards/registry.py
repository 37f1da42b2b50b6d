"""Reward functions by name: built-ins, your own, other packages', and Hub classifiers.

:func:`get_reward` resolves a name, trying in order:

1. a registered name: the built-ins ``"vader"`` (sentiment; ``"vader-joined"`` in chat form), ``"gsm8k"`` (math
   answer checker), and whatever :func:`register` added;
2. an entry point of the group ``"cory_env.rewards"`` that an installed package
   declares (loaded only when asked for);
3. ``"package.module:function"``: imported;
4. anything else: a Hugging Face text-classification model (Hub name or local
   folder), whose positive label's raw logit is the reward
   (:class:`~cory_env.rewards.classifier.ClassifierReward`).

Every reward it returns is a :class:`CheckedReward`: each call goes through
:func:`~cory_env.rewards.base.score_responses`, so a reward that raises, returns the
wrong number of values or a non-finite value fails with a
:class:`~cory_env.rewards.base.RewardFunctionError` that names it and the item.

Example:
    >>> from cory_env.rewards import get_reward, register
    >>> @register("shouting")
    ... def shouting(queries, responses, **_):
    ...     return [sum(c.isupper() for c in r) / max(len(r), 1) for r in responses]
    >>> get_reward("shouting")(["q"], ["HI there"])
    [0.25]

A package makes its rewards available to every cory-env user who installs it with an
entry point in its ``pyproject.toml``::

    [project.entry-points."cory_env.rewards"]
    toxicity = "my_package.rewards:toxicity_reward"
"""

from __future__ import annotations

import importlib
import importlib.metadata
import threading
from collections.abc import Callable
from typing import Any, overload

import torch

from cory_env.errors import UsageError
from cory_env.rewards.base import RewardFunction, RewardFunctionError, reward_name, score_responses

#: The entry-point group other packages declare rewards in.
ENTRY_POINT_GROUP = "cory_env.rewards"

_REGISTRY: dict[str, RewardFunction] = {}


class RewardNotFoundError(UsageError):
    """A reward name that is not registered, not an entry point, not importable, and not a loadable classifier."""


#: Seconds a reward call may take by default (``--reward-timeout``) unless the function is marked slow.
DEFAULT_REWARD_TIMEOUT = 300.0


class CheckedReward:
    """A reward function with a name; every call is checked by :func:`score_responses`.

    Calling it returns a list of floats, one finite score per response, or raises
    :class:`RewardFunctionError` naming :attr:`name` and the offending item.
    ``fn`` is the unchecked function.

    ``timeout``: the seconds a call may take before it fails with
    :class:`~cory_env.rewards.base.RewardTimeoutError`; ``0``: no limit; ``None`` (the default):
    :data:`DEFAULT_REWARD_TIMEOUT`, or no limit for a function that declares itself slow with
    the attribute ``slow = True`` (a judge model behind a queue, a batch of program runs).
    Setting :attr:`cancel` (a :class:`threading.Event`) abandons the call in progress
    (:class:`~cory_env.rewards.base.RewardCallCancelled` after a few seconds' grace): the
    trainer sets it when it is asked to stop.
    """

    def __init__(self, name: str, fn: RewardFunction, timeout: float | None = None):
        if timeout is not None and (isinstance(timeout, bool) or not timeout >= 0):
            raise UsageError(f"--reward-timeout must be a number of seconds >= 0 (0: no limit), got {timeout!r}")
        self.name = name
        self.fn = fn
        if timeout is None:
            timeout = 0.0 if getattr(fn, "slow", False) else DEFAULT_REWARD_TIMEOUT
        self.timeout: float | None = float(timeout) or None
        self.cancel = threading.Event()

    def __call__(self, queries: list[str], responses: list[str], **metadata: Any) -> list[float]:
        return score_responses(
            self.fn, list(queries), list(responses), metadata, name=self.name, timeout=self.timeout, cancel=self.cancel
        ).tolist()

    def __repr__(self) -> str:
        return f"CheckedReward({self.name!r}, {self.fn!r})"


@overload
def register(name: str, fn: None = None, *, replace: bool = False) -> Callable[[RewardFunction], RewardFunction]: ...
@overload
def register(name: str, fn: RewardFunction, *, replace: bool = False) -> RewardFunction: ...
def register(name: str, fn: RewardFunction | None = None, *, replace: bool = False) -> Any:
    """Register ``fn`` as the reward called ``name``; without ``fn``, a decorator that does so.

    Args:
        name: what :func:`get_reward` (and ``--reward``) will know it as. No ``:``
            (that form means ``module:function``).
        fn: a batched reward function ``(queries, responses, **metadata) -> list[float]``.
        replace: allow replacing a reward already registered under ``name``.

    Returns:
        ``fn`` itself (so the decorator leaves the function unchanged).
    """
    if not isinstance(name, str) or not name.strip() or ":" in name:
        raise ValueError(f"a reward name must be a non-empty string without ':', got {name!r}")
    if fn is None:
        return lambda f: register(name, f, replace=replace)
    if not callable(fn):
        raise TypeError(f"reward {name!r} must be callable (queries, responses, **metadata) -> list[float], got {fn!r}")
    if name in _REGISTRY and _REGISTRY[name] is not fn and not replace:
        raise ValueError(
            f"a reward named {name!r} is already registered ({reward_name(_REGISTRY[name])}); "
            "pass replace=True to replace it"
        )
    _REGISTRY[name] = fn
    return fn


def unregister(name: str) -> None:
    """Forget a registered reward (mainly for tests)."""
    _REGISTRY.pop(name, None)


def _entry_points() -> dict[str, importlib.metadata.EntryPoint]:
    found: dict[str, importlib.metadata.EntryPoint] = {}
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        found.setdefault(ep.name, ep)  # the first on sys.path wins, as for imports
    return found


def available_rewards() -> list[str]:
    """Names :func:`get_reward` knows without importing anything: registered and entry points."""
    return sorted(set(_REGISTRY) | set(_entry_points()))


def get_reward(
    name: str | RewardFunction, device: str | torch.device | None = None, *, timeout: float | None = None
) -> CheckedReward:
    """Resolve a reward by name (see the module docs for the order); a callable is wrapped as is.

    Args:
        name: a registered or entry-point name, ``"package.module:function"``, a Hub
            text-classification model name or local folder, or a reward function.
        device: where a classifier reward runs (the agents' device); ``None``: CUDA if
            available, else CPU. Other rewards ignore it.
        timeout: seconds a call may take (:class:`CheckedReward`; ``None``: the default, ``0``:
            no limit). A :class:`CheckedReward` given as ``name`` keeps its own unless given.

    Raises:
        RewardNotFoundError: the name resolves to nothing; the message lists the
            registered rewards and the other forms (and, offline, how to get a Hub model).
    """
    if isinstance(name, CheckedReward):
        return name if timeout is None else CheckedReward(name.name, name.fn, timeout)
    if callable(name) and not isinstance(name, str):
        return CheckedReward(reward_name(name), name, timeout)
    if not isinstance(name, str) or not name.strip():
        raise RewardNotFoundError(f"a reward name must be a non-empty string, got {name!r}. {_forms()}")
    name = name.strip()
    if name in _REGISTRY:
        return CheckedReward(name, _REGISTRY[name], timeout)
    entry_point = _entry_points().get(name)
    if entry_point is not None:
        return CheckedReward(name, _load_entry_point(entry_point), timeout)
    if ":" in name:
        return CheckedReward(name, _import_function(name), timeout)
    return CheckedReward(f"classifier {name!r}", _load_classifier(name, device), timeout)


def _forms() -> str:
    return (
        f"A reward is a registered name ({', '.join(available_rewards()) or 'none'}), "
        f"an entry point of the group {ENTRY_POINT_GROUP!r}, package.module:function, "
        "or a Hugging Face text-classification model (Hub name or local folder)."
    )


def _load_entry_point(entry_point: importlib.metadata.EntryPoint) -> RewardFunction:
    dist = getattr(entry_point.dist, "name", None) or "an installed package"
    try:
        fn = entry_point.load()
    except Exception as exc:  # noqa: BLE001 - reported with where it came from
        raise RewardNotFoundError(
            f"reward {entry_point.name!r} is declared by {dist} (entry point {entry_point.value!r} in the group "
            f"{ENTRY_POINT_GROUP!r}) but cannot be loaded: {type(exc).__name__}: {exc}"
        ) from exc
    if not callable(fn):
        raise RewardNotFoundError(
            f"reward {entry_point.name!r} from {dist} ({entry_point.value!r}) is {type(fn).__name__}, not a function"
        )
    return fn


def _import_function(spec: str) -> RewardFunction:
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise RewardNotFoundError(f"reward {spec!r}: write package.module:function. {_forms()}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise RewardNotFoundError(
            f"reward {spec!r}: cannot import the module {module_name!r} ({exc}). "
            "Is the package installed, or its folder on PYTHONPATH?"
        ) from exc
    fn: Any = module
    for part in attr.split("."):
        if not hasattr(fn, part):
            public = sorted(n for n in dir(module) if not n.startswith("_") and callable(getattr(module, n)))
            raise RewardNotFoundError(
                f"reward {spec!r}: module {module_name!r} has no attribute {attr!r}; "
                f"its public callables are {public[:20]}"
            )
        fn = getattr(fn, part)
    if not callable(fn):
        raise RewardNotFoundError(f"reward {spec!r} is {type(fn).__name__}, not a function")
    return fn


def _load_classifier(name: str, device: str | torch.device | None) -> RewardFunction:
    from huggingface_hub.errors import HFValidationError

    from cory_env.hub import hub_offline, offline_error_hint
    from cory_env.rewards.classifier import ClassifierReward

    try:
        return ClassifierReward(name, device=device)
    except (OSError, HFValidationError) as exc:  # not found / offline / not a valid repo id
        lines = [
            f"unknown reward {name!r}: it is not a registered reward, not an entry point, not "
            f"package.module:function, and no text-classification model of that name could be loaded "
            f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}).",
            _forms(),
        ]
        if hub_offline():
            lines.append(offline_error_hint("model", name, embedded="vader"))
        raise RewardNotFoundError("\n".join(lines)) from exc


def _register_builtins() -> None:
    from cory_env.rewards.gsm8k import gsm8k_reward
    from cory_env.rewards.sentiment import vader_joined, vader_sentiment
    from cory_env.tasks.signal import signal_reward
    from cory_env.tasks.taboo import taboo_reward

    register("vader", vader_sentiment)
    register("vader-joined", vader_joined)
    register("gsm8k", gsm8k_reward)
    register("signal", signal_reward)
    register("taboo", taboo_reward)


_register_builtins()


__all__ = [
    "ENTRY_POINT_GROUP",
    "CheckedReward",
    "DEFAULT_REWARD_TIMEOUT",
    "RewardFunctionError",
    "RewardNotFoundError",
    "available_rewards",
    "get_reward",
    "register",
    "unregister",
]
