"""A process of the two-process collectives test (spawned: it imports only what it needs, fast)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from cory_agents.algorithms.advantages import whiten
from cory_agents.distributed.data_parallel import DataParallel, fingerprint
from tests.support.two_processes import join_two_processes


def collectives_worker(rank: int, port: int, results: str) -> None:
    join_two_processes(rank, port)
    dp = DataParallel.from_environment()
    out: dict = {"index": dp.process_index, "n": dp.num_processes, "main": dp.is_main_process, "seed": dp.seed(7)}
    out["gather"] = dp.gather(np.array([rank, 10 + rank], dtype=np.float64)).tolist()
    out["objects"] = dp.gather_objects({"rank": rank})
    out["mean"] = dp.mean({"a": float(rank), "b": 2.0 * rank})
    out["sum"] = dp.sum({"tokens": 3.0 + rank})
    # Whitening over both processes' masked entries = whitening their concatenation.
    g = torch.Generator().manual_seed(0)
    x, mask = torch.randn(2, 3, 5, generator=g), (torch.rand(2, 3, 5, generator=g) > 0.3).float()
    out["whiten"] = dp.whiten(x[rank], mask[rank]).tolist()
    out["whiten_expected"] = whiten(x.reshape(6, 5), mask.reshape(6, 5))[3 * rank : 3 * rank + 3].tolist()
    # Gradients: averaged; parameters: the main process's broadcast.
    params = [torch.nn.Parameter(torch.full((3,), 1.0 + rank)), torch.nn.Parameter(torch.zeros(2, dtype=torch.float64))]
    params[0].grad = torch.full((3,), 2.0 * rank)
    params[1].grad = torch.full((2,), 4.0 * rank, dtype=torch.float64)
    dp.average_gradients(params)
    out["grads"] = [p.grad.tolist() for p in params]
    dp.broadcast_parameters(params)
    out["params"] = params[0].tolist()
    in_sync = dp.check_in_sync({"llm_0": fingerprint({"w": params[0]})})
    out["in_sync"] = len(in_sync) == 2
    try:
        dp.check_in_sync({"llm_0": fingerprint({"w": params[0] + rank})})
        out["diverged_error"] = None
    except RuntimeError as exc:
        out["diverged_error"] = str(exc)
    Path(results, f"{rank}.json").write_text(json.dumps(out))
    torch.distributed.destroy_process_group()
