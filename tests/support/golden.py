"""Comparing a training run with golden data written on another machine.

Golden runs (tests/data) were written on one CPU; a newcomer's CPU may take other kernel paths
(AVX2 instead of AVX-512, no vectorisation, another thread count), which sum in another order.
What is exactly reproducible across machines, and compared exactly:

- the sampled token ids (so the responses and the samples file): under a fixed sampling seed
  a reordering moves a token's probability by about 1e-7, and a draw flips only if it falls
  that close to a boundary (it did not in any kernel path measured below);
- the metrics computed from the tokens alone (:data:`TOKEN_COLUMNS`): task rewards, response
  lengths, roles, the iteration.

The other metrics come out of float32 network arithmetic and are compared within
:data:`RTOL` of the column's scale (its largest magnitude), not pointwise (values near zero,
such as a policy loss, have no meaningful relative error). Why that bound: a reordered float32
sum differs by a few units in the last place (about 1e-7 relative); four iterations of
training at lr 1e-2 amplify such a perturbation. Measured on the golden runs, the worst
difference over every kernel path of an AVX-512 machine (``ATEN_CPU_CAPABILITY=avx2``, the
path of an AVX2-only CPU, which reproduces the 4.3e-4 pointwise difference a newcomer
reported; ``ATEN_CPU_CAPABILITY=default MKL_ENABLE_INSTRUCTIONS=SSE4_2
ONEDNN_MAX_CPU_ISA=SSE41``, no vectorisation) was 1.4e-3 of a column's scale, in
``explained_variance`` (a difference of two close variances). A real change is far larger:
the KL coefficient 1% higher (0.0505 instead of 0.05) moves the same runs by 1.0e-2 to 5.2e-2
of a column's scale, and a learning rate 1% higher changes the sampled tokens.
:data:`RTOL` = 5e-3 lies between the two, 3.6x above the worst reordering.

Comparisons made within one test run on one machine (a resume against the uninterrupted run,
before against after) stay bit for bit; this module is only for data written elsewhere.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

#: A metric that is a float32 network output may differ by this fraction of its column's scale.
RTOL = 5e-3

#: Metrics (per learner, the part after ``learner/``) that depend on the sampled tokens alone.
TOKEN_COLUMNS = ("task_reward_mean", "task_reward_std", "reward_mean", "response_length", "role")


def is_token_column(column: str) -> bool:
    return column == "iteration" or column.rpartition("/")[2] in TOKEN_COLUMNS


def assert_same_run(now: pd.DataFrame, before: pd.DataFrame, name: str = "") -> None:
    """``now``'s metrics are ``before``'s: token-derived columns exactly, the rest within :data:`RTOL`."""
    assert list(now.columns) == list(before.columns), name
    assert len(now) == len(before), name
    for column in now.columns:
        a, b = now[column].to_numpy(np.float64), before[column].to_numpy(np.float64)
        where = f"{name}: {column}"
        if is_token_column(column):
            np.testing.assert_array_equal(a, b, err_msg=where)
        else:
            scale = float(np.max(np.abs(b))) if b.size else 0.0
            np.testing.assert_allclose(a, b, rtol=0, atol=RTOL * scale, equal_nan=True, err_msg=where)


def responses(samples: Path) -> list[tuple[str, str]]:
    """The (response, learner) pairs of a samples.jsonl, in order."""
    return [(json.loads(line)["response"], json.loads(line)["learner"]) for line in samples.read_text().splitlines()]
