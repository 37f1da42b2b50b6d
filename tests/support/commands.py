"""The commands as a user runs them, in the test's process: a tiny cory-train command line, and the one
error a command ends with (the fixture ``run`` in tests/conftest.py runs a command's ``main``)."""

from __future__ import annotations

from pathlib import Path


def toy_args(model: Path, out: Path, *extra: str) -> list[str]:
    """A cory-train command line that trains one tiny iteration in a second or two."""
    return [
        "--model",
        str(model),
        "--out",
        str(out),
        "--reward",
        "tests.support.toy:fraction_good",
        "--prompt-source",
        "rotten_tomatoes",
        "--iterations",
        "1",
        "--batch-size",
        "2",
        "--mini-batch-size",
        "2",
        "--ppo-epochs",
        "1",
        "--min-new-tokens",
        "2",
        "--max-new-tokens",
        "3",
        "--context-length",
        "48",
        "--report-to",
        "none",
        "--save-model",
        "false",
        *extra,
    ]


def the_error(stderr: str, prog: str) -> str:
    """The message of the one error that ends ``stderr`` (after the run's log lines), checked: no traceback, and
    the error starts a line of its own (not the end of a progress bar's)."""
    assert "Traceback" not in stderr, stderr[-3000:]
    head = f"{prog}: error: "
    assert stderr.count(head) == 1, stderr[-3000:]
    start = stderr.index(head)
    assert start == 0 or stderr[start - 1] == "\n", stderr[-3000:]
    return stderr[start + len(head) :].rstrip("\n")
