"""studies/games.py's signalling summary: a success rate's intervals stay inside [0, 1] and each seed is tested
against chance exactly (metrics written here by hand, as a run writes them)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from cory_agents.evaluation.rl_statistics import rate_ci_over_seeds
from studies import games


def test_the_signalling_summary_gives_rate_intervals_and_exact_tests(tmp_path):
    ends = {0: 0.5, 1: 0.95, 2: 0.9}  # seeds far apart near 1: a t-interval would pass 1
    for seed, end in ends.items():
        success = np.r_[np.full(55, 0.2), np.full(5, end)]
        frame = pd.DataFrame({"iteration": range(60), "llm_0/reward_mean": success, "llm_1/reward_mean": success})
        folder = games.run_dir(tmp_path, "signal", seed)
        folder.mkdir(parents=True)
        frame.to_csv(folder / "metrics.csv", index=False)
    result = games.summary(tmp_path, "signal")
    assert result["ends"] == pytest.approx(list(ends.values()))
    mean, low, high = rate_ci_over_seeds(list(ends.values()), trials=32 * 5)
    assert (result["end"]["mean"], result["end"]["low"], result["end"]["high"]) == pytest.approx((mean, low, high))
    assert 0 < low < high < 1
    n = 32 * 5
    assert result["exact_p"] == pytest.approx(
        [stats.binomtest(round(v * n), n, 0.25, alternative="greater").pvalue for v in ends.values()]
    )
