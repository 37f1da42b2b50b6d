"""Stopping a run without losing its work: Ctrl-C or SIGTERM finish the iteration, then checkpoint.

Inside :class:`StopRequests` the first SIGINT (Ctrl-C) or SIGTERM (what a job scheduler sends
before it preempts or ends a job) only records the request: the trainer finishes the iteration
it is in, writes a checkpoint whatever ``--checkpoint-every`` says, and stops, so that
``--resume`` continues from exactly there. The handlers that were there before come back with
the first signal, so a second Ctrl-C stops at once (``KeyboardInterrupt``), losing only the
iterations since the last checkpoint, as a SIGKILL does.

Handlers can only be installed from the main thread; elsewhere (a trainer run in a thread)
signals keep their usual effect.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from types import FrameType, TracebackType

#: The signals that ask a run to stop after its iteration.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopRequests:
    """A context manager; ``signal`` is the name of the first stop signal received inside it, or ``""``."""

    def __init__(self, on_request: Callable[[str], None] | None = None) -> None:
        self.signal = ""
        self._on_request = on_request
        self._previous: dict[int, object] = {}

    def __enter__(self) -> StopRequests:
        if threading.current_thread() is threading.main_thread():
            self._previous = {s: signal.signal(s, self._request) for s in STOP_SIGNALS}
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self._restore()

    def _request(self, signum: int, frame: FrameType | None) -> None:
        self.signal = signal.Signals(signum).name
        self._restore()  # a second signal acts at once
        if self._on_request is not None:
            self._on_request(self.signal)

    def _restore(self) -> None:
        for s, handler in self._previous.items():
            signal.signal(s, handler)
        self._previous = {}
