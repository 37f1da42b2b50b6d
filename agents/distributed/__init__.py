"""Distributed training under ``accelerate launch``: data parallel, FSDP and DeepSpeed ZeRO.

- :mod:`~cory_agents.distributed.data_parallel`: :class:`~cory_agents.distributed.data_parallel.DataParallel`,
  the processes of a run and their collectives (a single process is the default);
- :mod:`~cory_agents.distributed.fsdp`: fully sharded data parallel;
- :mod:`~cory_agents.distributed.zero`: DeepSpeed ZeRO-1/2;
- :mod:`~cory_agents.distributed.optimizer_step`: the one interface a learner steps its optimizer
  through (backward, step, clipping, optimizer state), whichever of these the run uses.

See docs/scale-out.md.
"""
