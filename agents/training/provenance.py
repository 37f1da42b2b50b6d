"""Which code made a run: the package's version and git commit, each time the run starts or resumes.

A run's ``provenance.json`` is a list with one entry per session of training (the first start, then each
``--resume``)::

    [{"iteration": 0, "version": "0.3.0", "commit": "3c1fb10...", "dirty": false, "time": "2026-12-07T10:24:39Z"},
     {"iteration": 25, ...}]

``iteration`` the first iteration that session trained, ``commit`` the ``git`` commit of the package's
source when it is a git checkout (``null`` for an installed wheel), ``dirty`` whether tracked files
differed from it. A study that archives its runs keeps these files, so its page can say when runs
were made with different code (:func:`run_commits`).
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import cory_env
from cory_env.write_failures import write_whole, writing

PROVENANCE_FILE = "provenance.json"
_SOURCE = Path(__file__).resolve().parents[1]  # the folder of the package's source (a checkout's root's child)


def code_version() -> dict[str, Any]:
    """The package's version, and its source's git commit and whether tracked files differ (``None`` outside a
    checkout, or without git)."""
    commit, dirty = None, None
    try:
        _git("ls-files", "--error-unmatch", str(_SOURCE / "__init__.py"))  # tracked there: a checkout's source
        commit = _git("rev-parse", "HEAD")
        dirty = bool(_git("status", "--porcelain", "--untracked-files=no"))
    except (OSError, subprocess.SubprocessError):
        pass
    return {"version": cory_env.__version__, "commit": commit, "dirty": dirty}


def _git(*args: str) -> str:
    done = subprocess.run(["git", "-C", str(_SOURCE), *args], capture_output=True, text=True, timeout=10, check=True)
    return done.stdout.strip()


def record_session(out: Path, iteration: int) -> None:
    """Append this session's entry to ``out``'s provenance.json (written whole)."""
    path = Path(out) / PROVENANCE_FILE
    sessions = read_provenance(out)
    sessions.append(
        {"iteration": iteration, **code_version(), "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    )
    text = json.dumps(sessions, indent=2)
    with writing(path, len(text)):
        write_whole(path, text)


def read_provenance(out: Path) -> list[dict[str, Any]]:
    """The sessions recorded for the run in ``out`` (none for a run made before provenance was kept)."""
    try:
        sessions = json.loads((Path(out) / PROVENANCE_FILE).read_text())
    except (OSError, ValueError):
        return []
    return sessions if isinstance(sessions, list) else []


def run_commits(out: Path) -> list[str]:
    """The commits a run was trained with, in order, each once (``+dirty`` after one with local changes; the
    version where the source was no checkout; empty for a run made before provenance was kept)."""
    seen: list[str] = []
    for s in read_provenance(out):
        name = f"{s['commit'][:7]}{'+dirty' if s.get('dirty') else ''}" if s.get("commit") else f"v{s.get('version')}"
        if name not in seen:
            seen.append(name)
    return seen
