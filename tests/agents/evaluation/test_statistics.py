"""cory_agents.evaluation.statistics against hand-computed cases: t intervals, Welch's test, the reward rise.

The t quantiles used by hand have closed forms: with 1 degree of freedom T is Cauchy,
t_p = tan(pi (p - 1/2)); with 2, F(t) = 1/2 + t / (2 sqrt(t^2 + 2)), so t_p = a sqrt(2 / (1 - a^2))
with a = 2p - 1.
"""

from __future__ import annotations

import doctest
import math

import pytest
from scipy import stats

import cory_agents.evaluation.statistics
from cory_agents.evaluation.statistics import mean_ci, reward_rise, welch_test

T_975_DOF1 = math.tan(0.475 * math.pi)  # 12.7062
T_975_DOF2 = 0.95 * math.sqrt(2 / (1 - 0.95**2))  # 4.3027


# ---------------------------------------------------------------- mean_ci


def test_mean_ci_two_values_by_hand():
    # [1, 3]: mean 2, s = sqrt(2), s / sqrt(2) = 1, so 2 ± t_{0.975, 1} = 2 ± 12.7062
    mean, low, high = mean_ci([1.0, 3.0])
    assert (mean, low, high) == pytest.approx((2.0, 2.0 - T_975_DOF1, 2.0 + T_975_DOF1))
    assert low == pytest.approx(-10.7062, abs=1e-4)
    # level 0.5: t_{0.75, 1} = tan(pi / 4) = 1, so 2 ± 1
    assert mean_ci([1.0, 3.0], level=0.5) == pytest.approx((2.0, 1.0, 3.0))


def test_mean_ci_three_values_by_hand():
    # [1, 2, 3]: mean 2, s = 1, half width = t_{0.975, 2} / sqrt(3) = 4.3027 / 1.7321 = 2.4841
    mean, low, high = mean_ci([1.0, 2.0, 3.0])
    assert mean == 2.0
    assert high - mean == pytest.approx(T_975_DOF2 / math.sqrt(3))
    assert (low, high) == pytest.approx((-0.4841, 4.4841), abs=1e-4)


def test_mean_ci_degenerate_cases():
    mean, low, high = mean_ci([0.7])  # one seed: no interval
    assert mean == 0.7 and math.isnan(low) and math.isnan(high)
    assert mean_ci([0.25, 0.25, 0.25]) == (0.25, 0.25, 0.25)  # no spread: the interval is the point
    assert all(math.isnan(v) for v in mean_ci([1.0, float("nan")]))
    with pytest.raises(ValueError, match="at least one value"):
        mean_ci([])


# ---------------------------------------------------------------- welch_test


def test_welch_one_dof_against_a_number_worked_out():
    # a = [1, 3]: mean 2, v_a = s^2 / n = 2 / 2 = 1; b = [0, 0]: mean 0, v_b = 0.
    # d = 2, se = 1, t = 2, dof = 1^2 / (1^2 / 1) = 1: Cauchy, P(T > 2) = 1/2 - atan(2) / pi,
    # p = 1 - 2 atan(2) / pi = 1 - 2 * 1.10715 / 3.14159 = 0.29517; CI = 2 ± 12.7062 * 1
    r = welch_test([1.0, 3.0], [0.0, 0.0])
    assert (r["difference"], r["t"], r["dof"]) == pytest.approx((2.0, 2.0, 1.0))
    assert r["p_value"] == pytest.approx(0.2951672353, abs=1e-9)
    assert (r["ci_low"], r["ci_high"]) == pytest.approx((2.0 - T_975_DOF1, 2.0 + T_975_DOF1))


def test_welch_two_dof_by_hand():
    # a = [0, 2, 4]: mean 2, s^2 = 4, v_a = 4/3; b = [1, 1, 1]: v_b = 0; d = 1, dof = 2,
    # t = 1 / sqrt(4/3) = sqrt(3)/2; two-sided p = 1 - t / sqrt(t^2 + 2) = 1 - sqrt(3/11) = 0.47777
    r = welch_test([0.0, 2.0, 4.0], [1.0, 1.0, 1.0])
    assert r["dof"] == pytest.approx(2.0)
    assert r["t"] == pytest.approx(math.sqrt(3) / 2)
    assert r["p_value"] == pytest.approx(1 - math.sqrt(3 / 11))
    assert r["ci_high"] - r["difference"] == pytest.approx(T_975_DOF2 * math.sqrt(4 / 3))


def test_welch_unequal_sizes_and_variances_from_the_formula():
    a, b = [0.1, 0.4, 0.35, 0.2], [0.5, 0.45, 0.7]
    # means 0.2625 and 0.55, d = -0.2875
    # v_a = (0.1625^2 + 0.1375^2 + 0.0875^2 + 0.0625^2) / 3 / 4 = 0.056875 / 12 = 0.00473958
    # v_b = (0.05^2 + 0.1^2 + 0.15^2) / 2 / 3 = 0.035 / 6 = 0.00583333
    # dof = (v_a + v_b)^2 / (v_a^2 / 3 + v_b^2 / 2) = 1.11786e-4 / 2.45018e-5 = 4.5624
    va, vb = 0.056875 / 12, 0.035 / 6
    se = math.sqrt(va + vb)
    dof = (va + vb) ** 2 / (va**2 / 3 + vb**2 / 2)
    t = -0.2875 / se
    r = welch_test(a, b)
    assert r["difference"] == pytest.approx(-0.2875)
    assert r["dof"] == pytest.approx(dof) and r["dof"] == pytest.approx(4.5624, abs=1e-4)
    assert r["t"] == pytest.approx(t) and r["t"] == pytest.approx(-2.7960, abs=1e-4)
    assert r["p_value"] == pytest.approx(2 * stats.t.sf(abs(t), dof))
    assert r["ci_low"] == pytest.approx(-0.2875 - stats.t.ppf(0.975, dof) * se)
    # and scipy's own Welch test agrees
    expected = stats.ttest_ind(a, b, equal_var=False)
    assert (r["t"], r["p_value"]) == pytest.approx((expected.statistic, expected.pvalue))
    swapped = welch_test(b, a)  # the other way round: the same test, mirrored
    assert swapped["difference"] == pytest.approx(0.2875) and swapped["p_value"] == pytest.approx(r["p_value"])
    assert (swapped["ci_low"], swapped["ci_high"]) == pytest.approx((-r["ci_high"], -r["ci_low"]))


@pytest.mark.parametrize(
    "a, b, difference",
    [([1.0], [0.0, 1.0], 0.5), ([1.0, 2.0], [3.0], -1.5), ([0.5, 0.5], [0.2, 0.2, 0.2], 0.3), ([], [1.0, 2.0], None)],
)
def test_welch_untestable_samples_give_nan_not_an_exception(a, b, difference):
    r = welch_test(a, b)
    assert math.isnan(r["difference"]) if difference is None else r["difference"] == pytest.approx(difference)
    assert all(math.isnan(r[k]) for k in ("t", "dof", "p_value", "ci_low", "ci_high"))


# ---------------------------------------------------------------- reward_rise


def test_reward_rise_by_hand():
    # k = 3, B = 4: first = (0 + 0.1 + 0.2) / 3 = 0.1, last = (0.7 + 0.8 + 0.9) / 3 = 0.8, difference 0.7;
    # se^2 = (3 * 0.3^2 + 3 * 0.6^2) / (3^2 * 4) = (0.27 + 1.08) / 36 = 0.0375, se = 0.19365, z = 3.6148.
    # The middle iteration's std (100) is in neither window.
    means = [0.0, 0.1, 0.2, 0.3, 0.7, 0.8, 0.9]
    stds = [0.3, 0.3, 0.3, 100.0, 0.6, 0.6, 0.6]
    r = reward_rise(means, stds, batch_size=4)
    assert (r["first"], r["last"], r["difference"]) == pytest.approx((0.1, 0.8, 0.7))
    assert r["se"] == pytest.approx(math.sqrt(0.0375))
    assert r["z"] == pytest.approx(3.6148, abs=1e-4)


def test_reward_rise_se_falls_with_the_batch_and_the_sign_follows_the_curve():
    # k = 1: se = sqrt((0.5^2 + 0.5^2) / B); B = 2 -> 0.5, B = 200 -> 0.05
    assert reward_rise([1.0, 0.0], [0.5, 0.5], batch_size=2, k=1) == pytest.approx(
        {"first": 1.0, "last": 0.0, "difference": -1.0, "se": 0.5, "z": -2.0}
    )
    assert reward_rise([1.0, 0.0], [0.5, 0.5], batch_size=200, k=1)["z"] == pytest.approx(-20.0)
    flat = reward_rise([0.3, 0.5], [0.0, 0.0], batch_size=8, k=1)  # constant batches: se = 0
    assert flat["se"] == 0.0 and flat["z"] == math.inf
    assert math.isnan(reward_rise([0.3, 0.3], [0.0, 0.0], batch_size=8, k=1)["z"])


def test_reward_rise_needs_two_windows():
    with pytest.raises(ValueError, match="k=3 iterations: needs at least 6, got 5"):
        reward_rise([0.0] * 5, [1.0] * 5, batch_size=8)
    with pytest.raises(ValueError, match="one std per iteration mean"):
        reward_rise([0.0] * 6, [1.0] * 5, batch_size=8)


def test_docstring_examples():
    assert doctest.testmod(cory_agents.evaluation.statistics).failed == 0
