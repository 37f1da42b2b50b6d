"""One run per output folder: an operating-system lock on ``<out>/.run.lock`` for the run's life.

Two runs writing into one ``--out`` would interleave their metrics, samples and checkpoints,
and each would report the folder as its own. :class:`RunLock` takes an exclusive, non-blocking
lock (``flock`` on POSIX, ``msvcrt.locking`` on Windows) on the folder's lock file and holds it
until :meth:`~RunLock.release`; a second run, or a ``--resume`` of the folder, fails at once with
:class:`RunFolderInUseError`, which names the folder and the process that holds it.

The operating system releases the lock when the holding process ends, however it ends (an
exception, Ctrl-C, SIGKILL, a crash), so a killed run never leaves the folder locked. The lock
file records its holder (process id, host, start time, command) while the lock is held and is
emptied when the run releases it; a record found in a lock that is free is a run that ended
without releasing it (killed): the new run says so and takes the folder over.

The lock file is kept, not deleted: deleting it would let a third process lock a new file of
the same name while a second still holds the old one. (``filelock``, which transformers uses,
truncates the file on every attempt and so cannot tell a refused run who holds the folder.)
Locks on network file systems depend on the server: on NFS, hold runs' folders on local disk.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from cory_env.errors import CoryError, UsageError

if sys.platform == "win32":
    import msvcrt
else:
    import fcntl

#: The lock file's name inside the output folder.
LOCK_NAME = ".run.lock"
#: How long a refused run waits for the holder's record to appear, in seconds (see :func:`_wait_for_holder`).
RECORD_WAIT = 2.0

logger = logging.getLogger(__name__)


class RunFolderInUseError(CoryError):
    """Another live run holds the output folder (its lock): wait for it, stop it, or choose another --out."""


class RunExistsError(UsageError, FileExistsError):
    """The output folder holds an earlier run's checkpoint: --resume it, --overwrite it, or choose another --out."""


class RunLock:
    """The lock on one output folder; a context manager that holds it inside its block."""

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        self.path = self.folder / LOCK_NAME
        self._file: IO[str] | None = None

    @property
    def held(self) -> bool:
        return self._file is not None

    def acquire(self) -> RunLock:
        """Take the lock and record this process as its holder, or raise :class:`RunFolderInUseError`."""
        if self._file is not None:
            return self
        file = self._open_locked()
        stale = _read_holder(file)
        if stale:
            logger.warning(
                "%s: the run that held it (%s) ended without releasing it (it was killed); "
                "this run takes the folder over",
                self.folder,
                _describe(stale),
            )
        file.seek(0)
        file.truncate()
        file.write(json.dumps(_this_process()))
        file.flush()
        self._file = file
        return self

    def check_free(self) -> None:
        """Raise :class:`RunFolderInUseError` if a live run holds the folder; hold nothing either way."""
        if self._file is None and self.path.exists():
            file = self._open_locked()
            _unlock(file)
            file.close()

    def release(self) -> None:
        """Empty the record and release the lock (the lock file stays)."""
        file, self._file = self._file, None
        if file is None:
            return
        try:
            file.seek(0)
            file.truncate()
            file.flush()
        finally:
            _unlock(file)
            file.close()

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.release()

    def _open_locked(self) -> IO[str]:
        self.folder.mkdir(parents=True, exist_ok=True)
        file = open(self.path, "a+", encoding="utf-8")  # appending mode never truncates the holder's record
        try:
            _lock(file)
        except OSError:
            holder = _wait_for_holder(file)
            file.close()
            who = _describe(holder) if holder else "a process that has not yet written its record"
            stop = f" (kill {holder['pid']} stops it, keeping its last checkpoint)" if holder.get("pid") else ""
            raise RunFolderInUseError(
                f"{self.folder} is in use by another run: {who}. One run writes to an output folder at a time: "
                f"wait for that run to end or stop it{stop}, then --resume it; or choose another --out"
            ) from None
        return file


def _lock(file: IO[str]) -> None:
    if sys.platform == "win32":
        file.seek(0)
        msvcrt.locking(file.fileno(), msvcrt.LK_NBLCK, 1)
    else:
        fcntl.flock(file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)


def _unlock(file: IO[str]) -> None:
    if sys.platform == "win32":
        file.seek(0)
        msvcrt.locking(file.fileno(), msvcrt.LK_UNLCK, 1)
    else:
        fcntl.flock(file.fileno(), fcntl.LOCK_UN)


def _this_process() -> dict[str, Any]:
    return {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S %z"),
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]) if sys.argv and sys.argv[0] else "",
    }


def _wait_for_holder(file: IO[str]) -> dict[str, Any]:
    """The record of the lock's holder, waiting up to :data:`RECORD_WAIT` seconds for it to be written.

    A run writes its record just after it takes the lock, so a run refused in between (two runs
    started together) would otherwise find the file empty and could not say who holds the folder.
    """
    deadline = time.monotonic() + RECORD_WAIT
    while not (holder := _read_holder(file)) and time.monotonic() < deadline:
        time.sleep(0.01)
    return holder


def _read_holder(file: IO[str]) -> dict[str, Any]:
    file.seek(0)
    try:
        holder = json.loads(file.read() or "{}")
    except ValueError:
        return {}
    return holder if isinstance(holder, dict) else {}


def _describe(holder: dict[str, Any]) -> str:
    text = f"process {holder.get('pid', '?')} on {holder.get('host', '?')}, started {holder.get('started', '?')}"
    return f"{text} ({holder['command']})" if holder.get("command") else text
