"""Distributed training under ``accelerate launch``: data parallel, FSDP and DeepSpeed ZeRO.

- :mod:`~agents.distributed.data_parallel`: :class:`~agents.distributed.data_parallel.DataParallel`,
  the processes of a run and their collectives (a single process is the default);
- :mod:`~agents.distributed.fsdp`: fully sharded data parallel;
- :mod:`~agents.distributed.zero`: DeepSpeed ZeRO-1/2;
- :mod:`~agents.distributed.optimizer_step`: the one interface a learner steps its optimizer
  through (backward, step, clipping, optimizer state), whichever of these the run uses.

See docs/scale-out.md.
"""
