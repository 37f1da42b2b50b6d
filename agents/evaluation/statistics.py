"""Uncertainty over seeds and batches: t intervals, Welch's test, the reward-rise criterion.

A benchmark runs a few seeds per algorithm; these say how sure its means are.

Confidence interval of a mean over ``n`` seeds (Student t, ``n - 1`` degrees of freedom)::

    mean ± t_{(1 + level) / 2, n - 1} * s / sqrt(n)          s: sample std (ddof = 1)

Welch's t-test of two means with unequal variances (``v = s^2 / n`` per sample)::

    d   = mean(a) - mean(b),   se = sqrt(v_a + v_b),   t = d / se
    dof = (v_a + v_b)^2 / (v_a^2 / (n_a - 1) + v_b^2 / (n_b - 1))       (Welch-Satterthwaite)
    p   = 2 * P(T_dof > |t|),  CI = d ± t_{0.975, dof} * se

Did training raise the reward? Compare the first and the last ``k`` iterations of one run;
each iteration's mean over a batch of ``B`` answers has variance ``std_i^2 / B``::

    difference = mean(last k means) - mean(first k means)
    se         = sqrt(sum_{first k} std_i^2 / (k^2 B) + sum_{last k} std_i^2 / (k^2 B))
    z          = difference / se                   (the project's criterion: z >= 2)
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import stats

NAN = float("nan")


def mean_ci(values: Sequence[float], level: float = 0.95) -> tuple[float, float, float]:
    """``(mean, low, high)``: the mean and its Student-t confidence interval.

    ``mean ± t_{(1 + level) / 2, n - 1} * s / sqrt(n)``, ``s`` the sample std (ddof = 1).
    One value has no interval: ``(value, nan, nan)``. A NaN among the values gives NaNs.

    Example:
        >>> [round(x, 4) for x in mean_ci([1.0, 2.0, 3.0])]  # s = 1, t_{0.975, 2} = 4.3027
        [2.0, -0.4841, 4.4841]
        >>> mean_ci([0.5])
        (0.5, nan, nan)
    """
    x = np.asarray(values, dtype=np.float64)
    if x.size == 0:
        raise ValueError("mean_ci needs at least one value")
    mean = float(x.mean())
    if x.size < 2:
        return mean, NAN, NAN
    half = float(stats.t.ppf((1 + level) / 2, x.size - 1)) * _sample_std(x) / math.sqrt(x.size)
    return mean, mean - half, mean + half


def _sample_std(x: np.ndarray) -> float:
    """The std with ddof = 1, of ``x - x[0]``: a constant sample has exactly 0, not a rounding error."""
    return float((x - x[0]).std(ddof=1))


def welch_test(a: Sequence[float], b: Sequence[float], level: float = 0.95) -> dict[str, float]:
    """Welch's t-test of ``mean(a) - mean(b)``: ``difference``, ``t``, ``dof``, ``p_value``, ``ci_low``, ``ci_high``.

    ``p_value`` is two-sided; ``ci_low``/``ci_high`` bound the difference at ``level`` with the
    Welch-Satterthwaite ``dof``. Nothing can be tested with fewer than 2 values in a sample,
    or with zero variance in both (``se = 0``): then everything but ``difference`` is NaN,
    not an exception. A NaN among the values gives NaNs.

    Example:
        >>> r = welch_test([1.0, 3.0], [0.0, 0.0])  # d = 2, se = 1, dof = 1: p = 1 - 2 atan(2) / pi
        >>> r["difference"], r["t"], r["dof"], round(r["p_value"], 4)
        (2.0, 2.0, 1.0, 0.2952)
    """
    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    difference = float(x.mean() - y.mean()) if x.size and y.size else NAN
    result = {"difference": difference, "t": NAN, "dof": NAN, "p_value": NAN, "ci_low": NAN, "ci_high": NAN}
    if x.size < 2 or y.size < 2:
        return result
    va, vb = _sample_std(x) ** 2 / x.size, _sample_std(y) ** 2 / y.size
    if not va + vb > 0:  # both constant (or NaN): no spread to test against
        return result
    se = math.sqrt(va + vb)
    dof = float((va + vb) ** 2 / (va**2 / (x.size - 1) + vb**2 / (y.size - 1)))
    t = difference / se
    half = float(stats.t.ppf((1 + level) / 2, dof)) * se
    result.update(
        t=t, dof=dof, p_value=float(2 * stats.t.sf(abs(t), dof)), ci_low=difference - half, ci_high=difference + half
    )
    return result


def reward_rise(means: Sequence[float], stds: Sequence[float], batch_size: int, k: int = 3) -> dict[str, float]:
    """How far the reward of one run rose: ``first``, ``last``, ``difference``, ``se``, ``z``.

    ``first``/``last`` are the means of the first/last ``k`` iteration means, ``difference =
    last - first``, ``se = sqrt(sum_{first k} std_i^2 / (k^2 B) + sum_{last k} std_i^2 / (k^2 B))``
    its standard error from the batches' reward std (``B = batch_size`` answers per
    iteration), ``z = difference / se``: ``z >= 2`` counts as a rise. With ``se = 0`` (every
    batch constant) ``z`` is ``±inf``, or NaN when the difference is 0 too.

    Example:
        >>> r = reward_rise([0.1, 0.2, 0.5, 0.6], [0.2, 0.2, 0.2, 0.2], batch_size=8, k=2)
        >>> round(r["difference"], 4), r["se"], round(r["z"], 4)  # se = sqrt(4 * 0.04 / (4 * 8))
        (0.4, 0.07071067811865477, 5.6569)
    """
    m, s = np.asarray(means, dtype=np.float64), np.asarray(stds, dtype=np.float64)
    if m.shape != s.shape or m.ndim != 1:
        raise ValueError(f"reward_rise needs one std per iteration mean, got {m.shape} means and {s.shape} stds")
    if k < 1 or m.size < 2 * k:
        raise ValueError(
            f"reward_rise compares the first and last k={k} iterations: needs at least {2 * k}, got {m.size}"
        )
    first, last = float(m[:k].mean()), float(m[-k:].mean())
    se = math.sqrt(float((s[:k] ** 2).sum() + (s[-k:] ** 2).sum()) / (k**2 * batch_size))
    difference = last - first
    with np.errstate(divide="ignore", invalid="ignore"):
        z = float(np.float64(difference) / np.float64(se))
    return {"first": first, "last": last, "difference": difference, "se": se, "z": z}
