"""A process of the two-process FSDP test (spawned): what each process holds after sharding."""

from __future__ import annotations

import json
from pathlib import Path

from cory_agents.distributed.fsdp import is_sharded
from cory_agents.learners.ppo import PPOConfig, PPOLearner
from cory_agents.learners.value_model import CausalLMWithValueHead
from cory_agents.training.build import trainable_parameters as _trainable_parameters
from cory_agents.training.capabilities import Capabilities
from cory_agents.training.config import TrainConfig
from cory_agents.training.registry import register_learner
from cory_agents.training.trainer import Trainer
from tests.support.toy import fraction_good
from tests.support.two_processes import join_two_processes, one_iteration


def unsharded_head_learner(config, *, policy, reference, seed, sampling, device, data_parallel=None):
    """A plug-in learner that forgets to shard the module it adds (the value head)."""
    return PPOLearner(
        CausalLMWithValueHead(policy),
        reference,
        config.learner_config(PPOConfig),
        seed,
        sampling,
        data_parallel=data_parallel,
    )


def fsdp_worker(rank: int, port: int, model: str, results: str) -> None:
    join_two_processes(rank, port, ACCELERATE_USE_FSDP="true", FSDP_VERSION="2")
    trainer = one_iteration(model, results)
    out: dict = {}
    for name, learner in trainer.learners.items():
        params = _trainable_parameters(learner)
        states = [t for s in learner.optimizer.state.values() for t in s.values() if t.dim() > 0]
        out[name] = dict(
            all_sharded=all(is_sharded(p) for p in params) and all(is_sharded(t) for t in states),
            local=sum(p.to_local().numel() for p in params),
            whole=sum(p.numel() for p in params),
            adam_local=sum(t.to_local().numel() for t in states),
        )
    reference = trainer.learners["llm_0"].reference
    out["reference"] = dict(
        local=sum(p.to_local().numel() for p in reference.parameters()),
        whole=sum(p.numel() for p in reference.parameters()),
    )
    register_learner("unsharded_head", unsharded_head_learner, supports=Capabilities.all())
    try:
        plug_in = TrainConfig(**{**trainer.config.__dict__, "learner": "unsharded_head"})
        Trainer(plug_in, prompts=["a b"], reward_fn=fraction_good)
        out["unsharded_error"] = None
    except ValueError as exc:
        out["unsharded_error"] = str(exc)
    Path(results, f"{rank}.json").write_text(json.dumps(out))
    import torch

    torch.distributed.destroy_process_group()
