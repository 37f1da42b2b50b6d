"""Comparing learners over seeds: the protocol of Agarwal et al. (2021) and Gorsane et al. (2022).

A benchmark runs each learner (PPO, CORY, ...) over a few seeds, on one or several tasks. These say
how two learners compare, and how sure that is ("Deep RL at the edge of the statistical precipice",
Agarwal et al. 2021; "Towards a standardised performance evaluation protocol for cooperative MARL",
Gorsane et al. 2022). Scores come as a ``runs x tasks`` matrix per learner (a 1-D array is one task).

Aggregates with stratified bootstrap intervals:

- :func:`iqm`: the interquartile mean, robust to a few outlying seeds, less noisy than the median;
- :func:`stratified_bootstrap_ci`: percentile interval of the IQM or the mean, runs resampled within
  each task;
- :func:`probability_of_improvement`: how often a run of one learner beats a run of the other;
- :func:`performance_profile` and :func:`plot_performance_profiles`: the fraction of runs above each
  score, with bootstrap bands (a PNG).

Rates (a success rate, a pass rate) with intervals that stay inside [0, 1]:

- :func:`binomial_ci`: one seed's rate, exact (Clopper-Pearson);
- :func:`rate_ci_over_seeds`: the mean rate over seeds (a t interval on the logit scale);
- :func:`binomial_test_against_chance`: is a rate above chance (exact one-sided p).

Learning curves:

- :func:`area_under_curve` (the whole curve) and :func:`final_window` (its last ``k`` iterations):
  the scores to compare.

Whether two learners differ, are equivalent, or how many seeds would tell (equivalence tests, power,
the verdict's wording): :mod:`cory_agents.evaluation.decisions`.

Why scipy: ``rliable`` (Agarwal et al.'s library) and ``arch`` (its bootstrap) are not installed and
the project adds no dependencies for this. ``scipy.stats`` has every piece: ``bootstrap`` resamples
each of several samples independently, which with one sample per task is exactly the stratified
bootstrap; ``trim_mean(x, 0.25)`` is rliable's IQM, so the numbers match rliable's; ``binomtest``
gives the exact binomial intervals and tests.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np
from scipy import stats

from cory_agents.evaluation.statistics import mean_ci

NAN = float("nan")
Statistic = Callable[[np.ndarray], np.ndarray]


def _runs_by_task(scores) -> np.ndarray:
    """``scores`` as a float ``runs x tasks`` matrix (a 1-D array is one task)."""
    x = np.asarray(scores, dtype=np.float64)
    if x.ndim == 1:
        x = x[:, None]
    if x.ndim != 2 or x.shape[0] < 1 or x.shape[1] < 1:
        raise ValueError(f"scores must be runs or runs x tasks, got shape {x.shape}")
    return x


def iqm(x) -> float:
    """The interquartile mean: the mean of the middle 50% of all the scores.

    The ``n`` scores (all runs and tasks together) sorted, ``k = floor(n / 4)`` dropped at each end::

        IQM = mean(x_(k+1), ..., x_(n-k)) = scipy.stats.trim_mean(x, 0.25, axis=None)

    (rliable's ``aggregate_iqm``).

    Example:
        >>> iqm([1, 2, 3, 4, 5, 6, 7, 100])  # drops 1, 2 and 7, 100: mean(3, 4, 5, 6)
        4.5
    """
    return float(stats.trim_mean(np.asarray(x, dtype=np.float64), 0.25, axis=None))


# Statistics of a batch of resampled matrices (..., runs, tasks) -> (...)
STATISTICS: dict[str, Statistic] = {
    "iqm": lambda m: stats.trim_mean(m.reshape(*m.shape[:-2], -1), 0.25, axis=-1),
    "mean": lambda m: m.mean(axis=(-2, -1)),
}


def _bootstrap(data: Sequence[np.ndarray], statistic, reps: int, confidence: float, seed: int):
    """scipy's percentile bootstrap, each array of ``data`` resampled on its own (the strata)."""
    for sample in data:
        if sample.size < 2:
            raise ValueError("a bootstrap interval needs at least 2 runs per task")
    result = stats.bootstrap(
        tuple(data),
        statistic,
        n_resamples=reps,
        batch=250,  # resamples at a time: bounded memory for many runs, tasks or thresholds
        confidence_level=confidence,
        method="percentile",
        vectorized=True,
        rng=np.random.default_rng(seed),
    )
    return result.confidence_interval.low, result.confidence_interval.high


def stratified_bootstrap_ci(
    scores, statistic: str | Statistic = "iqm", reps: int = 2000, confidence: float = 0.95, seed: int = 0
) -> tuple[float, float, float]:
    """``(estimate, low, high)``: an aggregate of ``runs x tasks`` scores and its stratified bootstrap interval.

    Each of ``reps`` resamples draws, for every task ``t`` separately, ``n`` runs with replacement
    from that task's ``n`` runs, and computes the statistic on the resampled matrix ``X*``::

        low, high = quantiles (1 - c) / 2 and (1 + c) / 2 of {statistic(X*_b)}_{b = 1..reps}

    (the percentile interval, ``c = confidence``; Agarwal et al.'s stratified bootstrap: the tasks
    stay fixed, only the runs vary). ``statistic`` is ``"iqm"``, ``"mean"``, or a function of an
    array ``(..., runs, tasks) -> (...)``. The same ``seed`` gives the same interval.

    Example:
        >>> stratified_bootstrap_ci([[0.0, 10.0], [0.0, 10.0]], "mean")  # each task constant: no spread
        (5.0, 5.0, 5.0)
    """
    x = _runs_by_task(scores)
    fn = STATISTICS[statistic] if isinstance(statistic, str) else statistic
    low, high = _bootstrap(list(x.T), lambda *tasks, axis=-1: fn(np.stack(tasks, axis=-1)), reps, confidence, seed)
    return float(fn(x)), float(low), float(high)


def _improvement(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``P(X > Y) + 0.5 P(X = Y)`` over the last axes of ``x (..., n)`` and ``y (..., m)``."""
    a, b = x[..., :, None], y[..., None, :]
    return (a > b).mean(axis=(-2, -1)) + 0.5 * (a == b).mean(axis=(-2, -1))


def probability_of_improvement(
    x, y, reps: int = 2000, confidence: float = 0.95, seed: int = 0
) -> tuple[float, float, float]:
    """``(estimate, low, high)``: the probability that a run of ``x`` scores above a run of ``y``.

    Per task ``t``, over the ``n`` runs of ``x`` and ``m`` runs of ``y``, then averaged over the ``T`` tasks::

        P_t = (1 / (n m)) sum_i sum_j ( [x_it > y_jt] + 0.5 [x_it = y_jt] ) = U_t / (n m)
        P(X > Y) = (1 / T) sum_t P_t

    ``U_t`` is the Mann-Whitney U statistic of ``x`` (``scipy.stats.mannwhitneyu(x, y).statistic``).
    ``P > 0.5``: ``x`` tends to do better. The interval is the stratified bootstrap's (each task's
    runs of ``x`` and of ``y`` resampled on their own).

    Example:
        >>> p, low, high = probability_of_improvement([1.0, 2.0, 3.0], [2.0, 2.0, 0.0])
        >>> round(p, 4)  # U = 1 + (0.5 + 0.5 + 1) + 3 = 6 of 9 pairs
        0.6667
    """
    a, b = _runs_by_task(x), _runs_by_task(y)
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"x and y must have the same tasks, got {a.shape[1]} and {b.shape[1]}")
    tasks = a.shape[1]

    def statistic(*samples, axis=-1):
        return np.mean([_improvement(samples[t], samples[tasks + t]) for t in range(tasks)], axis=0)

    low, high = _bootstrap([*a.T, *b.T], statistic, reps, confidence, seed)
    return float(statistic(*a.T, *b.T)), float(low), float(high)


def performance_profile(
    scores_by_arm: Mapping[str, object], thresholds, reps: int = 2000, confidence: float = 0.95, seed: int = 0
) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """arm -> ``(profile, low, high)``: the fraction of scores above each threshold, with bootstrap bands.

    For the ``runs x tasks`` scores of an arm, at each threshold ``tau``::

        F(tau) = (1 / (n T)) sum_t sum_i [x_it > tau]

    (Agarwal et al.'s run-score distribution; a curve above another everywhere dominates it). The
    bands are the stratified bootstrap's percentile intervals, threshold by threshold.

    Example:
        >>> profile, low, high = performance_profile({"PPO": [1, 2, 3, 4]}, [0, 2.5, 4])["PPO"]
        >>> profile.tolist()
        [1.0, 0.5, 0.0]
    """
    tau = np.asarray(thresholds, dtype=np.float64)

    def profile(m: np.ndarray) -> np.ndarray:  # (..., runs, tasks) -> (thresholds, ...)
        return np.moveaxis((m[..., None] > tau).mean(axis=(-3, -2)), -1, 0)

    result = {}
    for arm, scores in scores_by_arm.items():
        x = _runs_by_task(scores)
        low, high = _bootstrap(
            list(x.T), lambda *tasks, axis=-1: profile(np.stack(tasks, axis=-1)), reps, confidence, seed
        )
        result[arm] = (profile(x), np.asarray(low, dtype=np.float64), np.asarray(high, dtype=np.float64))
    return result


def plot_performance_profiles(
    scores_by_arm: Mapping[str, object],
    thresholds,
    path: str | Path,
    reps: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
    xlabel: str = "score",
    title: str = "performance profiles",
) -> Path:
    """Write the :func:`performance_profile` of each arm to ``path`` (a PNG): one line per arm, its band shaded.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     p = plot_performance_profiles({"PPO": [1, 2, 3], "CORY": [2, 3, 4]}, [0, 2, 4], f"{d}/p.png", reps=50)
        ...     p.read_bytes()[:4]
        b'\\x89PNG'
    """
    from matplotlib.figure import Figure

    from cory_agents.training.plots import save_figure  # pandas and the training package: only when drawing

    tau = np.asarray(thresholds, dtype=np.float64)
    fig = Figure(figsize=(6, 4))
    ax = fig.subplots()
    for arm, (profile, low, high) in performance_profile(scores_by_arm, tau, reps, confidence, seed).items():
        (line,) = ax.plot(tau, profile, label=arm)
        ax.fill_between(tau, low, high, color=line.get_color(), alpha=0.2, linewidth=0)
    ax.set(xlabel=xlabel, ylabel=r"fraction of runs with score $> \tau$", title=title, ylim=(-0.02, 1.02))
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    return save_figure(fig, path)


def binomial_ci(successes: int, trials: int, confidence: float = 0.95) -> tuple[float, float, float]:
    """``(rate, low, high)``: a rate of ``successes / trials`` and its exact (Clopper-Pearson) interval.

    With ``a = 1 - confidence``, ``k`` successes of ``n`` and ``B(q; a, b)`` the Beta quantile::

        low  = B(a / 2; k, n - k + 1)          (0 when k = 0)
        high = B(1 - a / 2; k + 1, n - k)      (1 when k = n)

    (``scipy.stats.binomtest(k, n).proportion_ci(confidence, method="exact")``). It never leaves
    [0, 1] and covers at least ``confidence`` whatever the rate.

    Example:
        >>> rate, low, high = binomial_ci(0, 10)  # high = 1 - 0.025^(1/10)
        >>> rate, low, round(high, 4)
        (0.0, 0.0, 0.3085)
    """
    if trials < 1 or not 0 <= successes <= trials:
        raise ValueError(f"binomial_ci needs 0 <= successes <= trials and trials >= 1, got {successes}/{trials}")
    ci = stats.binomtest(int(successes), int(trials)).proportion_ci(confidence, method="exact")
    return successes / trials, float(ci.low), float(ci.high)


def rate_ci_over_seeds(
    rates: Sequence[float], confidence: float = 0.95, trials: int | Sequence[int] | None = None
) -> tuple[float, float, float]:
    """``(mean, low, high)``: the mean of per-seed rates and an interval inside [0, 1].

    The Student t interval of the mean (seed-to-seed spread, ``n - 1`` degrees of freedom), taken on
    the logit scale (delta method) and mapped back::

        p = mean(rates),  se = s / sqrt(n),  L = logit(p) = log(p / (1 - p))
        low, high = expit(L -+ t_{(1 + c) / 2, n - 1} * se / (p (1 - p)))

    It stays inside (0, 1), is lopsided near 0 and 1 as a rate's uncertainty is, and near ``p = 0.5``
    is the plain t interval. Why not the bootstrap: with the 3 to 10 seeds of a benchmark, the
    percentile bootstrap of a mean is far too narrow (normal quantiles and a ``sqrt((n - 1) / n)``
    spread: at ``n = 3`` about 0.37 times the t interval's width). Why not the mean of the seeds'
    logits: a single seed at 0 or 1 makes it infinite. Where the spread says nothing (one seed, or
    every seed the same rate, as every rate 0) and ``trials`` (per seed, or one count for all) is
    given, the interval is :func:`binomial_ci` of the pooled counts; without ``trials`` it is NaN.

    Example:
        >>> [round(v, 4) for v in rate_ci_over_seeds([0.4, 0.6])]  # expit(±12.706 * 0.1 / 0.25)
        [0.5, 0.0062, 0.9938]
        >>> rate_ci_over_seeds([0.0, 0.0], trials=10)[2] == binomial_ci(0, 20)[2]
        True
    """
    p = np.asarray(rates, dtype=np.float64)
    if p.ndim != 1 or p.size == 0 or not ((p >= 0) & (p <= 1)).all():
        raise ValueError(f"rate_ci_over_seeds needs rates in [0, 1], got {rates}")
    mean, low, high = mean_ci(p, confidence)
    if 0 < mean < 1 and high > low:
        half = (high - mean) / (mean * (1 - mean))
        centre = math.log(mean / (1 - mean))
        return mean, float(stats.logistic.cdf(centre - half)), float(stats.logistic.cdf(centre + half))
    if trials is None:
        return mean, NAN, NAN
    n = np.broadcast_to(np.asarray(trials, dtype=np.int64), p.shape)
    _, low, high = binomial_ci(int(np.rint(p * n).sum()), int(n.sum()), confidence)
    return mean, low, high


def binomial_test_against_chance(successes: int, trials: int, chance: float) -> float:
    """The exact one-sided p-value that ``successes`` of ``trials`` is above ``chance``.

    ``p = P(K >= k) = sum_{j = k}^{n} C(n, j) chance^j (1 - chance)^(n - j)``, ``K ~ Binomial(n, chance)``
    (``scipy.stats.binomtest(k, n, chance, alternative="greater").pvalue``).

    Example:
        >>> binomial_test_against_chance(7, 10, 0.5)  # (120 + 45 + 10 + 1) / 1024
        0.171875
    """
    return float(stats.binomtest(int(successes), int(trials), chance, alternative="greater").pvalue)


def area_under_curve(values, iterations: Sequence[float] | None = None) -> float | np.ndarray:
    """The area under a learning curve per iteration: the curve's mean height (trapezoid rule).

    Over the last axis (one curve, or one per row: seeds x iterations), iterations ``i_1 < ... < i_T``
    (``0 .. T - 1`` by default)::

        AUC = (1 / (i_T - i_1)) sum_{k=1}^{T-1} (i_{k+1} - i_k) (v_k + v_{k+1}) / 2

    It rewards learning early as well as ending high, where :func:`final_window` sees only the end.
    One iteration: its value.

    Example:
        >>> area_under_curve([0.0, 1.0, 2.0, 3.0])  # 4.5 / 3
        1.5
    """
    v = np.asarray(values, dtype=np.float64)
    if v.ndim < 1 or v.shape[-1] < 1:
        raise ValueError("area_under_curve needs at least one value")
    it = np.arange(v.shape[-1], dtype=np.float64) if iterations is None else np.asarray(iterations, np.float64)
    if it.shape != v.shape[-1:] or (np.diff(it) <= 0).any():
        raise ValueError(f"iterations must increase, one per value: {it.shape} for {v.shape}")
    auc = v[..., 0] if it.size == 1 else np.trapezoid(v, it, axis=-1) / (it[-1] - it[0])
    return float(auc) if v.ndim == 1 else auc


def final_window(values, k: int) -> float | np.ndarray:
    """The mean of the last ``k`` values of a curve (over the last axis): ``(1 / k) sum_{j=T-k+1}^{T} v_j``.

    Example:
        >>> final_window([0.0, 1.0, 2.0, 3.0], k=2)
        2.5
    """
    v = np.asarray(values, dtype=np.float64)
    if v.ndim < 1 or not 1 <= k <= v.shape[-1]:
        raise ValueError(f"final_window needs 1 <= k <= {v.shape[-1] if v.ndim else 0} values, got k={k}")
    mean = v[..., -k:].mean(axis=-1)
    return float(mean) if v.ndim == 1 else mean


def aligned_window(window: int, period: int, iterations: int) -> int:
    """The final window, never cut by a role exchange: with roles exchanged every ``period`` iterations,
    ``window`` rounded up to a multiple of ``2 period`` (at most ``iterations``). Any ``2 k period``
    consecutive iterations hold ``k period`` of each arrangement, wherever they end: a window of the last
    5 iterations of a period-5 run may be the first block after a swap, one of 10 is both arrangements
    alike. ``period`` 0 (or not below ``iterations``): no exchange in the runs, ``window`` as given.

    >>> aligned_window(5, 5, 40), aligned_window(1, 5, 40), aligned_window(12, 5, 40), aligned_window(5, 0, 40)
    (10, 10, 20, 5)
    """
    if not 0 < period < iterations:
        return window
    return min(-(-window // (2 * period)) * 2 * period, iterations)
