"""Keep freed host memory in the process, so that a CPU training loop's large tensors reuse it.

Every training iteration allocates and frees the same large tensors again: the gradient of
every weight, full-vocabulary logits, activations. glibc's ``malloc`` serves each block above
its mmap threshold (at most 32 MiB; with the embedded model, the gradients of the tied
embedding matrix, 113 MB each, three per backward pass) with a fresh ``mmap`` and gives it
back to the OS on ``free``, so every page of it faults again the next time, in every
iteration. Keeping the memory makes an iteration faster at the same peak memory: the page
faults, the kernel time and the iteration's time with and without it are in docs/benchmarks.md
(``benchmarks/iteration.py --no-lora --host-memory-ablation`` measures both side by side).

:func:`retain_freed_memory` turns ``mmap`` allocations off and heap trimming up, so freed blocks
stay in the heap and later allocations reuse them, already mapped. Memory freed after the peak
stays with the process until it exits instead of going back to the OS. The cost, in the worst
case: glibc can strand a few freed large blocks (each a little too small for the next aligned
request of its size, and kept from coalescing by small cached chunks above it) before it
reuses them, up to about eight times the largest block that is allocated and freed over and
over (a loop that fills and frees one 256 MiB tensor settles at about 2 GB). In the training
loop the peak stays the same, and over a long CORY run resident memory grows a few percent
and then stays (docs/benchmarks.md has the figures). The setting is process-wide and lasts until
exit: the :class:`~cory_agents.training.trainer.Trainer` applies it to CPU runs unless
``--no-retain-freed-memory``. It is the same as starting Python with
``MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=2147483647`` in the environment.
"""

from __future__ import annotations

import ctypes
import sys

# mallopt(3) parameters (glibc's malloc.h).
M_TRIM_THRESHOLD = -1
M_MMAP_MAX = -4
#: mallopt takes an int: the largest trim threshold it can set (2 GiB of free heap top kept).
_MAX_TRIM_THRESHOLD = 2**31 - 1


def retain_freed_memory() -> bool:
    """Stop glibc's ``malloc`` from returning freed blocks to the OS (see the module docstring).

    Returns whether the setting took effect: ``False`` on platforms other than Linux with
    glibc (macOS, Windows, musl), where nothing is changed.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None)  # the C library this process already uses
        libc.gnu_get_libc_version  # noqa: B018 (only glibc has it, and glibc's mallopt semantics)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_MMAP_MAX, 0)) and bool(mallopt(M_TRIM_THRESHOLD, _MAX_TRIM_THRESHOLD))
