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

Tests, learning curves and power:

- :func:`tost`: equivalence within ±margin (two one-sided Welch tests), the margin declared before
  the runs; :func:`verdict`: one of three wordings, "different", "equivalent within +-d" or
  "undecided (power p, smallest detectable difference m)";
- :func:`area_under_curve` (the whole curve) and :func:`final_window` (its last ``k`` iterations):
  the scores to compare;
- :func:`pooled_sd`, :func:`power_two_sample`, :func:`seeds_for_power`,
  :func:`smallest_detectable_difference`: how many seeds a difference needs.

Why scipy: ``rliable`` (Agarwal et al.'s library) and ``arch`` (its bootstrap) are not installed and
the project adds no dependencies for this. ``scipy.stats`` has every piece: ``bootstrap`` resamples
each of several samples independently, which with one sample per task is exactly the stratified
bootstrap; ``trim_mean(x, 0.25)`` is rliable's IQM, so the numbers match rliable's; ``binomtest``
gives the exact binomial intervals and tests; ``nct`` and ``roots_jacobi`` the power of Welch's test. Welch's test itself is
:func:`~cory_agents.evaluation.statistics.welch_test`, reused here.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy import optimize, special, stats

from cory_agents.evaluation.statistics import _sample_std, mean_ci, welch_test

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


def tost(x: Sequence[float], y: Sequence[float], margin: float, alpha: float = 0.05) -> dict[str, float]:
    """Equivalence of two means within ``±margin``: two one-sided Welch tests (TOST).

    With Welch's ``d = mean(x) - mean(y)``, ``se = sqrt(s_x^2 / n_x + s_y^2 / n_y)`` and
    Welch-Satterthwaite ``dof`` (as :func:`~cory_agents.evaluation.statistics.welch_test`)::

        p_lower = P(T_dof > (d + margin) / se)     H0: d <= -margin
        p_upper = P(T_dof < (d - margin) / se)     H0: d >= +margin
        p_value = max(p_lower, p_upper);  equivalent = p_value < alpha

    which is the ``1 - 2 alpha`` interval ``d ± t_{1 - alpha, dof} se`` (``ci_low``, ``ci_high``) lying
    inside ``(-margin, margin)``. The margin is declared before the runs, never read off them. Both
    arms constant (``se = 0``): each one-sided p is its limit, 0 or 1.

    Example:
        >>> r = tost([1.0, 1.1, 0.9], [1.0, 0.9, 1.1], margin=0.5)
        >>> r["difference"], r["equivalent"], round(r["p_value"], 4)  # t = ±0.5 / 0.0816 on 4 dof
        (0.0, True, 0.0018)
    """
    a, b = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if not margin > 0:
        raise ValueError(f"the equivalence margin must be positive, got {margin}")
    if a.size < 2 or b.size < 2:
        raise ValueError(f"tost needs at least 2 values per arm, got {a.size} and {b.size}")
    d = float(a.mean() - b.mean())
    se = math.sqrt(_sample_std(a) ** 2 / a.size + _sample_std(b) ** 2 / b.size)
    dof = welch_test(a, b)["dof"]
    if se > 0:
        p_lower = float(stats.t.sf((d + margin) / se, dof))
        p_upper = float(stats.t.cdf((d - margin) / se, dof))
        half = float(stats.t.ppf(1 - alpha, dof)) * se
    else:  # both arms constant: the limits as se -> 0
        p_lower, p_upper, half = float(not d > -margin), float(not d < margin), 0.0
    p_value = max(p_lower, p_upper)
    return {
        "difference": d,
        "se": se,
        "dof": dof,
        "margin": margin,
        "p_lower": p_lower,
        "p_upper": p_upper,
        "p_value": p_value,
        "ci_low": d - half,
        "ci_high": d + half,
        "equivalent": bool(p_value < alpha),
    }


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


def pooled_sd(x: Sequence[float], y: Sequence[float]) -> float:
    """The pooled standard deviation: ``sqrt(((n_x - 1) s_x^2 + (n_y - 1) s_y^2) / (n_x + n_y - 2))``.

    Example:
        >>> pooled_sd([1.0, 3.0], [0.0, 2.0, 4.0])  # sqrt((2 + 8) / 3)
        1.8257418583505538
    """
    a, b = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if a.size + b.size < 3:
        raise ValueError("pooled_sd needs at least 3 values in all")
    ss = (a.size - 1) * _sample_std(a) ** 2 if a.size > 1 else 0.0
    ss += (b.size - 1) * _sample_std(b) ** 2 if b.size > 1 else 0.0
    return math.sqrt(ss / (a.size + b.size - 2))


def power_two_sample(d: float, sd: float, n: float, alpha: float = 0.05) -> float:
    """The power of Welch's two-sided test to detect a difference ``d`` with ``n`` seeds per arm of std ``sd``.

    With equal ``n`` Welch's statistic is Student's, ``T' ~`` noncentral t with ``2 n - 2`` degrees of
    freedom and noncentrality ``lambda = |d| / (sd sqrt(2 / n))``; only its critical value differs,
    from the dof that Welch estimates, ``nu(B) = (n - 1) / (B^2 + (1 - B)^2)`` with
    ``B = s_x^2 / (s_x^2 + s_y^2) ~ Beta((n - 1) / 2, (n - 1) / 2)``, independent of ``T'``::

        power = E_B[ P(T' > t_{1 - alpha / 2, nu(B)}) + P(T' < -t_{1 - alpha / 2, nu(B)}) ]

    the expectation by 40-point Gauss-Jacobi quadrature: exact for normal scores with equal sds
    (the noncentral t with ``2 n - 2`` dof alone, Student's power, says 0.80 where Welch's is 0.70 at
    3 seeds per arm). ``n`` may be fractional: with unequal arms, their harmonic mean (then approximate).

    Example:
        >>> round(power_two_sample(0.5, 1.0, 64), 3)  # Cohen's medium effect: 64 per arm for 80%
        0.801
    """
    if n < 2:
        raise ValueError(f"a two-sample t test needs at least 2 seeds per arm, got {n}")
    if sd == 0:
        return 1.0 if d != 0 else alpha
    x, w = special.roots_jacobi(40, (n - 3) / 2, (n - 3) / 2)  # weight (1 - x)^a (1 + x)^a, B = (1 + x) / 2
    b = (1 + x) / 2
    critical = stats.t.ppf(1 - alpha / 2, (n - 1) / (b**2 + (1 - b) ** 2))
    ncp = abs(d) / (sd * math.sqrt(2 / n))
    upper = stats.nct.sf(critical, 2 * n - 2, ncp)
    lower = np.nan_to_num(stats.nct.cdf(-critical, 2 * n - 2, ncp))  # NaN far in the tail (ncp > ~30): ~0
    return float(np.clip(w @ (upper + lower) / w.sum(), 0.0, 1.0))


def seeds_for_power(d: float, sd: float, power: float = 0.8, alpha: float = 0.05) -> int:
    """The fewest seeds per arm (at least 2) for :func:`power_two_sample` to reach ``power``.

    Starts from the normal approximation ``n = 2 (z_{1 - alpha / 2} + z_power)^2 sd^2 / d^2``
    and steps to the smallest ``n`` whose noncentral-t power reaches ``power``.

    Example:
        >>> seeds_for_power(0.5, 1.0), seeds_for_power(0.8, 1.0)  # Cohen's tables: 64 and 26
        (64, 26)
    """
    if d == 0:
        raise ValueError("no number of seeds detects a difference of 0")
    if sd == 0:
        return 2
    z = stats.norm.ppf(1 - alpha / 2) + stats.norm.ppf(power)
    n = max(2, math.ceil(2 * (z * sd / d) ** 2))
    while power_two_sample(d, sd, n, alpha) < power:
        n += 1
    while n > 2 and power_two_sample(d, sd, n - 1, alpha) >= power:
        n -= 1
    return n


def smallest_detectable_difference(sd: float, n: float, power: float = 0.8, alpha: float = 0.05) -> float:
    """The difference ``m`` that ``n`` seeds per arm detect with probability ``power``.

    The root of ``power_two_sample(m, sd, n, alpha) = power`` (Brent's method); about
    ``(z_{1 - alpha / 2} + z_power) sd sqrt(2 / n)`` for many seeds.

    Example:
        >>> round(smallest_detectable_difference(1.0, 64), 3)
        0.499
    """
    if sd == 0:
        return 0.0
    high = sd
    while power_two_sample(high, sd, n, alpha) < power:
        high *= 2
    return float(optimize.brentq(lambda m: power_two_sample(m, sd, n, alpha) - power, 0.0, high))


@dataclass(frozen=True)
class Verdict:
    """What :func:`verdict` found: ``words`` and the numbers behind them (``str()`` gives the words)."""

    words: str
    difference: float  # mean(x) - mean(y)
    p_value: float  # Welch's two-sided test of equal means
    p_tost: float  # the larger of the two one-sided p-values of the equivalence test
    different: bool
    equivalent: bool
    margin: float
    alpha: float
    pooled_sd: float
    seeds: tuple[int, int]
    power: float  # of Welch's test, for a difference of ``margin``, with these seeds
    smallest_detectable_difference: float  # at ``target_power``, with these seeds

    def __str__(self) -> str:
        return self.words


def verdict(
    x: Sequence[float], y: Sequence[float], margin: float, alpha: float = 0.05, target_power: float = 0.8
) -> Verdict:
    """One of three wordings for two learners' scores over seeds (``x``, ``y``: one score per seed).

    - ``"different"``: Welch's test rejects equal means at ``alpha`` (two-sided);
    - ``"equivalent within +-{margin}"``: else, :func:`tost` holds at ``alpha``;
    - ``"undecided (power {p:.2f}, smallest detectable difference {m:.3g})"``: neither. ``p`` is
      :func:`power_two_sample` for a difference of ``margin``, ``m`` the
      :func:`smallest_detectable_difference` at ``target_power``, both from :func:`pooled_sd` and
      the seeds given (their harmonic mean ``2 / (1 / n_x + 1 / n_y)`` per arm).

    A difference can be both significant and smaller than the margin: the words then say
    "different", and ``equivalent`` says it is within the margin too.

    Example:
        >>> str(verdict([1.0, 1.1, 0.9], [2.0, 2.1, 1.9], margin=0.2))
        'different'
        >>> str(verdict([1.0, 1.1, 0.9], [1.0, 0.9, 1.1], margin=0.5))
        'equivalent within +-0.5'
        >>> str(verdict([0.0, 1.0, 2.0, 1.0, 0.5], [0.5, 1.5, 2.5, 1.0, 1.2], margin=1.0))
        'undecided (power 0.44, smallest detectable difference 1.55)'
    """
    a, b = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    equivalence = tost(a, b, margin, alpha)
    p_value = welch_test(a, b)["p_value"]
    different = bool(p_value < alpha) if equivalence["se"] > 0 else equivalence["difference"] != 0
    sd = pooled_sd(a, b)
    n = 2 / (1 / a.size + 1 / b.size)
    power = power_two_sample(margin, sd, n, alpha)
    detectable = smallest_detectable_difference(sd, n, target_power, alpha)
    if different:
        words = "different"
    elif equivalence["equivalent"]:
        words = f"equivalent within +-{margin:g}"
    else:
        words = f"undecided (power {power:.2f}, smallest detectable difference {detectable:.3g})"
    return Verdict(
        words=words,
        difference=equivalence["difference"],
        p_value=p_value,
        p_tost=equivalence["p_value"],
        different=different,
        equivalent=equivalence["equivalent"],
        margin=margin,
        alpha=alpha,
        pooled_sd=sd,
        seeds=(int(a.size), int(b.size)),
        power=power,
        smallest_detectable_difference=detectable,
    )
