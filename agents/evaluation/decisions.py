"""Decisions between two learners over seeds: different, equivalent within a margin, or undecided.

A comparison of two learners (their scores over seeds: a final window or the area under the curve,
:mod:`cory_agents.evaluation.rl_statistics`) ends in one of three wordings, never "no difference" from a
failure to detect one (:func:`verdict`):

- "different": Welch's test (:func:`~cory_agents.evaluation.statistics.welch_test`) rejects equal means;
- "equivalent within +-d": the two one-sided tests (:func:`tost`) place the difference inside the margin
  ``d``, declared before the runs;
- "undecided (power p, smallest detectable difference m)": neither; ``p`` is the power these seeds had
  to detect a difference of ``d``, ``m`` the smallest difference they detect with 80% power.

:func:`pooled_sd`, :func:`power_two_sample`, :func:`seeds_for_power` and
:func:`smallest_detectable_difference` say how many seeds a difference needs (a pilot's spread in, seeds
per learner out). The power is Welch's test's own, averaged over the ratio of the two sample variances
(``scipy.stats.nct`` and ``scipy.special.roots_jacobi``): the usual noncentral-t formula overstates it at
the few seeds RL studies run (0.80 where simulated Welch tests give 0.70 at 3 seeds per learner).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import optimize, special, stats

from cory_agents.evaluation.statistics import _sample_std, welch_test

NAN = float("nan")


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
