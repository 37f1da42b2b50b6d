"""What the tests share besides fixtures (those are in tests/conftest.py): the toy model and task
(:mod:`tests.support.toy`), the settings of toy environments (:mod:`tests.support.envs`) and toy runs
(:mod:`tests.support.runs`, :mod:`tests.support.launches`), the cross-machine comparison of golden
runs (:mod:`tests.support.golden`), the scripts that wrote tests/data, and the processes the
multi-process tests spawn. No test file imports from another test file."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repository
DATA = ROOT / "tests" / "data"  # golden runs and old checkpoints
