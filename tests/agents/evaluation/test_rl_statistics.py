"""cory_agents.evaluation.rl_statistics and .decisions against hand-computed cases and scipy's own functions.

By hand: t quantiles with 1 degree of freedom have a closed form (Cauchy: t_p = tan(pi (p - 1/2))),
Clopper-Pearson bounds at 0 and n successes too (1 - (a/2)^(1/n) and (a/2)^(1/n)). Power against
simulated Welch tests with a fixed seed.
"""

from __future__ import annotations

import doctest
import math

import numpy as np
import pytest
from scipy import integrate, stats

import cory_agents.evaluation.decisions
import cory_agents.evaluation.rl_statistics
from cory_agents.evaluation.decisions import (
    pooled_sd,
    power_two_sample,
    seeds_for_power,
    smallest_detectable_difference,
    tost,
    verdict,
)
from cory_agents.evaluation.rl_statistics import (
    area_under_curve,
    binomial_ci,
    binomial_test_against_chance,
    final_window,
    iqm,
    performance_profile,
    plot_performance_profiles,
    probability_of_improvement,
    rate_ci_over_seeds,
    stratified_bootstrap_ci,
)
from cory_agents.evaluation.statistics import mean_ci

T_975_DOF1 = math.tan(0.475 * math.pi)  # 12.7062


# ---------------------------------------------------------------- IQM and the stratified bootstrap


def test_iqm_by_hand_drops_a_quarter_each_side():
    assert iqm([1, 2, 3, 4, 5, 6, 7, 100]) == 4.5  # mean(3, 4, 5, 6); the mean would be 16
    assert iqm(np.arange(10.0)) == 4.5  # n = 10: floor(2.5) = 2 dropped each side, mean(2..7)
    assert iqm([[1, 100], [2, 7], [3, 6], [4, 5]]) == 4.5  # a runs x tasks matrix: over all its scores


def test_iqm_is_scipy_trim_mean():
    x = np.random.default_rng(0).normal(size=(7, 3))
    assert iqm(x) == pytest.approx(stats.trim_mean(x.ravel(), 0.25))


def test_bootstrap_resamples_runs_within_each_task():
    # Each task's runs are equal: resampling within a task changes nothing. Pooling the tasks' runs
    # (a plain bootstrap) would give intervals about [2.5, 7.5].
    scores = [[0.0, 10.0], [0.0, 10.0], [0.0, 10.0]]
    assert stratified_bootstrap_ci(scores, "mean", reps=500) == (5.0, 5.0, 5.0)
    assert stratified_bootstrap_ci(scores, "iqm", reps=500) == (5.0, 5.0, 5.0)


def test_bootstrap_is_reproducible_with_its_seed():
    x = np.random.default_rng(1).normal(size=(10, 4))
    first = stratified_bootstrap_ci(x, "iqm", reps=500, seed=3)
    assert stratified_bootstrap_ci(x, "iqm", reps=500, seed=3) == first
    assert stratified_bootstrap_ci(x, "iqm", reps=500, seed=4) != first
    estimate, low, high = first
    assert estimate == iqm(x) and low < estimate < high


def test_bootstrap_interval_of_a_mean_is_about_the_normal_interval():
    x = np.random.default_rng(2).normal(3.0, 2.0, size=400)
    estimate, low, high = stratified_bootstrap_ci(x, "mean", reps=2000)
    half = 1.96 * x.std(ddof=1) / math.sqrt(x.size)
    assert estimate == pytest.approx(x.mean())
    assert (high - low) / 2 == pytest.approx(half, rel=0.1)
    assert (low + high) / 2 == pytest.approx(x.mean(), abs=0.2 * half)


def test_bootstrap_takes_a_statistic_function_and_needs_two_runs():
    x = np.random.default_rng(3).normal(size=(6, 2))
    median = lambda m: np.median(m.reshape(*m.shape[:-2], -1), axis=-1)
    assert stratified_bootstrap_ci(x, median, reps=200)[0] == pytest.approx(np.median(x))
    with pytest.raises(ValueError, match="2 runs"):
        stratified_bootstrap_ci([[1.0, 2.0]], "mean")


# ---------------------------------------------------------------- probability of improvement


def test_probability_of_improvement_by_hand():
    # x=1 beats 0: 1; x=2 ties 2, 2 and beats 0: 2; x=3 beats all: 3. U = 6 of 9 pairs.
    p, low, high = probability_of_improvement([1.0, 2.0, 3.0], [2.0, 2.0, 0.0], reps=500)
    assert p == pytest.approx(6 / 9)
    assert 0 <= low <= p <= high <= 1


def test_probability_of_improvement_is_mann_whitney_u_over_nm_averaged_over_tasks():
    rng = np.random.default_rng(4)
    x, y = rng.integers(0, 4, size=(6, 3)).astype(float), rng.integers(0, 4, size=(5, 3)).astype(float)  # ties
    per_task = [stats.mannwhitneyu(x[:, t], y[:, t]).statistic / (6 * 5) for t in range(3)]
    assert probability_of_improvement(x, y, reps=200)[0] == pytest.approx(np.mean(per_task))
    assert probability_of_improvement(y, x, reps=200)[0] == pytest.approx(1 - np.mean(per_task))


def test_probability_of_improvement_interval_is_stratified_and_seeded():
    assert probability_of_improvement([[1.0, 0.0], [1.0, 0.0]], [[0.0, 1.0], [0.0, 1.0]], reps=300) == (
        0.5,
        0.5,
        0.5,
    )  # task 1: x always wins, task 2: always loses; runs are equal within a task
    x, y = np.random.default_rng(5).normal(size=(2, 8, 2))
    first = probability_of_improvement(x, y, reps=300, seed=1)
    assert probability_of_improvement(x, y, reps=300, seed=1) == first
    assert first[1] < first[0] < first[2]
    with pytest.raises(ValueError, match="same tasks"):
        probability_of_improvement(np.ones((3, 2)), np.ones((3, 1)))


# ---------------------------------------------------------------- performance profiles


def test_performance_profile_by_hand_with_bands():
    profiles = performance_profile({"PPO": [1, 2, 3, 4], "CORY": [[1, 5], [2, 6]]}, [0, 2.5, 4], reps=300)
    profile, low, high = profiles["PPO"]
    assert profile.tolist() == [1.0, 0.5, 0.0]  # strictly above each threshold
    assert profiles["CORY"][0].tolist() == [1.0, 0.5, 0.5]  # over all runs and tasks
    assert low[0] == high[0] == 1.0 and low[2] == high[2] == 0.0  # every resample agrees there
    assert low[1] < 0.5 < high[1] and (0 <= low).all() and (high <= 1).all()


def test_plot_performance_profiles_writes_a_png(tmp_path):
    scores = {"PPO": np.arange(6.0), "CORY": np.arange(6.0) + 1}
    path = plot_performance_profiles(scores, np.linspace(0, 7, 15), tmp_path / "sub" / "profiles.png", reps=100)
    assert path == tmp_path / "sub" / "profiles.png"
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000


# ---------------------------------------------------------------- rates


def test_binomial_ci_at_the_edges_by_hand():
    rate, low, high = binomial_ci(0, 10)
    assert (rate, low) == (0.0, 0.0) and high == pytest.approx(1 - 0.025 ** (1 / 10))  # 0.3085
    rate, low, high = binomial_ci(10, 10)
    assert (rate, high) == (1.0, 1.0) and low == pytest.approx(0.025 ** (1 / 10))  # 0.6915


def test_binomial_ci_is_clopper_pearson():
    rate, low, high = binomial_ci(3, 20, confidence=0.9)
    assert rate == 0.15
    assert low == pytest.approx(stats.beta.ppf(0.05, 3, 18))  # B(a/2; k, n - k + 1)
    assert high == pytest.approx(stats.beta.ppf(0.95, 4, 17))  # B(1 - a/2; k + 1, n - k)
    ci = stats.binomtest(3, 20).proportion_ci(0.9, method="exact")
    assert (low, high) == pytest.approx((ci.low, ci.high))
    for bad in ((11, 10), (-1, 10), (0, 0)):
        with pytest.raises(ValueError):
            binomial_ci(*bad)


def test_rate_ci_over_seeds_by_hand():
    # p = 0.5, s = sqrt(0.02), se = 0.1; logit half-width t_{0.975, 1} * 0.1 / 0.25
    mean, low, high = rate_ci_over_seeds([0.4, 0.6])
    half = T_975_DOF1 * 0.1 / 0.25
    assert mean == pytest.approx(0.5)
    assert (low, high) == pytest.approx((1 / (1 + math.exp(half)), 1 / (1 + math.exp(-half))))


def test_rate_ci_over_seeds_stays_inside_0_1_near_the_edges():
    near_zero = [0.0, 0.0, 0.01, 0.02]
    assert mean_ci(near_zero)[1] < 0  # the plain t interval leaves [0, 1]
    mean, low, high = rate_ci_over_seeds(near_zero)
    assert 0 < low < mean < high < 1
    mirrored = rate_ci_over_seeds([1 - r for r in near_zero])
    assert mirrored == pytest.approx((1 - mean, 1 - high, 1 - low))  # the logit is symmetric
    assert 0 < mirrored[1] < mirrored[2] < 1 and mean_ci([1 - r for r in near_zero])[2] > 1
    for rates in ([0.0, 0.3, 0.0, 0.0, 0.0], [1.0, 0.7, 1.0], [0.001, 0.999]):
        _, low, high = rate_ci_over_seeds(rates)
        assert 0 <= low <= high <= 1


def test_rate_ci_over_seeds_without_spread():
    assert rate_ci_over_seeds([0.0, 0.0, 0.0], trials=10) == (0.0, *binomial_ci(0, 30)[1:])
    assert rate_ci_over_seeds([1.0, 1.0], trials=[10, 30]) == (1.0, *binomial_ci(40, 40)[1:])
    assert rate_ci_over_seeds([0.3], trials=10) == binomial_ci(3, 10)
    mean, low, high = rate_ci_over_seeds([0.0, 0.0])
    assert mean == 0.0 and math.isnan(low) and math.isnan(high)
    for bad in ([1.2, 0.5], [], [float("nan"), 0.5]):
        with pytest.raises(ValueError):
            rate_ci_over_seeds(bad)


def test_binomial_test_against_chance_by_hand_and_scipy():
    assert binomial_test_against_chance(7, 10, 0.5) == pytest.approx(176 / 1024)  # C(10,7..10) / 2^10
    assert binomial_test_against_chance(10, 10, 0.5) == pytest.approx(1 / 1024)
    assert binomial_test_against_chance(0, 10, 0.5) == pytest.approx(1.0)
    expected = stats.binomtest(9, 40, 0.1, alternative="greater").pvalue
    assert binomial_test_against_chance(9, 40, 0.1) == pytest.approx(expected)


# ---------------------------------------------------------------- TOST


def test_tost_by_hand():
    # d = 0, s = 0.1 in both, se = sqrt(2 * 0.01 / 3), Welch dof = 4: t = ±0.5 / se
    r = tost([1.0, 1.1, 0.9], [1.0, 0.9, 1.1], margin=0.5)
    se = math.sqrt(2 * 0.01 / 3)
    assert r["dof"] == pytest.approx(4.0) and r["se"] == pytest.approx(se)
    assert r["p_lower"] == pytest.approx(stats.t.sf(0.5 / se, 4))
    assert r["p_upper"] == pytest.approx(stats.t.cdf(-0.5 / se, 4))
    assert r["equivalent"] and r["p_value"] == pytest.approx(0.0018, abs=1e-4)
    assert (r["ci_low"], r["ci_high"]) == pytest.approx((-stats.t.ppf(0.95, 4) * se, stats.t.ppf(0.95, 4) * se))


def test_tost_is_two_one_sided_welch_tests_of_scipy():
    rng = np.random.default_rng(6)
    x, y = rng.normal(0.1, 1.0, 8), rng.normal(0.0, 2.0, 5)
    r = tost(x, y, margin=1.5, alpha=0.1)
    lower = stats.ttest_ind(x + 1.5, y, equal_var=False, alternative="greater").pvalue  # H0: d <= -margin
    upper = stats.ttest_ind(x - 1.5, y, equal_var=False, alternative="less").pvalue  # H0: d >= margin
    assert (r["p_lower"], r["p_upper"]) == pytest.approx((lower, upper))
    assert r["p_value"] == pytest.approx(max(lower, upper))
    # equivalent exactly when the 1 - 2 alpha interval lies inside the margin
    assert r["equivalent"] == (-1.5 < r["ci_low"] and r["ci_high"] < 1.5)


def test_tost_rejects_equivalence_beyond_the_margin_and_takes_limits_without_spread():
    assert not tost([1.0, 1.1, 0.9], [1.0, 0.9, 1.1], margin=0.05)["equivalent"]
    assert not tost([1.0, 1.1, 0.9], [1.4, 1.3, 1.5], margin=0.5)["equivalent"]  # d = -0.4, CI past -0.5
    assert tost([1.0, 1.0], [1.2, 1.2], margin=0.5)["p_value"] == 0.0
    assert tost([1.0, 1.0], [2.0, 2.0], margin=0.5)["p_value"] == 1.0
    with pytest.raises(ValueError, match="positive"):
        tost([1.0, 2.0], [1.0, 2.0], margin=0.0)
    with pytest.raises(ValueError, match="2 values"):
        tost([1.0], [1.0, 2.0], margin=1.0)


# ---------------------------------------------------------------- curves


def test_area_under_curve_by_hand():
    assert area_under_curve([0.0, 1.0, 2.0, 3.0]) == 1.5  # (0.5 + 1.5 + 2.5) / 3
    assert area_under_curve([0.0, 2.0, 2.0], iterations=[0, 1, 3]) == pytest.approx(5 / 3)  # (1 + 4) / 3
    assert area_under_curve([0.7]) == 0.7
    rows = area_under_curve([[0.0, 1.0, 2.0, 3.0], [1.0, 1.0, 1.0, 1.0]])
    assert rows.tolist() == [1.5, 1.0]
    with pytest.raises(ValueError, match="increase"):
        area_under_curve([1.0, 2.0], iterations=[1, 1])


def test_area_under_curve_is_scipy_trapezoid_per_iteration():
    v, it = np.random.default_rng(7).random(9), np.cumsum(np.arange(1.0, 10.0))
    assert area_under_curve(v, it) == pytest.approx(integrate.trapezoid(v, it) / (it[-1] - it[0]))


def test_final_window_by_hand():
    assert final_window([0.0, 1.0, 2.0, 3.0], k=2) == 2.5
    assert final_window([[0.0, 1.0, 2.0], [4.0, 4.0, 7.0]], k=1).tolist() == [2.0, 7.0]
    for k in (0, 5):
        with pytest.raises(ValueError):
            final_window([0.0, 1.0, 2.0, 3.0], k=k)


# ---------------------------------------------------------------- power


def test_pooled_sd_by_hand():
    assert pooled_sd([1.0, 3.0], [0.0, 2.0, 4.0]) == pytest.approx(math.sqrt((2 + 8) / 3))


def test_power_at_23_seeds_agrees_with_simulated_welch_tests():
    d = 0.845  # with sd 1: about 80% power at 23 seeds per arm
    assert power_two_sample(d, 1.0, 23) == pytest.approx(0.80, abs=0.01)
    rng = np.random.default_rng(8)
    x, y = rng.normal(d, 1.0, (2000, 23)), rng.normal(0.0, 1.0, (2000, 23))
    simulated = (stats.ttest_ind(x, y, axis=1, equal_var=False).pvalue < 0.05).mean()
    assert simulated == pytest.approx(power_two_sample(d, 1.0, 23), abs=0.03)


def test_power_is_welchs_at_three_seeds():
    # Student's power (noncentral t on 4 dof) says 0.80 here; Welch's test, with its estimated dof, has ~0.70
    d = 3.071
    assert power_two_sample(d, 1.0, 3) == pytest.approx(0.70, abs=0.02)
    rng = np.random.default_rng(9)
    x, y = rng.normal(d, 1.0, (20000, 3)), rng.normal(0.0, 1.0, (20000, 3))
    simulated = (stats.ttest_ind(x, y, axis=1, equal_var=False).pvalue < 0.05).mean()
    assert simulated == pytest.approx(power_two_sample(d, 1.0, 3), abs=0.015)


def test_power_without_a_difference_is_at_most_alpha():
    assert power_two_sample(0.0, 1.0, 50) == pytest.approx(0.05, abs=0.002)
    assert power_two_sample(0.0, 1.0, 3) < 0.05  # Welch is conservative at few seeds
    assert power_two_sample(40.0, 1.0, 30) == pytest.approx(1.0)  # far in the tail, scipy's nct gives NaN: no NaN here


def test_seeds_for_power_matches_cohens_tables_and_is_the_fewest():
    assert [seeds_for_power(d, 1.0) for d in (0.2, 0.5, 0.8)] == [394, 64, 26]
    n = seeds_for_power(0.3, 2.0, power=0.9, alpha=0.01)
    assert power_two_sample(0.3, 2.0, n, 0.01) >= 0.9 > power_two_sample(0.3, 2.0, n - 1, 0.01)
    with pytest.raises(ValueError):
        seeds_for_power(0.0, 1.0)


def test_smallest_detectable_difference_inverts_the_power():
    m = smallest_detectable_difference(2.0, 10)
    assert power_two_sample(m, 2.0, 10) == pytest.approx(0.8, abs=1e-6)
    assert smallest_detectable_difference(1.0, 64) == pytest.approx(0.4991, abs=1e-3)
    # many seeds: the normal approximation (z_0.975 + z_0.8) sd sqrt(2 / n)
    assert smallest_detectable_difference(1.0, 2000) == pytest.approx(2.8016 * math.sqrt(2 / 2000), rel=1e-3)


# ---------------------------------------------------------------- the verdict


def test_verdict_different():
    v = verdict([1.0, 1.1, 0.9], [2.0, 2.1, 1.9], margin=0.2)
    assert v.words == str(v) == "different"
    assert v.different and not v.equivalent and v.p_value < 0.05 and v.difference == pytest.approx(-1.0)


def test_verdict_equivalent():
    v = verdict([1.0, 1.1, 0.9], [1.0, 0.9, 1.1], margin=0.5)
    assert v.words == "equivalent within +-0.5"
    assert v.equivalent and not v.different and v.p_tost < 0.05


def test_verdict_undecided_gives_power_and_smallest_detectable_difference():
    x, y = [0.0, 1.0, 2.0, 1.0, 0.5], [0.5, 1.5, 2.5, 1.0, 1.2]
    v = verdict(x, y, margin=1.0)
    sd = pooled_sd(x, y)
    assert v.pooled_sd == sd and v.seeds == (5, 5)
    assert v.power == pytest.approx(power_two_sample(1.0, sd, 5))
    assert v.smallest_detectable_difference == pytest.approx(smallest_detectable_difference(sd, 5))
    assert (
        v.words
        == f"undecided (power {v.power:.2f}, smallest detectable difference {v.smallest_detectable_difference:.3g})"
    )
    assert v.words == "undecided (power 0.44, smallest detectable difference 1.55)"


def test_verdict_unequal_seeds_use_their_harmonic_mean_and_constant_arms_decide():
    x, y = [0.0, 1.0, 2.0], [0.5, 1.5, 2.5, 1.0, 1.2, 0.2]
    assert verdict(x, y, margin=0.1).power == pytest.approx(power_two_sample(0.1, pooled_sd(x, y), 4.0))
    assert verdict([1.0, 1.0], [1.0, 1.0, 1.0], margin=0.1).words == "equivalent within +-0.1"
    assert verdict([1.0, 1.0], [2.0, 2.0], margin=0.1).words == "different"
    # significant and smaller than the margin: the words say different, ``equivalent`` says within it
    both = verdict([1.00, 1.01, 0.99, 1.0], [1.10, 1.11, 1.09, 1.1], margin=0.5)
    assert both.words == "different" and both.equivalent


def test_docstring_examples():
    assert doctest.testmod(cory_agents.evaluation.rl_statistics).failed == 0
    assert doctest.testmod(cory_agents.evaluation.decisions).failed == 0
