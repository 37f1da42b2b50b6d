"""What a write that fails tells the user, and what it leaves behind: nothing of its own.

cory-env writes each file whole or not at all: under a temporary name beside its place, renamed into
place once complete (checkpoints, exported models, metrics rewritten on a resume, plots, reports). Two
ways such a write fails are the machine's, not the program's, and neither ends in a traceback:

- **No room.** A full disk (``ENOSPC``), a disk quota (``EDQUOT``) or the process's file-size limit
  (``EFBIG``, ``ulimit -f``; safetensors says "File too large"). Inside :func:`writing`, such a failure
  raises :class:`OutOfSpaceError`: one line that names the file, the bytes being written, and the space
  free there (or the limit), which the commands print as they print any error of cory-env's own::

      cory-export: error: could not write runs/cory/model/llm_0: No space left on device (12 MiB free
      there, 514 MiB to write); nothing was half-written: make room, then run the command again

  :func:`write_whole` removes its temporary file when the write fails, so nothing is half-written and
  the file it was to replace is as it was.
- **A killed process.** SIGKILL or a power loss before the rename leaves the temporary file or folder.
  Its name has the shape ``tempfile`` gives it, the writer's prefix, 8 characters of ``[a-z0-9_]`` and
  its suffix (:func:`temporary_name`), and the next write to the same place removes it
  (:func:`remove_leftovers`), saying so in one logged line. A file of the user's whose name only looks
  alike (``.tmp-notes.txt``) is left alone.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

from safetensors import SafetensorError

from cory_env.errors import CoryError

try:
    import fcntl
    import resource
except ImportError:  # Windows: no file-size limit to read, no flock
    fcntl = resource = None

logger = logging.getLogger(__name__)

#: The errors of a write that found no room: a full disk, a disk quota, the file-size limit.
NO_ROOM = frozenset({errno.ENOSPC, errno.EFBIG, getattr(errno, "EDQUOT", errno.ENOSPC)})
#: The random part of a name ``tempfile.mkstemp`` or ``mkdtemp`` gives: 8 characters of [a-z0-9_].
RANDOM_PART = "[a-z0-9_]{8}"
_OS_ERROR = re.compile(r"os error (\d+)")  # how safetensors (Rust) quotes the operating system's error


class OutOfSpaceError(CoryError, OSError):
    """A file could not be written for want of room (a full disk, a quota, the file-size limit). The message
    names the file and the room needed; nothing was half-written, and what was there before is intact."""


def failed_errno(exc: BaseException) -> int | None:
    """The operating system's error number of a failed write: an ``OSError``'s, or the one safetensors quotes."""
    if isinstance(exc, OSError) and not isinstance(exc, CoryError):
        return exc.errno
    if isinstance(exc, SafetensorError):
        found = _OS_ERROR.search(str(exc))
        if found:
            return int(found.group(1))
        words = {"No space left": errno.ENOSPC, "File too large": errno.EFBIG}
        return next((number for text, number in words.items() if text in str(exc)), None)
    return None


def is_out_of_space(exc: BaseException) -> bool:
    """Whether ``exc`` is a write that found no room (:data:`NO_ROOM`)."""
    return failed_errno(exc) in NO_ROOM


def why_not_written(exc: BaseException, path: str | os.PathLike[str], size: int | None = None) -> str:
    """Why writing ``path`` (``size`` bytes, where known) failed, in words. For want of room, with the room:
    ``No space left on device (12 MiB free there, 514 MiB to write)``, ``File too large (the file-size limit,
    ulimit -f, is 64 KiB; 514 MiB to write)``; otherwise the cause alone (``Permission denied``)."""
    number = failed_errno(exc)
    cause = os.strerror(number) if number is not None else str(exc) or type(exc).__name__
    if number not in NO_ROOM:
        return cause
    to_write = [f"{amount(size)} to write"] if size else []
    limit = _file_size_limit()
    if number == errno.EFBIG and limit is not None:
        return f"{cause} ({'; '.join([f'the file-size limit, ulimit -f, is {amount(limit)}', *to_write])})"
    try:
        free = [f"{amount(shutil.disk_usage(_existing(Path(path))).free)} free there"]
    except OSError:
        free = []
    room = ", ".join([*free, *to_write])
    return f"{cause} ({room})" if room else cause


def could_not_write(path: str | os.PathLike[str], exc: BaseException, size: int | None = None) -> str:
    """``could not write <path>: <why>`` (:func:`why_not_written`); for want of room, with what to do."""
    message = f"could not write {path}: {why_not_written(exc, path, size)}"
    if not is_out_of_space(exc):
        return message
    return f"{message}; nothing was half-written: {room_to_make(exc)}, then run the command again"


def room_to_make(exc: BaseException) -> str:
    """What to do about a write that found no room: ``"raise the limit"`` (the file-size limit's) or ``"make room"``."""
    return "raise the limit" if failed_errno(exc) == errno.EFBIG else "make room"


@contextlib.contextmanager
def writing(path: str | os.PathLike[str], size: int | None = None) -> Iterator[None]:
    """Inside the block, which writes ``path`` (``size`` bytes, where known), a failure for want of room
    raises :class:`OutOfSpaceError` naming both; any other error goes on as it was.

    >>> with writing("runs/cory/kl.png", len(png)):  # doctest: +SKIP
    ...     write_whole("runs/cory/kl.png", png)
    """
    try:
        yield
    except (OSError, SafetensorError) as exc:
        if not is_out_of_space(exc):
            raise
        raise OutOfSpaceError(could_not_write(path, exc, size)) from exc


def write_whole(path: str | os.PathLike[str], data: bytes | str) -> Path:
    """Write ``data`` (text as UTF-8) to ``path`` whole or not at all: to ``<path>.tmp`` beside it, renamed into
    place; if the write fails, the temporary file is removed and ``path`` is as it was. Errors go on as they are
    (:func:`writing` turns one for want of room into an :class:`OutOfSpaceError`)."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise
    return path


def amount(size: float) -> str:
    """A number of bytes as people read it: ``900 bytes``, ``64 KiB``, ``514 MiB``, ``1.5 GiB``."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if size >= scale:
            value = size / scale
            return f"{value:.1f} {unit}" if value < 10 and value != int(value) else f"{value:.0f} {unit}"
    return f"{size:.0f} bytes"


def _file_size_limit() -> int | None:
    """This process's file-size limit in bytes (``ulimit -f``), or ``None`` where there is none."""
    if resource is None:
        return None
    limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    return None if limit == resource.RLIM_INFINITY else limit


def _existing(path: Path) -> Path:
    """``path``, or the nearest folder above it that exists (where its space is counted)."""
    return next((p for p in (path, *path.parents) if p.exists()), Path.cwd())


# ------------------------------------------------------------------ what a killed write leaves


def temporary_name(prefix: str, suffix: str = "") -> re.Pattern[str]:
    """The exact names ``tempfile.mkstemp(prefix=prefix, suffix=suffix)`` (or ``mkdtemp``) gives."""
    return re.compile(f"^{re.escape(prefix)}{RANDOM_PART}{re.escape(suffix)}$")


def remove_leftovers(
    folder: str | os.PathLike[str],
    name: re.Pattern[str],
    writer: str,
    *,
    in_use: Callable[[Path], bool] = lambda path: False,
) -> list[Path]:
    """Remove the temporary files and folders in ``folder`` whose names ``name`` matches exactly (what a
    ``writer``, e.g. ``"an export"``, killed before its rename left), except those ``in_use`` by a live writer;
    say so in one logged line. Call it where no other writer of the kind can be at work, or give ``in_use``."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    found = sorted(p for p in folder.iterdir() if name.match(p.name) and not p.is_symlink() and not in_use(p))
    for path in found:
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    if found:
        logger.warning("removed what %s that was killed left: %s", writer, ", ".join(map(str, found)))
    return found


@contextlib.contextmanager
def held(folder: str | os.PathLike[str]) -> Iterator[None]:
    """Hold ``folder`` (a temporary folder being written) for the block: :func:`is_held` says so to another
    process. The operating system lets go when the process ends, however it ends. (Where there is no
    ``flock``, on Windows, nothing is held, and :func:`is_held` takes every folder for one in use.)"""
    if fcntl is None:
        yield
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        with contextlib.suppress(OSError):  # a file system without flock: the folder is not held
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def is_held(folder: Path) -> bool:
    """Whether a live process holds ``folder`` (:func:`held`); ``True`` where that cannot be told."""
    if fcntl is None or not folder.is_dir():
        return fcntl is None
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)  # closing lets go of the lock just taken
    return False


__all__ = [
    "NO_ROOM",
    "OutOfSpaceError",
    "amount",
    "could_not_write",
    "failed_errno",
    "held",
    "is_held",
    "is_out_of_space",
    "remove_leftovers",
    "room_to_make",
    "temporary_name",
    "why_not_written",
    "write_whole",
    "writing",
]
