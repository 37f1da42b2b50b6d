"""Stop requests: the first Ctrl-C/SIGTERM is recorded, a second acts at once, handlers come back."""

from __future__ import annotations

import os
import signal

import pytest

from cory_agents.training.interrupt import StopRequests


@pytest.fixture
def python_handlers():
    """Python's own handlers, whatever this process was started with (a job started in the background of
    a shell, or under nohup, ignores SIGINT, and a second Ctrl-C would then be ignored, not raised)."""
    started_with = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    yield
    for s, handler in started_with.items():
        signal.signal(s, handler)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_the_first_signal_is_recorded_and_a_second_acts_at_once(signum, python_handlers):
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    heard = []
    with StopRequests(heard.append) as stop:
        assert stop.signal == ""
        os.kill(os.getpid(), signum)
        assert stop.signal == signum.name and heard == [signum.name]
        assert {s: signal.getsignal(s) for s in before} == before  # the second one is not caught
        if signum == signal.SIGINT:
            with pytest.raises(KeyboardInterrupt):
                os.kill(os.getpid(), signal.SIGINT)
    assert {s: signal.getsignal(s) for s in before} == before


def test_without_a_signal_the_handlers_come_back_on_exit():
    before = signal.getsignal(signal.SIGTERM)
    with StopRequests() as stop:
        assert signal.getsignal(signal.SIGTERM) != before
    assert signal.getsignal(signal.SIGTERM) == before and stop.signal == ""
