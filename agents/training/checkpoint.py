"""Checkpoints that are safe to load from anyone, that a crash cannot corrupt, and whose damage is found.

A checkpoint is one file per saved iteration, ``<out>/checkpoints/iter_000012.safetensors``:

- **Safe to load.** Its tensors are stored with `safetensors <https://huggingface.co/docs/safetensors>`_
  and everything else (iteration, settings, random-generator states, optimizer hyperparameters)
  as JSON in the file's metadata. Loading parses tensors and JSON only: it never unpickles, so a
  checkpoint from someone else cannot run code. Only plain data is written: tensors, numbers,
  strings, booleans, ``None``, lists, tuples, dicts, numpy arrays and scalars, torch dtypes; any
  other object is refused when the checkpoint is saved, not silently pickled.
- **Written whole or not at all.** It is written to a temporary file, flushed to disk, renamed,
  and the folder is flushed too, so a checkpoint whose save returned survives a power loss.
  Checkpoints beyond the newest ``keep`` are deleted only after the new one is in place.
- **Damage is found before any state is used.** A SHA-256 digest of the JSON and of every
  tensor's bytes is stored with them and checked on load: a truncated or altered file raises
  :class:`DamagedCheckpointError`, naming the file. :func:`load_latest` (what ``--resume`` uses)
  then falls back to the newest intact checkpoint, with a warning that names its iteration.
- **The old format.** Checkpoints of cory-env 0.1 (``iter_NNNNNN.pt``, written with
  ``torch.save``) are pickles: loading one can run any code it holds. They are refused with
  :class:`UntrustedCheckpointError` unless ``trust=True`` (``--trust-checkpoint``, for your own
  files); ``python -m cory_agents.training.checkpoint convert PATH`` rewrites one in the safe format.

From the command line::

    python -m cory_agents.training.checkpoint verify runs/cory               # the newest checkpoint of a run, or a file
    python -m cory_agents.training.checkpoint convert runs/cory/checkpoints/iter_000009.pt   # your own old checkpoint
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from cory_env.errors import CoryError
from cory_env.write_failures import room_to_make, temporary_name, why_not_written

logger = logging.getLogger(__name__)

FORMAT = "cory-env-checkpoint"
VERSION = "2"
SUFFIX = ".safetensors"
LEGACY_SUFFIX = ".pt"
_NAME = re.compile(r"^iter_(\d{6})(\.safetensors|\.pt)$")
#: A checkpoint is written as ``checkpoints/.tmp-XXXXXXXX.safetensors`` first, then renamed; what a write
#: killed before its rename leaves has exactly this name (a run removes it when it starts: its trainer).
TEMPORARY_PREFIX = ".tmp-"
TEMPORARY = temporary_name(TEMPORARY_PREFIX, SUFFIX)


class CheckpointError(CoryError, ValueError):
    """A checkpoint that cannot be written or loaded; the message names the file and the fix."""


class DamagedCheckpointError(CheckpointError):
    """A checkpoint file that is truncated, altered or not a checkpoint at all."""


class UntrustedCheckpointError(CheckpointError):
    """A checkpoint in the old pickle format, which is loaded only when its source is trusted."""


class CheckpointSaveError(CheckpointError, OSError):
    """A checkpoint that could not be written (a full disk, a file-size limit, no permission); the previous one is intact."""


def checkpoint_dir(out_dir: str | Path) -> Path:
    return Path(out_dir) / "checkpoints"


def checkpoint_iteration(path: str | Path) -> int:
    """The iteration a checkpoint file was saved after (``iter_000012.safetensors`` -> 12)."""
    match = _NAME.match(Path(path).name)
    if match is None:
        raise ValueError(f"{path} is not named like a checkpoint (iter_NNNNNN{SUFFIX})")
    return int(match.group(1))


def list_checkpoints(out_dir: str | Path) -> list[Path]:
    """Complete checkpoints, oldest first; of an iteration saved in both formats, the safe one last
    (temporary files and files set aside as damaged are never listed)."""
    folder = checkpoint_dir(out_dir)
    if not folder.is_dir():
        return []
    found = [p for p in folder.iterdir() if _NAME.match(p.name)]
    return sorted(found, key=lambda p: (checkpoint_iteration(p), p.suffix == SUFFIX))


def latest_checkpoint(out_dir: str | Path) -> Path | None:
    found = list_checkpoints(out_dir)
    return found[-1] if found else None


# ------------------------------------------------------------------ saving


def save_checkpoint(out_dir: str | Path, iteration: int, state: dict[str, Any], keep: int = 1) -> Path:
    """Atomically and durably write ``state`` as the checkpoint after ``iteration``; keep the newest ``keep``."""
    if keep < 1:
        raise ValueError(f"keep must be at least 1 checkpoint, got {keep}")
    tensors: dict[str, torch.Tensor] = {}
    tree = json.dumps(_encode(state, "", tensors, {}, set()))
    metadata = {"format": FORMAT, "version": VERSION, "state": tree, "sha256": _digest(tree, tensors)}
    folder = checkpoint_dir(out_dir)
    path, tmp = folder / f"iter_{iteration:06d}{SUFFIX}", ""
    try:
        folder.mkdir(parents=True, exist_ok=True)  # a failure here too (a file in the way, no space) says what to do
        fd, tmp = tempfile.mkstemp(prefix=TEMPORARY_PREFIX, suffix=SUFFIX, dir=folder)
        os.close(fd)
        save_file(tensors, tmp, metadata=metadata)
        with open(tmp, "rb") as f:  # the data on disk before the rename makes it visible
            os.fsync(f.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp's file is private (0600); a plain open's is not
        os.replace(tmp, path)
        _fsync_folder(folder)  # the rename itself survives a power loss
    except BaseException as exc:
        if tmp and os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(exc, (OSError, SafetensorError)):
            size = sum(t.numel() * t.element_size() for t in tensors.values()) + len(tree)
            raise CheckpointSaveError(_save_failure(out_dir, path, exc, size=size)) from exc
        raise
    for old in list_checkpoints(out_dir)[:-keep]:
        old.unlink(missing_ok=True)
    _fsync_folder(folder)
    return path


def _save_failure(
    out_dir: str | Path, path: Path, exc: BaseException, what: str = "the checkpoint ", size: int | None = None
) -> str:
    """What a failed write into a run's folder tells: the file, the cause (for want of room, the room:
    :func:`~cory_env.write_failures.why_not_written`), the checkpoint that is intact, and how to go on (a
    checkpoint's, and the metrics' and samples' in :mod:`.metrics`)."""
    previous = latest_checkpoint(out_dir)
    if previous is None:
        kept = "No earlier checkpoint exists: a rerun starts at iteration 0."
    else:
        kept = (
            f"The previous checkpoint, {previous} ({checkpoint_iteration(previous) + 1} iterations done), is "
            f"intact: {room_to_make(exc)}, then rerun the same command with --resume (--out {out_dir}) to continue "
            f"from it."
        )
    return f"could not write {what}{path}: {why_not_written(exc, path, size)}. {kept}"


def write_failure(out_dir: str | Path, path: Path, exc: OSError, size: int | None = None) -> str:
    """:func:`_save_failure`'s message for a file of the run other than a checkpoint (metrics, samples, plots)."""
    return _save_failure(out_dir, path, exc, what="", size=size)


def _fsync_folder(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _encode(obj: Any, path: str, tensors: dict[str, torch.Tensor], seen: dict[tuple, str], storages: set) -> Any:
    """``obj`` as JSON, its tensors moved into ``tensors`` under their path in the state.

    Tags (dicts with one ``__name__`` key) mark what JSON has no type for; a dict whose keys are
    not all plain strings is written as ``{"__dict__": [[key, value], ...]}``. A tensor met twice
    (tied weights) is stored once; tensors that share memory otherwise are copied apart.
    """
    if isinstance(obj, torch.Tensor):
        t = obj.detach()
        same = (
            t.untyped_storage().data_ptr(),
            t.storage_offset(),
            tuple(t.shape),
            tuple(t.stride()),
            t.dtype,
            str(t.device),
        )
        if same in seen:
            return {"__tensor__": seen[same]}
        t = t.cpu().contiguous()
        if t.untyped_storage().data_ptr() in storages and t.numel():
            t = t.clone()  # a view of memory another entry holds: safetensors stores each tensor apart
        storages.add(t.untyped_storage().data_ptr())
        key = _unique(path or "tensor", tensors)
        tensors[key] = t
        seen[same] = key
        return {"__tensor__": key}
    if isinstance(obj, np.ndarray):
        if obj.dtype == object:
            raise CheckpointError(f"cannot write the object array at {path or 'the top'} into a checkpoint")
        return {"__ndarray__": _encode(torch.from_numpy(np.ascontiguousarray(obj)), path, tensors, seen, storages)}
    if isinstance(obj, np.generic):
        return {"__numpy__": obj.dtype.str, "value": obj.item()}
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if isinstance(obj, torch.dtype):
        return {"__dtype__": str(obj).removeprefix("torch.")}
    if isinstance(obj, tuple):
        return {"__tuple__": [_encode(v, f"{path}/{i}", tensors, seen, storages) for i, v in enumerate(obj)]}
    if isinstance(obj, list):
        return [_encode(v, f"{path}/{i}", tensors, seen, storages) for i, v in enumerate(obj)]
    if isinstance(obj, dict):
        if all(isinstance(k, str) and not k.startswith("__") for k in obj):
            return {k: _encode(v, f"{path}/{k}", tensors, seen, storages) for k, v in obj.items()}
        return {
            "__dict__": [
                [_encode(k, f"{path}/key", tensors, seen, storages), _encode(v, f"{path}/{k}", tensors, seen, storages)]
                for k, v in obj.items()
            ]
        }
    raise CheckpointError(
        f"cannot write {type(obj).__module__}.{type(obj).__qualname__} at {path or 'the top'} into a checkpoint: "
        f"a checkpoint holds tensors and plain data (numbers, strings, lists, tuples, dicts, numpy arrays), "
        f"so that loading it never runs code; return such data from state_dict()"
    )


def _unique(key: str, taken: dict[str, Any]) -> str:
    key = key.lstrip("/")
    if key not in taken:
        return key
    n = 1
    while f"{key}#{n}" in taken:
        n += 1
    return f"{key}#{n}"


def _digest(tree: str, tensors: dict[str, torch.Tensor]) -> str:
    """SHA-256 of the JSON and of each tensor's name, dtype, shape and bytes."""
    h = hashlib.sha256(tree.encode())
    for key in sorted(tensors):
        t = tensors[key]
        h.update(f"\0{key}\0{t.dtype}\0{tuple(t.shape)}\0".encode())
        if t.numel():
            h.update(t.contiguous().reshape(-1).view(torch.uint8).numpy())
    return h.hexdigest()


# ------------------------------------------------------------------ loading


def load_checkpoint(path: str | Path, trust: bool = False) -> dict[str, Any]:
    """The state a checkpoint holds, after checking that the file is intact.

    Raises:
        DamagedCheckpointError: the file is truncated, altered, or not a checkpoint.
        UntrustedCheckpointError: an old ``.pt`` checkpoint (a pickle), unless ``trust``.
    """
    path = Path(path)
    if path.suffix == LEGACY_SUFFIX:
        return _load_legacy(path, trust)
    try:
        with safe_open(str(path), framework="pt") as f:
            metadata = f.metadata() or {}
            if metadata.get("format") != FORMAT:
                raise DamagedCheckpointError(
                    f"{path} is a safetensors file but not a cory-env checkpoint (no {FORMAT!r} metadata): "
                    f"give a checkpoint written by training, checkpoints/iter_NNNNNN{SUFFIX}"
                )
            tensors = {key: f.get_tensor(key) for key in f.keys()}
    except SafetensorError as e:
        raise DamagedCheckpointError(
            f"checkpoint {path} is damaged (truncated or altered: {e}); it cannot be loaded. Resume from an "
            f"older checkpoint (--resume does so by itself when one is left), or restore the file from a copy"
        ) from None
    if metadata.get("version") != VERSION:
        raise CheckpointError(
            f"{path} is a version {metadata.get('version')} checkpoint; this cory-env reads version {VERSION}: "
            f"load it with the cory-env release that wrote it"
        )
    tree = metadata.get("state", "")
    if _digest(tree, tensors) != metadata.get("sha256"):
        raise DamagedCheckpointError(
            f"checkpoint {path} is damaged: its contents do not match the SHA-256 digest saved with them "
            f"(a changed byte, or a file cut and padded). Resume from an older checkpoint (--resume does "
            f"so by itself when one is left), or restore the file from a copy"
        )
    return _decode(json.loads(tree), tensors)


def _decode(node: Any, tensors: dict[str, torch.Tensor]) -> Any:
    if isinstance(node, list):
        return [_decode(v, tensors) for v in node]
    if not isinstance(node, dict):
        return node
    if len(node) == 1 and "__tensor__" in node:
        return tensors[node["__tensor__"]]
    if len(node) == 1 and "__ndarray__" in node:
        return _decode(node["__ndarray__"], tensors).numpy()
    if "__numpy__" in node:
        return np.dtype(node["__numpy__"]).type(node["value"])
    if len(node) == 1 and "__dtype__" in node:
        return getattr(torch, node["__dtype__"])
    if len(node) == 1 and "__tuple__" in node:
        return tuple(_decode(v, tensors) for v in node["__tuple__"])
    if len(node) == 1 and "__dict__" in node:
        return {_freeze(_decode(k, tensors)): _decode(v, tensors) for k, v in node["__dict__"]}
    return {k: _decode(v, tensors) for k, v in node.items()}


def _freeze(key: Any) -> Any:
    return tuple(_freeze(k) for k in key) if isinstance(key, (list, tuple)) else key


def _load_legacy(path: Path, trust: bool) -> dict[str, Any]:
    if not trust:
        raise UntrustedCheckpointError(
            f"{path} is a checkpoint in the old pickle format (cory-env 0.1, torch.save): loading it can run "
            f"any code the file holds, so it is not loaded. If you wrote it yourself, pass --trust-checkpoint, "
            f"or convert it once to the safe format: python -m cory_agents.training.checkpoint convert {path}"
        )
    try:
        return torch.load(path, map_location="cpu", weights_only=False)
    except (RuntimeError, EOFError, OSError) as e:  # torch's zip reader on a cut or altered file
        raise DamagedCheckpointError(f"checkpoint {path} is damaged (truncated or altered: {e})") from None


def load_latest(out_dir: str | Path, trust: bool = False) -> tuple[Path, dict[str, Any]] | None:
    """The newest intact checkpoint of a run and its state; ``None`` if the run has none.

    A damaged newer checkpoint is renamed ``<name>.damaged`` (kept for inspection, never listed
    again) and the next older one is tried, with a warning naming the iteration resumed from.

    Raises:
        DamagedCheckpointError: every checkpoint of the run is damaged.
        UntrustedCheckpointError: the newest is an old pickle checkpoint and not ``trust``.
    """
    found = list_checkpoints(out_dir)
    damaged: list[str] = []
    for path in reversed(found):
        try:
            state = load_checkpoint(path, trust=trust)
        except FileNotFoundError:  # set aside meanwhile by another process of the run
            continue
        except DamagedCheckpointError as e:
            logger.warning("%s", e)
            damaged.append(path.name)
            try:
                os.replace(path, path.with_name(path.name + ".damaged"))
            except OSError:
                pass
            continue
        if damaged:
            logger.warning(
                "resuming from %s (iteration %d): the newer %s damaged, set aside as *.damaged",
                path.name,
                checkpoint_iteration(path),
                "ones are" if len(damaged) > 1 else "one is",
            )
        return path, state
    if damaged:
        raise DamagedCheckpointError(
            f"no intact checkpoint in {checkpoint_dir(out_dir)}: {', '.join(damaged)} damaged (set aside as "
            f"*.damaged). Restore a copy, or start the run over with --overwrite; keep more than one "
            f"checkpoint with --keep-checkpoints to have one to fall back to"
        )
    return None


def convert_checkpoint(path: str | Path) -> Path:
    """Rewrite an old ``iter_NNNNNN.pt`` checkpoint (a pickle: only convert your own) beside it in the safe format."""
    path = Path(path)
    iteration = checkpoint_iteration(path)
    if path.suffix != LEGACY_SUFFIX:
        raise ValueError(f"{path} is already in the safe format")
    state = load_checkpoint(path, trust=True)
    out_dir = path.parent.parent if path.parent.name == "checkpoints" else path.parent
    keep = len(list_checkpoints(out_dir)) + 1  # delete nothing
    return save_checkpoint(out_dir, iteration, state, keep=keep)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m cory_agents.training.checkpoint", description=__doc__.split("\n\n")[0]
    )
    sub = parser.add_subparsers(dest="command", required=True)
    verify = sub.add_parser("verify", help="check that a checkpoint (a file, or a run's newest) is intact")
    verify.add_argument("path", help="a checkpoint file, or a run folder (its newest checkpoint)")
    convert = sub.add_parser("convert", help="rewrite your own old iter_NNNNNN.pt checkpoint in the safe format")
    convert.add_argument(
        "path", help="an old checkpoint file, checkpoints/iter_NNNNNN.pt (it is unpickled: yours only)"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    path = Path(args.path)
    if args.command == "convert":
        new = convert_checkpoint(path)
        print(f"wrote {new}; the old {path.name} can be deleted")
        return 0
    if path.is_dir():
        newest = latest_checkpoint(path.parent if path.name == "checkpoints" else path)
        if newest is None:
            print(f"no checkpoint in {path}", file=sys.stderr)
            return 1
        path = newest
    try:
        state = load_checkpoint(path)
    except CheckpointError as e:
        print(e, file=sys.stderr)
        return 1
    print(f"{path}: intact, iteration {state.get('iteration')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
