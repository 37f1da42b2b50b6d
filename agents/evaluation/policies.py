"""The policy ``cory-eval`` and ``cory-export`` work on: a run's learners rebuilt from its checkpoint, or a model
as it is.

:func:`find_checkpoint` finds a run's newest checkpoint, :func:`train_config_from` rebuilds the run's settings
from it (an older version's, an installed learner's too), :func:`policy_from_checkpoint` the run's models and
learners with their trained weights (a :class:`~cory_agents.training.trainer.Trainer`), and
:func:`policy_from_model` a model alone, its own reference.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

from cory_agents.training.checkpoint import latest_checkpoint
from cory_agents.training.config import TrainConfig
from cory_agents.training.resumable import upgrade_settings
from cory_agents.training.trainer import Trainer
from cory_env.errors import UsageError
from cory_env.rewards.base import RewardFunction

logger = logging.getLogger(__name__)


class CheckpointNotFoundError(UsageError, FileNotFoundError):
    """``--checkpoint`` names no checkpoint file and no run folder that holds one."""


def find_checkpoint(path: str | Path) -> Path:
    """The checkpoint file of ``path``: the file itself, or the newest one of a run folder (or of its checkpoints/)."""
    path = Path(path)
    if path.is_file():
        return path
    found = None
    if path.is_dir():
        found = latest_checkpoint(path.parent if path.name == "checkpoints" else path)
    if found is None:
        raise CheckpointNotFoundError(
            f"no checkpoint at {path}: give a run folder holding checkpoints/iter_NNNNNN.safetensors (written by "
            f"examples/train_cory.py), a checkpoint file, or use --model for a model name"
        )
    return found


def run_folder(checkpoint: Path) -> Path:
    """The run folder a checkpoint file belongs to (``<run>/checkpoints/iter_NNNNNN.safetensors``)."""
    return checkpoint.parent.parent if checkpoint.parent.name == "checkpoints" else checkpoint.parent


def train_config_from(saved: dict[str, Any], **overrides: Any) -> TrainConfig:
    """Rebuild a run's :class:`TrainConfig` from the ``config`` a checkpoint holds (an older version's too)."""
    saved = upgrade_settings(saved)
    config_class = TrainConfig.for_learner(saved.get("learner", TrainConfig.learner))  # an installed learner's too
    names = {f.name for f in dataclasses.fields(config_class)}
    unknown = sorted(set(saved) - names)
    if unknown:
        logger.warning("checkpoint settings unknown to this version are ignored: %s", ", ".join(unknown))
    kept = {k: v for k, v in saved.items() if k in names}
    # Evaluating reports to no tracker: the run's own (wandb, say) may not be installed here.
    return config_class(**{**kept, "preset": "", "resume": False, "report_to": "none", **overrides})


def policy_from_checkpoint(
    state: dict[str, Any],
    *,
    reward_fn: RewardFunction | None,
    device: str = "auto",
    play: bool = False,
    **settings: Any,
) -> Trainer:
    """The learners of a loaded checkpoint: trainable weights and final KL coefficient.

    The run's models are rebuilt by :class:`Trainer` from its saved settings (so a LoRA run
    gets its shared base, whose adapter-free forward is the reference), then each learner's
    weights are loaded. ``play``: the trainer's game is the run's own (its task's prompts; ``settings``
    override the run's, such as ``batch_size``), for a team evaluated in the game it was trained on.
    """
    config = train_config_from(state["config"], device=device, **settings)
    trainer = Trainer(config, prompts=None if play else _UNUSED_PROMPTS, reward_fn=reward_fn)
    for name, learner in trainer.learners.items():
        learner.load_trainable_state_dict(state["learners"][name]["model"])
        learner.kl_ctl.load_state_dict(state["learners"][name]["kl_ctl"])
    return trainer


def policy_from_model(model: str, *, reward_fn: RewardFunction, device: str = "auto") -> Trainer:
    """A model as it is: one ``pioneer`` learner whose reference is the same model (KL 0)."""
    config = TrainConfig(algo="ppo", model=model, device=device, report_to="none")
    return Trainer(config, prompts=_UNUSED_PROMPTS, reward_fn=reward_fn)


# The Trainer builds a training environment of its own, which evaluation never plays.
_UNUSED_PROMPTS = ["(unused: evaluation builds its own environments)"]
