"""Data-parallel training over several processes, launched with Hugging Face accelerate.

``accelerate launch --config_file examples/accelerate/multi_gpu.yaml --num_processes N
examples/train_cory.py ...`` starts N copies of the training loop (docs/scale-out.md).
Each process plays its own batch of ``--batch-size`` conversations (its own prompts and
sampling streams: the seed plus the process index, as ``accelerate.utils.set_seed(
device_specific=True)``) and computes gradients on it; before every optimizer step the
gradients of every learner are averaged over the processes (one all-reduce), so the weights
stay identical everywhere, as with PyTorch's DistributedDataParallel. The global batch is
``N * --batch-size``.

Everything else that decides an update is computed over all processes, so it is the same
everywhere:

- score statistics (``--score-scaling``): updated with every process's scores;
- advantage whitening: mean and variance over every process's response tokens
  (TRL 0.7 whitened per process; over all of them is what one big batch would do);
- the adaptive KL controller: the mean KL over all processes, ``n_steps`` = the global batch
  (as TRL 0.7);
- the logged metrics: means over processes (``task_reward_std`` over all conversations).

:class:`DataParallel` with one process is the identity: every method returns its input
untouched, so a run that is not launched (or launched with one process) is bit for bit what
it was without this module.

Launched with an FSDP config (examples/accelerate/fsdp.yaml), the same holds, but each
process keeps only a shard of the learners' weights (:meth:`DataParallel.shard`,
:mod:`cory_agents.distributed.fsdp`); FSDP then averages their gradients itself. Launched with a DeepSpeed
ZeRO-1/2 config (examples/accelerate/deepspeed_zero2.yaml), each process keeps whole weights
but only a partition of the Adam state (and gradients), and each learner steps through its
own DeepSpeed engine (:mod:`cory_agents.distributed.zero`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from cory_agents.algorithms.advantages import whiten
from cory_agents.distributed.fsdp import FSDPSettings, gathered, is_sharded, shard
from cory_agents.distributed.zero import ZeROSettings

#: accelerate's launcher variables for the backends this loop cannot run (FSDP: :mod:`cory_agents.distributed.fsdp`).
_UNSUPPORTED = {
    "ACCELERATE_USE_MEGATRON_LM": "Megatron-LM",
}


def _flag(name: str) -> bool:
    return os.environ.get(name, "false").lower() in ("1", "true", "yes")


class DataParallel:
    """The processes of a run: this one's index, their number, and collectives over them.

    Build it with :meth:`from_environment`; ``DataParallel()`` is a single process.
    """

    def __init__(self, state: Any = None, fsdp: FSDPSettings | None = None, zero: ZeROSettings | None = None):
        self._state = state  # accelerate's PartialState, or None for a single process
        #: FSDP's settings when launched with an FSDP config (the learners' weights are then sharded).
        self.fsdp = fsdp
        #: DeepSpeed ZeRO's settings when launched with a DeepSpeed config over several processes
        #: (each learner then steps through its own engine, :mod:`cory_agents.distributed.zero`).
        self.zero = zero if state is not None and state.num_processes > 1 else None
        self.num_processes: int = state.num_processes if state is not None else 1
        self.process_index: int = state.process_index if state is not None else 0
        self.device: torch.device | None = state.device if state is not None else None

    @classmethod
    def from_environment(cls) -> DataParallel:
        """The processes ``accelerate launch`` (or ``torchrun``) started, or a single one."""
        for variable, name in _UNSUPPORTED.items():
            if _flag(variable):
                raise ValueError(
                    f"{name} is not supported: two learners with their own optimizers update in turn and act token "
                    f"by token. Launch with a multi-GPU config (accelerate launch --config_file "
                    f"examples/accelerate/multi_gpu.yaml ...), or shard the weights with FSDP "
                    f"(examples/accelerate/fsdp.yaml); to save memory also --lora (one shared base), "
                    f"--gradient-checkpointing, --load-in-4bit. See docs/scale-out.md"
                )
        fsdp = FSDPSettings.from_environment()
        zero = ZeROSettings.from_environment()
        precision = os.environ.get("ACCELERATE_MIXED_PRECISION", "no")
        if precision not in ("no", "bf16"):
            raise ValueError(
                f"accelerate's mixed precision {precision!r} is not supported: launch with --mixed_precision no "
                f"(or bf16, which turns on --bf16)"
            )
        if world_size() <= 1:
            if _flag("ACCELERATE_USE_CPU") and "MASTER_ADDR" in os.environ:
                # accelerate's CPU launcher starts the other processes only through mpirun.
                raise ValueError(
                    "accelerate launch --cpu --num_processes N started one process (on CPUs accelerate starts N only "
                    "with --mpirun_hostfile). On one machine use accelerate launch --multi_gpu --num_processes N "
                    "(a machine without CUDA runs it on CPUs; set CUDA_VISIBLE_DEVICES= to force that), or "
                    "torchrun --nproc_per_node N"
                )
            if fsdp is None or "MASTER_ADDR" not in os.environ:
                return cls(fsdp=fsdp, zero=zero)
            # accelerate launch --num_processes 1 with an FSDP config: FSDP over a group of one process
            # (nothing saved, but the same code path as with several).
        from accelerate import PartialState

        # PartialState (unlike AcceleratorState) does not read the launcher's --cpu itself.
        cpu = _flag("ACCELERATE_USE_CPU") or not torch.cuda.is_available()
        return cls(PartialState(cpu=cpu), fsdp=fsdp, zero=zero)

    @property
    def bf16(self) -> bool:
        """Whether the launcher asked for bf16 mixed precision (``--mixed_precision bf16``)."""
        return os.environ.get("ACCELERATE_MIXED_PRECISION", "no") == "bf16"

    def close(self) -> None:
        """End a data-parallel run: every process waits for the others, then the process group is
        destroyed. Left to the interpreter's exit, a process whose peers were still working could
        abort in the collective backend's teardown (``terminate called without an active
        exception``, exit -6) after its run had finished. Call it on every process; a single
        process has nothing to end."""
        if self.is_distributed and torch.distributed.is_initialized():
            torch.distributed.barrier()
            torch.distributed.destroy_process_group()

    @property
    def is_distributed(self) -> bool:
        return self.num_processes > 1

    @property
    def sharded(self) -> bool:
        """Whether the learners' weights are sharded with FSDP (an FSDP launch, with a process group)."""
        return self.fsdp is not None and self._state is not None

    @property
    def is_main_process(self) -> bool:
        """The process that writes files (metrics, samples, checkpoints, plots) and shows progress."""
        return self.process_index == 0

    def seed(self, seed: int) -> int:
        """This process's seed: ``seed + process_index`` (accelerate's ``device_specific`` convention)."""
        return seed + self.process_index

    def shard(self, module: torch.nn.Module, *, frozen: bool = False) -> torch.nn.Module:
        """Under FSDP, shard ``module`` in place (:func:`cory_agents.distributed.fsdp.shard`); otherwise return it untouched.

        A learner shards what it adds to its policy (PPO: the value head) before building its
        optimizer. ``frozen`` (a reference model): its gathered weights are always freed after use.
        """
        if not self.sharded:
            return module
        return shard(module, dataclasses.replace(self.fsdp, reshard_after_forward=True) if frozen else self.fsdp)

    def gathered(self, modules: Iterable[torch.nn.Module]) -> contextlib.AbstractContextManager:
        """Under FSDP, ``modules`` hold their whole weights inside the block (:func:`cory_agents.distributed.fsdp.gathered`:
        acting communicates nothing, whatever each process's episode length); otherwise nothing happens."""
        if not self.sharded:
            return contextlib.nullcontext()
        return gathered(modules, self.fsdp)

    def wait_for_everyone(self) -> None:
        if self.is_distributed:
            self._state.wait_for_everyone()

    # ------------------------------------------------------------------ collectives
    def gather(self, x: np.ndarray) -> np.ndarray:
        """Every process's ``x`` (same shape everywhere), concatenated along axis 0 in process order."""
        if not self.is_distributed:
            return x
        from accelerate.utils import gather

        t = torch.as_tensor(np.ascontiguousarray(x), device=self.device)
        return gather(t).cpu().numpy()

    def gather_objects(self, obj: Any) -> list[Any]:
        """One picklable object per process, in process order."""
        if not self.is_distributed:
            return [obj]
        from accelerate.utils import gather_object

        return gather_object([obj])

    def mean(self, values: Mapping[str, float]) -> dict[str, float]:
        """Each value averaged over processes (one all-reduce)."""
        return self._reduce(values, "mean")

    def sum(self, values: Mapping[str, float]) -> dict[str, float]:
        """Each value summed over processes (one all-reduce)."""
        return self._reduce(values, "sum")

    def _reduce(self, values: Mapping[str, float], reduction: str) -> dict[str, float]:
        if not self.is_distributed:
            return dict(values)
        from accelerate.utils import reduce

        keys = list(values)
        t = torch.tensor([float(values[k]) for k in keys], dtype=torch.float64, device=self.device)
        return dict(zip(keys, reduce(t, reduction).tolist()))

    @torch.no_grad()
    def average_gradients(self, params: Sequence[torch.nn.Parameter]) -> None:
        """Replace each gradient by its mean over processes, in one all-reduce per dtype.

        Every process must pass the same parameters with the same gradients present (the
        same forward graph): a parameter without a gradient is left out everywhere. Sharded
        parameters (FSDP) are left out too: FSDP averaged their gradients in ``backward()``.
        """
        if not self.is_distributed:
            return
        grads = [p.grad for p in params if p.grad is not None and not is_sharded(p)]
        for dtype in sorted({g.dtype for g in grads}, key=str):
            group = [g for g in grads if g.dtype == dtype]
            flat = torch.cat([g.reshape(-1) for g in group])
            torch.distributed.all_reduce(flat)
            flat /= self.num_processes
            offset = 0
            for g in group:
                g.copy_(flat[offset : offset + g.numel()].view_as(g))
                offset += g.numel()

    @torch.no_grad()
    def broadcast_parameters(self, params: Iterable[torch.Tensor]) -> None:
        """Copy the main process's values into every process's ``params`` (as DDP does at start).

        Sharded parameters (FSDP) are left out: :meth:`shard` copied process 0's weights before sharding.
        """
        if not self.is_distributed:
            return
        for p in params:
            if not is_sharded(p):
                torch.distributed.broadcast(p.data, src=0)

    def whiten(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """:func:`cory_agents.algorithms.advantages.whiten` with mean and variance over every process's masked entries."""
        if not self.is_distributed:
            return whiten(x, mask)
        from accelerate.utils import reduce

        m = mask.to(x.dtype)
        total, n = reduce(torch.stack([(x * m).sum(), m.sum()]), "sum")
        if n < 2:
            raise ValueError(f"whitening needs at least 2 masked elements over all processes, got {int(n)}")
        mean = total / n
        squares = reduce(((x - mean) ** 2 * m).sum(), "sum")
        var = squares / n * n / (n - 1)  # Bessel-corrected, as whiten()
        return (x - mean) * torch.rsqrt(var + 1e-8) * m

    def check_in_sync(self, fingerprints: Mapping[str, str]) -> list[dict[str, str]]:
        """Gather every process's weight fingerprints; raise if any differ from the main process's.

        Returns one ``{learner: fingerprint}`` per process.
        """
        everyone = self.gather_objects(dict(fingerprints))
        for index, theirs in enumerate(everyone):
            if theirs != everyone[0]:
                diverged = sorted(k for k in theirs if theirs[k] != everyone[0].get(k))
                raise RuntimeError(
                    f"process {index}'s weights differ from process 0's ({', '.join(diverged)}): the data-parallel "
                    f"processes diverged (a process skipped a gradient all-reduce, or started from other weights)"
                )
        return everyone


def world_size() -> int:
    """The number of processes the launcher started (torchrun, or mpirun's variables), 1 if none."""
    for variable in ("WORLD_SIZE", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE"):
        if os.environ.get(variable):
            return int(os.environ[variable])
    return 1


def process_rank() -> int:
    """This process's rank among those the launcher started (torchrun, or mpirun's variables), 0 if none:
    known before any process group exists (the run lock is probed by rank 0 alone, before the models load)."""
    for variable in ("RANK", "PMI_RANK", "OMPI_COMM_WORLD_RANK", "MV2_COMM_WORLD_RANK"):
        if os.environ.get(variable):
            return int(os.environ[variable])
    return 0


def fingerprint(tensors: Mapping[str, torch.Tensor]) -> str:
    """SHA-256 of the names and exact bytes of ``tensors`` (equal only for bit-identical weights)."""
    digest = hashlib.sha256()
    for name in sorted(tensors):
        t = tensors[name].detach().cpu().contiguous()
        digest.update(name.encode())
        digest.update(str(t.dtype).encode())
        digest.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()
