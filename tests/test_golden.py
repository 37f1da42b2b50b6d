"""The cross-machine comparison of tests/support/golden.py: it takes a reordering's rounding, refuses a real change."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tests.support import DATA
from tests.support.golden import RTOL, assert_same_run

GOLDEN = pd.read_csv(DATA / "chain_of_two" / "cory_metrics.csv")
FLOAT = "llm_0/policy_loss"


def test_rounding_of_another_kernel_path_passes():
    now = GOLDEN.copy()
    now[FLOAT] += 0.5 * RTOL * np.abs(GOLDEN[FLOAT]).max()
    assert_same_run(now, GOLDEN)


def test_a_float_metric_off_by_more_than_the_bound_fails():
    now = GOLDEN.copy()
    now.loc[2, FLOAT] += 2 * RTOL * np.abs(GOLDEN[FLOAT]).max()
    with pytest.raises(AssertionError, match="policy_loss"):
        assert_same_run(now, GOLDEN)


@pytest.mark.parametrize("column", ["llm_1/task_reward_mean", "llm_0/response_length", "llm_1/role", "iteration"])
def test_a_token_derived_metric_must_match_exactly(column):
    now = GOLDEN.copy()
    now[column] = now[column].astype(np.float64)
    now.loc[1, column] = np.nextafter(now.loc[1, column], np.inf)  # one unit in the last place
    with pytest.raises(AssertionError, match=column):
        assert_same_run(now, GOLDEN)


def test_a_missing_column_or_iteration_fails():
    with pytest.raises(AssertionError):
        assert_same_run(GOLDEN.drop(columns=[FLOAT]), GOLDEN)
    with pytest.raises(AssertionError):
        assert_same_run(GOLDEN.iloc[:-1], GOLDEN)
