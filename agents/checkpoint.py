"""Checkpoints that a crash cannot corrupt: written to a temporary file, then renamed.

A checkpoint is one ``torch.save`` file per completed iteration,
``<out>/checkpoints/iter_000012.pt``; the newest complete one is what ``--resume`` loads.
Older ones beyond ``keep`` are deleted only after a new one is completely in place.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import Any

import torch

_NAME = re.compile(r"^iter_(\d{6})\.pt$")


def checkpoint_dir(out_dir: str | Path) -> Path:
    return Path(out_dir) / "checkpoints"


def save_checkpoint(out_dir: str | Path, iteration: int, state: dict[str, Any], keep: int = 1) -> Path:
    """Atomically write ``state`` as the checkpoint after ``iteration``; keep the newest ``keep``."""
    folder = checkpoint_dir(out_dir)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"iter_{iteration:06d}.pt"
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".pt", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp's file is private (0600); a plain open's is not
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    for old in list_checkpoints(out_dir)[:-keep]:
        old.unlink(missing_ok=True)
    return path


def list_checkpoints(out_dir: str | Path) -> list[Path]:
    """Complete checkpoints, oldest first (temporary files are never listed)."""
    folder = checkpoint_dir(out_dir)
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if _NAME.match(p.name))


def latest_checkpoint(out_dir: str | Path) -> Path | None:
    found = list_checkpoints(out_dir)
    return found[-1] if found else None


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    return torch.load(path, map_location="cpu", weights_only=False)
