"""Which settings a resumed run may change, and an older version's saved settings in today's names.

A checkpoint (and a run's ``config.json``) records the settings of the run that wrote it. A
``--resume`` continues that run only if its settings are the same but for
:data:`RESUMABLE_CHANGES`: how far it runs, what it writes, and switches that compute the same
numbers another way (:func:`check_resumable`). Settings saved by an older version are read in
today's names first (:func:`upgrade_settings`); settings one side does not know are not compared.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from cory_env.errors import UsageError

#: Settings a resumed run may change: how far it runs, what it writes, and how it computes the
#: same numbers (memory and speed switches). Any other change would not continue the same run.
RESUMABLE_CHANGES = frozenset(
    {
        "iterations",
        "out",
        "resume",
        "overwrite",
        "checkpoint_every",
        "keep_checkpoints",
        "trust_checkpoint",
        "samples_per_iteration",
        "report_to",
        "save_model",
        "retain_freed_memory",
        "cpu_linear",
        "padding_free",
        "reuse_scoring_pass",
        "reward_timeout",
        "gradient_checkpointing",
        "gradient_checkpointing_observer",
        "compile",
    }
)


def upgrade_settings(saved: dict[str, Any]) -> dict[str, Any]:
    """A saved config (``config.json``, a checkpoint's) in this version's names: cory-env 0.1's
    ``review_source`` becomes ``prompt_source`` (the sentiment task's, where that was ``auto``),
    and its ``tensorboard`` switch goes (a resolved config holds the trackers in ``report_to``).

    >>> upgrade_settings({"task": "sentiment", "prompt_source": "auto", "review_source": "imdb", "tensorboard": None})
    {'task': 'sentiment', 'prompt_source': 'imdb'}
    """
    saved = dict(saved)
    review = saved.pop("review_source", "auto")
    if (
        review != "auto"
        and saved.get("prompt_source", "auto") == "auto"
        and saved.get("task", "sentiment") == "sentiment"
    ):
        saved["prompt_source"] = review
    saved.pop("tensorboard", None)
    return saved


def changed_settings(saved: dict[str, Any], current: dict[str, Any], may_change: Iterable[str] = ()) -> str:
    """The settings (:class:`TrainConfig` fields) in which ``current`` differs from ``saved``, other
    than ``may_change``, written as flags: ``"--lr 0.01 -> 0.001, ..."``; empty if there are none.
    ``saved`` may be an older version's (:func:`upgrade_settings`); settings one side does not know
    (written by another version) are not compared."""
    saved = upgrade_settings(saved)
    changed = sorted(k for k in (saved.keys() & current.keys()) - set(may_change) if saved[k] != current[k])
    return ", ".join(f"--{k.replace('_', '-')} {saved[k]!r} -> {current[k]!r}" for k in changed)


def check_resumable(saved: dict[str, Any], current: dict[str, Any], out: str | Path = "") -> None:
    """Raise a UsageError (a ValueError) naming every setting (after presets and task defaults) in which a resumed
    run differs from the run that wrote its checkpoint, other than :data:`RESUMABLE_CHANGES`."""
    if diffs := changed_settings(saved, current, RESUMABLE_CHANGES):
        raise UsageError(
            f"--resume: the checkpoint in {out} was written by a run with other settings ({diffs}). Resume with "
            f"that run's settings ({Path(out) / 'config.json'}), or start a new run: another --out, or --overwrite"
        )
