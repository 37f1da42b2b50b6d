"""Can we reach the Hugging Face Hub?

Loaders that take Hub names (models, data sets) ask :func:`hub_offline` first. When
the Hub is offline or unreachable they load with ``local_files_only=True`` so that a
name missing from the local cache fails at once, instead of after the ~50 s of
retries that ``transformers``/``huggingface_hub`` spend on an unreachable host, and
they raise an error whose text comes from :func:`offline_error_hint`.

The Hub counts as offline when ``HF_HUB_OFFLINE`` (or ``TRANSFORMERS_OFFLINE``) is
truthy, or when a TCP connection to the host of ``huggingface_hub.constants.ENDPOINT``
cannot be opened within :data:`PROBE_TIMEOUT_S` seconds. The environment variables
are re-read on every call; the network probe runs once per process
(``hub_reachable.cache_clear()`` forgets its answer).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import socket
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar
from urllib.parse import urlsplit

from cory_env.errors import CoryError

__all__ = [
    "PROBE_TIMEOUT_S",
    "DatasetUnavailableError",
    "forced_offline",
    "hub_else_embedded",
    "hub_offline",
    "hub_reachable",
    "offline_error_hint",
    "offline_reason",
]

T = TypeVar("T")

PROBE_TIMEOUT_S: float = 3.0
"""Seconds the network probe waits for a TCP connection to the Hub."""

_TRUE = {"1", "ON", "YES", "TRUE"}


class DatasetUnavailableError(CoryError, RuntimeError):
    """A data set cannot be loaded here (for example: offline and not cached)."""


def hub_else_embedded(
    hub: Callable[[], Iterable[T]],
    embedded: Callable[[], Iterable[T]],
    *,
    hub_name: str,
    embedded_name: str,
    what: str,
    unit: str,
    split: str,
    logger: logging.Logger,
) -> list[T]:
    """The Hub data set when it can be loaded here, else the embedded one (``source="auto"`` of the
    task loaders); an info line on ``logger`` says which (counting the items as ``unit``), and why."""
    try:
        items = list(hub())
    except DatasetUnavailableError as exc:
        logger.info(
            "%s: using the embedded %s (%s split), because %s is unavailable: %s",
            what,
            embedded_name,
            split,
            hub_name,
            str(exc).split("\n")[0],
        )
        return list(embedded())
    logger.info("%s: using %s (%s split, %d %s)", what, hub_name, split, len(items), unit)
    return items


def _endpoint() -> str:
    from huggingface_hub import constants

    return constants.ENDPOINT


def _offline_by_setting() -> bool:
    """True if the user switched the Hub off (env var now, or the constant at import)."""
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        if os.environ.get(var, "").strip().upper() in _TRUE:
            return True
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE)


def _can_connect(host: str, port: int, timeout: float) -> bool:
    """Open and close a TCP connection; the whole attempt, DNS included, is bounded."""
    result: list[bool] = []

    def attempt() -> None:
        try:
            with socket.create_connection((host, port), timeout=timeout):
                result.append(True)
        except OSError:
            result.append(False)

    # getaddrinfo ignores socket timeouts, so run the attempt in a daemon thread.
    thread = threading.Thread(target=attempt, name="cory-env-hub-probe", daemon=True)
    thread.start()
    thread.join(timeout)
    return bool(result and result[0])


@functools.cache
def hub_reachable() -> bool:
    """Whether a TCP connection to the Hub endpoint opens (probed once per process).

    This ignores ``HF_HUB_OFFLINE``; use :func:`hub_offline` for the combined answer.
    """
    parts = urlsplit(_endpoint())
    host = parts.hostname
    if not host:
        return False
    try:
        port = parts.port or (80 if parts.scheme == "http" else 443)
    except ValueError:
        return False
    return _can_connect(host, port, PROBE_TIMEOUT_S)


def hub_offline() -> bool:
    """True if the Hub is switched off (``HF_HUB_OFFLINE``) or cannot be reached."""
    return _offline_by_setting() or not hub_reachable()


def offline_reason() -> str:
    """A short phrase saying why the Hub counts as offline."""
    if _offline_by_setting():
        return "the Hugging Face Hub is switched off (HF_HUB_OFFLINE is set)"
    return f"the Hugging Face Hub at {_endpoint()} is unreachable"


def offline_error_hint(kind: str, name: str, embedded: str | None = None) -> str:
    """The message for a Hub resource that is neither reachable nor cached locally.

    Args:
        kind: what was asked for, e.g. ``"model"`` or ``"dataset"``.
        name: the Hub name that could not be loaded.
        embedded: the offline default to suggest instead, if any.
    """
    repo_type = "" if kind == "model" else f" --repo-type {kind}"
    lines = [
        f"{kind.capitalize()} {name!r} is not available: {offline_reason()}, "
        f"and it is not in the local Hugging Face cache.",
    ]
    if embedded is not None:
        lines.append(f"Use the embedded default {embedded!r} instead; it needs no Hub access.")
    lines.append(
        "Or pre-download it on a machine with Hub access: "
        f"`hf download {name}{repo_type}` (older: `huggingface-cli download {name}{repo_type}`), "
        "then copy the Hugging Face cache (~/.cache/huggingface, or $HF_HOME) to this machine "
        "and set HF_HUB_OFFLINE=1 when using it."
    )
    return "\n".join(lines)


@contextlib.contextmanager
def forced_offline() -> Iterator[None]:
    """Make ``datasets`` / ``huggingface_hub`` cache-only for the duration of the block.

    ``hub_offline()`` may be True because the Hub is unreachable while ``HF_HUB_OFFLINE``
    is unset; then ``datasets`` would retry the network for tens of seconds. Their
    offline flags are read at import time, so they are set here directly.
    """
    import datasets.config
    import huggingface_hub.constants

    saved = (datasets.config.HF_HUB_OFFLINE, huggingface_hub.constants.HF_HUB_OFFLINE)
    datasets.config.HF_HUB_OFFLINE = True
    huggingface_hub.constants.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        datasets.config.HF_HUB_OFFLINE, huggingface_hub.constants.HF_HUB_OFFLINE = saved
