"""The commands as a user runs them: a tiny cory-train command line, and the one error a command ends with
(the fixture ``run`` in tests/conftest.py runs a command's ``main`` in the test's process); in a process of
their own, under a file-size limit (a write that finds no room), or killed in the middle of a write."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.support import ROOT

#: Runs ``argv[2:]`` (a program's path, then its arguments) with the file-size limit ``argv[1]`` bytes, as
#: ``ulimit -f`` would: a write past it fails with EFBIG ("File too large"), as one on a full disk fails with
#: ENOSPC. SIGXFSZ, which would kill the process instead, is ignored, as Python itself does.
_UNDER_LIMIT = (
    "import os, resource, signal, sys\n"
    "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
    "resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[1]), resource.getrlimit(resource.RLIMIT_FSIZE)[1]))\n"
    "os.execv(sys.argv[2], sys.argv[2:])\n"
)


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


def console_script(name: str) -> str:
    """The path of the command ``name`` (``cory-train``) installed beside this Python; the test is skipped without it."""
    path = Path(sys.executable).with_name(name)
    if not path.exists():
        pytest.skip(f"{name} is not installed beside {sys.executable} (pip install -e .)")
    return str(path)


def command_env() -> dict[str, str]:
    """A command's environment: offline, with the repository importable (``tests.support.toy``'s rewards)."""
    return {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}


def under_file_size_limit(limit: int, program: str, *args: str) -> subprocess.CompletedProcess:
    """Run ``program`` (a path: a console script, or ``sys.executable``) with ``args`` where no file it writes may
    grow past ``limit`` bytes: what a full disk does to a write, in a test (the limit says "File too large")."""
    if sys.platform == "win32":
        pytest.skip("the file-size limit (RLIMIT_FSIZE) is POSIX's")
    argv = [sys.executable, "-c", _UNDER_LIMIT, str(limit), program, *args]
    # No bytecode written: Python writes a module's .pyc with one unchecked write, which the limit would cut short.
    env = command_env() | {"PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def killed_midway(code: str, gate: Path, *args: str, timeout: float = 240) -> None:
    """Run the Python ``code`` in a process of its own (``sys.argv[1]`` the path ``gate``, then ``args``), and SIGKILL
    it once it has made the file ``gate``. ``code`` stops a write halfway (a patched writer that makes ``gate``,
    then sleeps), so what it leaves is what a process killed in the middle of that write leaves."""
    with tempfile.TemporaryFile("w+") as stderr:
        argv = [sys.executable, "-c", code, str(gate), *args]
        child = subprocess.Popen(argv, cwd=ROOT, env=command_env(), stdout=subprocess.DEVNULL, stderr=stderr)
        deadline = time.monotonic() + timeout
        while not gate.exists():
            if child.poll() is not None or time.monotonic() > deadline:
                child.kill()
                stderr.seek(0)
                raise AssertionError(f"the write did not begin: {stderr.read()[-3000:]}")
            time.sleep(0.05)
        child.kill()
        child.wait(timeout=60)
