"""The runs of a benchmark: one run trained to its iterations and evaluated, here or in a worker process.

``cory-bench`` (:mod:`~cory_agents.evaluation.reward_benchmark`) decides which runs are missing; each is then
:func:`train_and_evaluate`: trained from its newest checkpoint (an ordinary ``cory-train --resume``), then its
evaluation (held out; for a signalling team, its communication measures), then marked finished (a game
without a held-out evaluation: its :data:`TRAINED` file), its checkpoints deleted with
``--delete-checkpoints``. With ``--jobs N`` each run trains in a process of its own with one thread
(:func:`run_in_process`).
"""

from __future__ import annotations

import dataclasses
import gc
import json
import sys
from pathlib import Path
from typing import Any

from cory_agents.evaluation.held_out import EvalConfig, evaluate
from cory_agents.evaluation.report import write_json
from cory_agents.training.checkpoint import checkpoint_iteration, latest_checkpoint
from cory_agents.training.config import TrainConfig
from cory_agents.training.ownership import remove_checkpoints
from cory_agents.training.trainer import Trainer

#: A run's file, in a game without held-out evaluation, that says it finished training (and how far).
TRAINED = "trained.json"


def completed_iterations(folder: Path) -> int:
    """Iterations a run's newest checkpoint holds (0 without one)."""
    checkpoint = latest_checkpoint(folder)
    return 0 if checkpoint is None else checkpoint_iteration(checkpoint) + 1


def stop_if_stopped(status: int) -> None:
    """A run stopped by Ctrl-C or SIGTERM (its trainer's ``stop_status``) stops the benchmark too, with
    cory-train's exit status."""
    if status:
        sys.exit(status)


def train_and_evaluate(
    config: TrainConfig, evaluation: EvalConfig | None, progress: bool, team_game: bool = False, drop: bool = False
) -> int:
    """Train one run to its ``--iterations`` (resuming it), then its ``evaluation`` (held out; a signalling team's
    communication measures; ``None``: none). A ``team_game``'s run (no held-out evaluation) is marked finished
    by its TRAINED file. ``drop``: delete its checkpoints once it is finished (``--delete-checkpoints``).
    Returns the trainer's stop status (0: finished)."""
    folder = Path(config.out)
    if completed_iterations(folder) < config.iterations or team_game and trained(folder) < config.iterations:
        trainer = Trainer(config)
        trainer.train(progress=progress)
        status = trainer.stop_status
        del trainer
        gc.collect()
        if status:
            return status
    if evaluation is not None and not evaluation_is_current(folder / "evaluation.json", evaluation, config.iterations):
        evaluate(evaluation, progress=progress)
        gc.collect()
    if team_game:
        write_json(folder / TRAINED, {"iterations_trained": completed_iterations(folder)})
    if drop:
        remove_checkpoints(folder / "checkpoints")
    return 0


def one_thread() -> None:
    """A ``--jobs`` worker's start: one thread, so that the runs share the cores instead of fighting over them."""
    import torch

    torch.set_num_threads(1)


def portable(config: TrainConfig, learners: list[str]) -> tuple[list[str], dict[str, Any]]:
    """A run's settings as they cross to a worker process: the benchmark's learners and the fields (an installed
    learner's config class is made at run time, :func:`~cory_agents.training.config.config_class`, and is not
    picklable by name)."""
    return learners, dataclasses.asdict(config)


def run_in_process(
    portable: tuple[list[str], dict[str, Any]], evaluation: EvalConfig | None, team_game: bool, drop: bool
) -> int:
    learners, fields = portable
    return train_and_evaluate(TrainConfig.for_learner(*learners)(**fields), evaluation, False, team_game, drop)


def trained(folder: Path) -> int:
    """The iterations a run of a team game finished (its TRAINED file; 0 without one)."""
    try:
        return int(json.loads((folder / TRAINED).read_text())["iterations_trained"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0


def evaluation_is_current(path: Path, config: EvalConfig, iterations: int) -> bool:
    if not path.exists():
        return False
    done = json.loads(path.read_text())
    return done.get("settings") == dataclasses.asdict(config) and done["policy"].get("iterations_trained") == iterations
