"""Distributed training under ``accelerate launch``: data parallel, FSDP and DeepSpeed ZeRO.

- :mod:`~agents.distributed.data_parallel`: :class:`~agents.distributed.data_parallel.DataParallel`,
  the processes of a run and their collectives (a single process is the default);
- :mod:`~agents.distributed.fsdp`: fully sharded data parallel;
- :mod:`~agents.distributed.zero`: DeepSpeed ZeRO-1/2.

See docs/scale-out.md.
"""


def __getattr__(name: str):  # ``agents.distributed`` was one module before cory-env 0.2
    import importlib

    if name.startswith("__"):
        raise AttributeError(name)
    try:
        return getattr(importlib.import_module("agents.distributed.data_parallel"), name)
    except AttributeError:
        raise AttributeError(f"module 'agents.distributed' has no attribute {name!r}") from None
