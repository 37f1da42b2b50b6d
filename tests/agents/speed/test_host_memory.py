"""cory_agents.speed.host_memory: freed large blocks are reused without page faults once retained.

Each case runs in a fresh interpreter: the setting is process-wide and would outlive the test.
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import subprocess
import sys

import pytest

from tests.support import ROOT
from tests.support.runs import toy_config

PAGES = 256 * 2**20 // 4096  # in the block the probe fills

# Fill a 256 MiB tensor and free it, twelve times, then count the page faults of doing it again.
# (With the heap kept, the first few freed blocks can each be stranded: a little too small for
# the next 64-byte-aligned request of that size, and kept from coalescing by small chunks
# cached above them; after at most about eight the space is reused. See cory_agents.speed.host_memory.)
PROBE = """
import resource, torch
def fill():
    x = torch.empty(64 * 2**20)
    x.fill_(1.0)
    del x
for _ in range(12):
    fill()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
fill()
print("FAULTS", resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc", reason="glibc's malloc only"
)


# Pages of 4 KiB on every host: where transparent huge pages are "always" (the default on some
# distributions), a fresh block would fault in 2 MiB pages, a few hundred faults, and the freed
# block's cost would not show. PR_SET_THP_DISABLE (41) turns them off for the probe's process.
NO_HUGE_PAGES = "import ctypes\nassert ctypes.CDLL(None).prctl(41, 1, 0, 0, 0) == 0\n"


def faults_after(setup: str, *args: str) -> int:
    """Run ``setup`` then the probe in a fresh interpreter, with glibc's malloc at its defaults; the probe's page
    faults."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "GLIBC_TUNABLES"}
    out = subprocess.run(
        [sys.executable, "-c", NO_HUGE_PAGES + setup + PROBE, *args],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return int(next(line for line in out.stdout.splitlines() if line.startswith("FAULTS")).split()[1])


def test_freed_block_is_reused_without_page_faults():
    # glibc's default: the block went back to the OS, and each of its pages faults again on reuse.
    assert faults_after("") > PAGES // 2
    retained = "from cory_agents.speed.host_memory import retain_freed_memory\nassert retain_freed_memory() is True\n"
    assert faults_after(retained) < PAGES // 100


@pytest.mark.parametrize("retain", [True, False])
def test_a_cpu_trainer_retains_freed_memory_unless_told_not_to(tmp_path, toy_model, retain):
    model = toy_model
    config = toy_config(
        model, tmp_path / "run", iterations=1, batch_size=4, mini_batch_size=4, device="cpu", retain_freed_memory=retain
    )
    setup = (
        "import json, sys\n"
        "from cory_agents.training.config import TrainConfig\n"
        "from cory_agents.training.trainer import Trainer\n"
        "Trainer(TrainConfig(**json.loads(sys.argv[1]))).run_iteration()\n"
    )
    faults = faults_after(setup, json.dumps(dataclasses.asdict(config)))
    assert (faults < PAGES // 100) if retain else (faults > PAGES // 2), faults
