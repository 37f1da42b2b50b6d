"""A process of the two-process DeepSpeed ZeRO test (spawned): what each process holds after an update."""

from __future__ import annotations

import json
import os
from pathlib import Path

from agents.trainer import TrainConfig, Trainer

from .toy import fraction_good


def zero_worker(rank: int, port: int, model: str, results: str, pythonpath: str) -> None:
    os.environ.update(WORLD_SIZE="2", RANK=str(rank), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port), CUDA_VISIBLE_DEVICES="", ACCELERATE_USE_DEEPSPEED="true",
                      ACCELERATE_DEEPSPEED_ZERO_STAGE="2", PYTHONPATH=pythonpath)  # fmt: skip
    config = TrainConfig(model=model, iterations=1, batch_size=4, mini_batch_size=2, ppo_epochs=1, lr=1e-2,
                         min_new_tokens=3, max_new_tokens=4, out=str(Path(results) / "run"), tensorboard=False,
                         context_length=48)  # fmt: skip
    trainer = Trainer(config, prompts=["the movie was", "the plot is"], reward_fn=fraction_good)
    trainer.run_iteration()
    out: dict = {}
    for name, learner in trainer.learners.items():
        engine = learner._engine
        inner = engine.optimizer.optimizer  # torch's AdamW over this process's float32 partition
        out[name] = dict(
            engine=type(engine).__name__,
            zero_optimizer=type(engine.optimizer).__name__,
            whole=sum(p.numel() for p in learner._params),  # (the optimizer's own groups are ZeRO's partitions now)
            adam_local=sum(s["exp_avg"].numel() for s in inner.state.values()),
        )  # fmt: skip
    Path(results, f"{rank}.json").write_text(json.dumps(out))
    import torch

    torch.distributed.destroy_process_group()
