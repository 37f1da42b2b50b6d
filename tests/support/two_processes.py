"""What the spawned processes of the two-process tests share (imports nothing heavy: they start fast)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


def join_two_processes(rank: int, port: int, **environment: str) -> None:
    """Set the environment of process ``rank`` of a two-process group on this machine's CPUs
    (torch.distributed's and Accelerate's ``env://`` variables), plus ``environment``."""
    os.environ.update(
        WORLD_SIZE="2",
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        CUDA_VISIBLE_DEVICES="",
        **environment,
    )


def one_iteration(model: str, results: str) -> Any:
    """A CORY trainer on ``model`` after one small iteration (batch 4, two minibatches)."""
    from cory_agents.training.config import TrainConfig
    from cory_agents.training.trainer import Trainer
    from tests.support.toy import fraction_good

    config = TrainConfig(
        model=model,
        iterations=1,
        batch_size=4,
        mini_batch_size=2,
        ppo_epochs=1,
        lr=1e-2,
        min_new_tokens=3,
        max_new_tokens=4,
        out=str(Path(results) / "run"),
        report_to="none",
        context_length=48,
    )
    trainer = Trainer(config, prompts=["the movie was", "the plot is"], reward_fn=fraction_good)
    trainer.run_iteration()
    return trainer
