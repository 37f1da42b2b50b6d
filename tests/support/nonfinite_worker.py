"""A process of the two-process test of a non-finite update (spawned: it imports only what it needs, fast)."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from cory_agents.distributed.data_parallel import DataParallel, fingerprint
from cory_agents.distributed.optimizer_step import optimizer_steps
from cory_env.errors import NonFiniteUpdateError
from tests.support.two_processes import join_two_processes


def attempted_step(steps, model: torch.nn.Module, before: dict[str, torch.Tensor]) -> dict:
    """What an optimizer step of ``steps`` did: the error's quantity and message (None: it stepped), and
    whether every parameter of ``model`` is still as in ``before``."""
    try:
        steps.step()
        seen = {"quantity": None, "message": None}
    except NonFiniteUpdateError as error:
        seen = {"quantity": error.quantity, "message": str(error)}
    seen["unchanged"] = all(torch.equal(p, before[n]) for n, p in model.named_parameters())
    return seen


def nonfinite_worker(rank: int, port: int, results: str) -> None:
    """Process 0 backpropagates a NaN loss whose gradients are finite, process 1 a finite one; then both a
    finite one. Writes what each saw, for the kernel that clips in AdamW's fused step and for clip_grad_norm_."""
    join_two_processes(rank, port)
    dp = DataParallel.from_environment()
    out: dict = {}
    for fused in (True, False):
        torch.manual_seed(0)  # the same weights in both processes
        model = torch.nn.Linear(3, 2)
        optimizer = torch.optim.AdamW(model.parameters(), lr=0.1, fused=fused)
        steps = optimizer_steps(model, optimizer, dp, max_grad_norm=1.0)
        assert steps.clip_in_step == fused
        before = {n: p.detach().clone() for n, p in model.named_parameters()}
        x = torch.ones(4, 3)
        loss = model(x).sum()
        if rank == 0:
            loss = loss + torch.tensor(float("nan"))  # a NaN term that no gradient flows through
        steps.backward(loss)
        seen = attempted_step(steps, model, before)
        seen["no_optimizer_state"] = not optimizer.state_dict()["state"]
        steps.backward(model(x).sum())
        steps.step()
        seen["then_stepped"] = all(not torch.equal(p, before[n]) for n, p in model.named_parameters())
        dp.check_in_sync({"linear": fingerprint(dict(model.named_parameters()))})  # raises if the two differ
        seen["in_sync"] = True
        out["fused" if fused else "clip_grad_norm_"] = seen
    Path(results, f"{rank}.json").write_text(json.dumps(out))
    torch.distributed.barrier()  # both done before process 0, which holds the store, tears the group down
    torch.distributed.destroy_process_group()


def zero_nonfinite_worker(rank: int, port: int, results: str, pythonpath: str) -> None:
    """The same under DeepSpeed ZeRO-2 (each learner's own engine): process 0's NaN loss with finite gradients
    (checked before the engine's step), then on both a zero loss whose gradients overflow (the engine skips its
    step), then a finite step. Writes what each saw."""
    join_two_processes(
        rank, port, ACCELERATE_USE_DEEPSPEED="true", ACCELERATE_DEEPSPEED_ZERO_STAGE="2", PYTHONPATH=pythonpath
    )
    dp = DataParallel.from_environment()
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    steps = optimizer_steps(model, torch.optim.AdamW(model.parameters(), lr=0.1), dp, max_grad_norm=1.0)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    x = torch.ones(4, 3)
    out: dict = {"engine": type(steps).__name__}
    nan = torch.tensor(float("nan")) if rank == 0 else torch.tensor(0.0)
    for case, loss in [
        ("nan_loss", lambda: model(x).sum() + nan),
        ("overflowing_gradients", lambda: (model(x) - model(x).detach()).sum() * 1e38),
    ]:
        steps.backward(loss())
        out[case] = attempted_step(steps, model, before)
    steps.backward(model(x).sum())
    steps.step()
    out["then_stepped"] = all(not torch.equal(p, before[n]) for n, p in model.named_parameters())
    dp.check_in_sync({"linear": fingerprint(dict(model.named_parameters()))})
    out["in_sync"] = True
    Path(results, f"{rank}.json").write_text(json.dumps(out))
    torch.distributed.barrier()  # both done before process 0, which holds the store, tears the group down
    torch.distributed.destroy_process_group()
