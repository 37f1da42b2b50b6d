"""A user's own files, planted where a command writes, and what a folder holds, to show that a command
leaves the user's files as they were (cory_agents.training.ownership, cory_env.write_failures)."""

from __future__ import annotations

from pathlib import Path

#: What a user's planted file holds.
THESIS = "three years of work\n"


def plant(path: Path) -> Path:
    """A user's file at ``path`` (the folders above it made), holding :data:`THESIS`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(THESIS)
    return path


def tree(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder``, by its path there, with its bytes."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}
