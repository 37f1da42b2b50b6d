"""What cory-env may delete, rename or overwrite: only what it wrote itself.

The commands write into folders a user names (``--out``), and those folders may hold the user's own
files. Before a command removes or replaces a path, it checks that it recognises the path as its own;
otherwise it refuses with :class:`NotOursError`, which names the path and what to do, before it has
written anything. What each writer recognises:

================================  ==============================================================
what                              recognised as cory-env's by
================================  ==============================================================
an exported model folder          its manifest, ``cory-export.json`` (:data:`MANIFEST`), lists
(``<out>/model/<learner>``,       every file the export wrote; a folder with a file the manifest
``cory-export --out D``:          does not list (or with no manifest) is not replaced, except an
``D/<learner>``)                  export of cory-env 0.2: only files that ``save_pretrained`` names.
a run folder (``cory-train        its ``config.json`` holds a run's settings, or it holds a checkpoint
                                  (:func:`is_run_folder`);
--out``)                          a run then replaces only the files it writes by name
                                  (:data:`RUN_FILES`); in any other folder those names must be free.
checkpoints                       their names, ``checkpoints/iter_NNNNNN.safetensors`` (``.pt``,
                                  ``.damaged``, the ``.tmp-XXXXXXXX.safetensors`` of a write that died);
                                  ``--overwrite`` deletes those and leaves anything else.
what a killed write left          the exact name its temporary file or folder had (the prefix, the 8
(:mod:`cory_env.write_failures`)  random characters of ``tempfile``, the suffix): a run removes its
                                  ``checkpoints/.tmp-XXXXXXXX.safetensors`` when it starts (it holds
                                  the folder's lock), an export the ``.cory-export-XXXXXXXX`` that no
                                  live export holds; a user's ``.tmp-notes.txt`` stays.
a benchmark's runs (``cory-bench  each run folder as above, and no live run holds it (its lock);
--overwrite``)                    the benchmark's own files when ``benchmark.json`` is there.
================================  ==============================================================

Everything else a command writes is new (a fresh temporary folder of its own, a file it creates) or
a file the user named as the output (``cory-eval --out FILE``). docs/architecture.md lists every
place the package deletes, renames or overwrites a path.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

from cory_agents.training.checkpoint import TEMPORARY
from cory_agents.training.metrics import METRICS_FILE, SAMPLES_FILE
from cory_agents.training.plots import RUN_PLOTS
from cory_agents.training.provenance import PROVENANCE_FILE
from cory_env.errors import UsageError
from cory_env.models import PRETRAINED_FILE

#: The manifest an export writes into each learner's folder: the files it wrote there.
MANIFEST = "cory-export.json"
#: The files a run writes into its --out by these names.
RUN_FILES = (
    "config.json",
    METRICS_FILE,
    SAMPLES_FILE,
    PROVENANCE_FILE,
    *(filename for _, filename in RUN_PLOTS.values()),
)
#: A run's settings that every config.json a run writes holds (how a run folder is recognised).
RUN_KEYS = ("algo", "learner", "iterations", "kl_coef", "checkpoint_every")
#: Checkpoint files, and the leftovers of their writes (cory_agents.training.checkpoint).
CHECKPOINT_FILE = re.compile(rf"^iter_\d{{6}}\.(safetensors|pt)(\.damaged)?$|{TEMPORARY.pattern}")


class NotOursError(UsageError):
    """A command would delete, rename or overwrite a path that cory-env did not write: it refuses."""


def refuse(path: Path, why: str, fix: str) -> NotOursError:
    return NotOursError(f"{path} {why}, so cory-env leaves it alone: {fix}")


def write_manifest(folder: Path) -> None:
    """Record every file under ``folder`` (as written so far) in ``folder/MANIFEST``."""
    files = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if not p.is_dir())
    (folder / MANIFEST).write_text(json.dumps({"written_by": "cory-env", "files": files}, indent=1) + "\n")


def check_replaceable(folder: Path, fix: str) -> None:
    """Refuse unless ``folder`` is free or an export folder whose every file its manifest lists."""
    if not folder.exists() and not folder.is_symlink():
        return
    if folder.is_symlink() or not folder.is_dir():
        raise refuse(folder, "is not a folder cory-env exported", fix)
    try:
        listed = set(json.loads((folder / MANIFEST).read_text())["files"]) | {MANIFEST}
    except (OSError, ValueError, KeyError, TypeError):
        if _is_legacy_export(folder):
            return
        raise refuse(folder, f"exists and has no {MANIFEST} (cory-env did not export it)", fix) from None
    for path in sorted(folder.rglob("*")):
        if not path.is_dir() and path.relative_to(folder).as_posix() not in listed:
            raise refuse(path, "was not written by cory-env's export", fix)


def _is_legacy_export(folder: Path) -> bool:
    """An export of cory-env 0.2, written before the manifest: files only, each of a name that a model's
    and a tokenizer's ``save_pretrained`` write (a folder holding anything else is not taken for one)."""
    entries = list(folder.iterdir())
    return bool(entries) and all(p.is_file() and not p.is_symlink() and PRETRAINED_FILE.match(p.name) for p in entries)


def is_run_folder(out: Path) -> bool:
    """Whether a run of cory-env wrote into ``out``: its ``config.json`` holds a run's settings, or
    its ``checkpoints/`` a checkpoint (a run stopped before it wrote config.json, or of cory-env 0.1)."""
    try:
        config = json.loads((out / "config.json").read_text())
    except (OSError, ValueError):
        config = None
    if isinstance(config, dict) and all(key in config for key in RUN_KEYS):
        return True
    checkpoints = out / "checkpoints"
    return checkpoints.is_dir() and any(CHECKPOINT_FILE.match(p.name) and p.is_file() for p in checkpoints.iterdir())


def check_out_folder(out: Path, flag: str = "--out") -> None:
    """Refuse an output folder that is a file or lies below one (a usage error naming ``flag``)."""
    fix = f"choose another {flag} (a new or empty folder), or move that file away"
    if out.exists() and not out.is_dir():
        raise NotOursError(f"{flag} {out} is a file, not a folder: {fix}")
    for parent in out.parents:
        if parent.exists():
            if not parent.is_dir():
                raise NotOursError(f"{flag} {out} is below {parent}, which is a file, not a folder: {fix}")
            break


def check_run_folder(out: Path, learners: list[str] = ()) -> None:
    """Before a run writes into ``out``: refuse where it would overwrite a file of someone else's.

    ``out`` may be new, a folder of a run (it is taken over), or any other folder in which none of
    the names a run writes (:data:`RUN_FILES`, ``checkpoints/``, ``model/<learner>``) is taken.
    """
    fix = "choose another --out (a new or empty folder), or move that file away"
    check_out_folder(out)
    if not out.exists():
        return
    if not is_run_folder(out):
        for name in RUN_FILES:
            if (out / name).exists():
                raise refuse(out / name, "exists and the folder holds no cory-env run", fix)
    model = out / "model"
    if model.exists() and not model.is_dir():
        raise refuse(model, "is a file where the run writes its model folder", fix)
    for learner in learners:
        check_replaceable(model / learner, fix)


def remove_checkpoints(folder: Path) -> None:
    """Delete the checkpoint files in ``folder`` (and the folder, once empty); other files stay."""
    if not folder.is_dir():
        return
    for path in folder.iterdir():
        if path.is_file() and CHECKPOINT_FILE.match(path.name):
            path.unlink()
    remove_if_empty(folder)


def check_run_removable(out: Path) -> None:
    """Refuse to remove ``out`` (:func:`remove_run`) when a live run holds it, when it holds no run, or
    when its model folder holds a learner's folder that no export of cory-env wrote whole."""
    from cory_agents.training.run_lock import RunLock

    if not out.exists():
        return
    RunLock(out).check_free()  # a live run's folder: refused, naming its process
    if not is_run_folder(out):
        raise refuse(out, "holds no cory-env run (no run's config.json)", "move it, or choose another --out")
    model = out / "model"
    for learner in sorted(model.iterdir()) if model.is_dir() else []:
        check_replaceable(learner, "move it out of the run's folder first")


def remove_run(out: Path) -> None:
    """Delete what a run wrote into ``out`` (``cory-bench --overwrite``), and ``out`` once empty.

    Refuses, before deleting anything, where :func:`check_run_removable` does. Files of someone
    else's in ``out`` (or in its ``checkpoints/``) are left where they are.
    """
    from cory_agents.training.run_lock import LOCK_NAME

    check_run_removable(out)
    if not out.exists():
        return
    model = out / "model"
    for learner in sorted(model.iterdir()) if model.is_dir() else []:
        shutil.rmtree(learner)  # checked above: every file in it is the export's
    remove_if_empty(model)
    remove_checkpoints(out / "checkpoints")
    tensorboard = [p for p in out.glob("events.out.tfevents.*") if p.is_file()]
    for path in [*(out / name for name in (*RUN_FILES, "evaluation.json", LOCK_NAME)), *tensorboard]:
        path.unlink(missing_ok=True)
    remove_if_empty(out)


def remove_if_empty(folder: Path) -> None:
    if folder.is_dir() and not any(folder.iterdir()):
        folder.rmdir()
