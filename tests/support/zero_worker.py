"""A process of the two-process DeepSpeed ZeRO test (spawned): what each process holds after an update."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.two_processes import join_two_processes, one_iteration


def zero_worker(rank: int, port: int, model: str, results: str, pythonpath: str) -> None:
    join_two_processes(
        rank, port, ACCELERATE_USE_DEEPSPEED="true", ACCELERATE_DEEPSPEED_ZERO_STAGE="2", PYTHONPATH=pythonpath
    )
    trainer = one_iteration(model, results)
    out: dict = {}
    for name, learner in trainer.learners.items():
        engine = learner.steps.engine
        inner = engine.optimizer.optimizer  # torch's AdamW over this process's float32 partition
        out[name] = dict(
            engine=type(engine).__name__,
            zero_optimizer=type(engine.optimizer).__name__,
            whole=sum(
                p.numel() for p in learner.steps.params
            ),  # (the optimizer's own groups are ZeRO's partitions now)
            adam_local=sum(s["exp_avg"].numel() for s in inner.state.values()),
        )
    Path(results, f"{rank}.json").write_text(json.dumps(out))
    import torch

    torch.distributed.destroy_process_group()
