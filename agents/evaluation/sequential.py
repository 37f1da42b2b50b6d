"""``cory-bench --sequential``: seeds added in stages until every comparison is decided (group-sequential design).

A fixed design guesses the seeds a decision needs; a group-sequential one looks at the results after each
stage and stops as soon as they decide. ``--stages 3 6 10 15`` trains 3 seeds per entry, then up to 6, ...;
after each stage every entry is compared with the first (the baseline) on the compared metric
(:func:`~cory_agents.evaluation.plan.compared_metric`), by Welch's test of a difference and the two one-sided
tests of equivalence within ``--margin`` (:func:`~cory_agents.evaluation.decisions.tost`):

- "different" when Welch's two-sided p-value is below the stage's nominal level ``p_k``;
- "equivalent within +-d" when the equivalence test's p-value is below ``p_k``;
- else undecided, and the next stage adds seeds. A decision, once reached, stands.

Looking several times at one comparison would inflate its error rate; the nominal levels keep the overall
two-sided error at ``--alpha`` by **alpha spending** (Lan and DeMets, 1983). At information fraction
``t_k = n_k / n_K`` (seeds at look ``k`` over seeds at the last), the error spent so far is

    O'Brien-Fleming type:  alpha(t) = 4 - 4 Phi(z_{1 - alpha/4} / sqrt(t))     (little early, most at the end)
    Pocock type:           alpha(t) = alpha ln(1 + (e - 1) t)                  (evenly)

(each side spending ``alpha / 2`` with the one-sided function, the convention of gsDesign and of
Jennison and Turnbull's tables)
and the boundary ``c_k`` of the standardised statistics ``Z_1, ..., Z_K`` (correlated
``corr(Z_i, Z_j) = sqrt(t_i / t_j)``, ``i <= j``, as sums of independent seeds) solves

    P(|Z_1| < c_1, ..., |Z_{k-1}| < c_{k-1}, |Z_k| >= c_k) = alpha(t_k) - alpha(t_{k-1})

(the multivariate normal probabilities by ``scipy.stats.multivariate_normal``, Genz's method, with a
fixed random state). The nominal level of look ``k`` is ``p_k = 2 (1 - Phi(c_k))``, applied to the
t-based p-values of that look (the usual approximation at few seeds). The equivalence test is held to
the same ``p_k``: with one look both are the fixed design's tests at ``alpha``.

The study stops when every comparison is decided, after the last stage, or before a stage whose runs
would take the training time past ``--budget-hours`` (the sum of the runs' training time, estimated
from each entry's median seconds per iteration so far). Each look is recorded in ``sequential.json``
(the seeds, the nominal level, each comparison's numbers and decision) and the benchmark's report is
rewritten with every stage; a stopped study continues with ``--resume``.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import numpy as np
from scipy import optimize, stats

from cory_agents.evaluation.benchmark_config import BenchmarkConfig
from cory_agents.evaluation.decisions import tost, verdict
from cory_agents.evaluation.plan import compared_metric, comparison_values
from cory_agents.evaluation.report import write_json
from cory_agents.evaluation.statistics import welch_test

#: The file of the looks.
LOOKS = "sequential.json"
#: The multivariate normal integration's fixed random state and accuracy.
_RNG, _ABSEPS = 0, 1e-7


def alpha_spent(t: float, alpha: float, spending: str) -> float:
    """The error spent by information fraction ``t`` in ``(0, 1]`` (module docstring).

    Example:
        >>> round(alpha_spent(1.0, 0.05, "obrien-fleming"), 6), round(alpha_spent(1.0, 0.05, "pocock"), 6)
        (0.05, 0.05)
    """
    if spending == "obrien-fleming":
        return float(4 * stats.norm.sf(stats.norm.isf(alpha / 4) / math.sqrt(t)))
    if spending == "pocock":
        return float(alpha * math.log(1 + (math.e - 1) * t))
    raise ValueError(f"unknown alpha spending {spending!r}: obrien-fleming or pocock")


def boundaries(fractions: list[float], alpha: float, spending: str) -> list[float]:
    """The two-sided z boundaries ``c_k`` at the information ``fractions`` (increasing, the last 1).

    Example (five equally spaced looks at alpha 0.05; Jennison and Turnbull's tables and gsDesign give
    4.877, 3.357, 2.680, 2.290, 2.031 for the O'Brien-Fleming type):
        >>> [round(c, 2) for c in boundaries([0.2, 0.4, 0.6, 0.8, 1.0], 0.05, "obrien-fleming")]
        [4.88, 3.36, 2.68, 2.29, 2.03]
        >>> [round(c, 3) for c in boundaries([0.5, 1.0], 0.05, "pocock")]
        [2.157, 2.201]
    """
    t = np.asarray(fractions, dtype=np.float64)
    cov = np.sqrt(np.minimum.outer(t, t) / np.maximum.outer(t, t))
    spent = [alpha_spent(float(f), alpha, spending) for f in t]
    found: list[float] = []
    for k in range(len(t)):
        target = spent[k] - (spent[k - 1] if k else 0.0)
        if k == 0:
            found.append(float(stats.norm.isf(target / 2)))
            continue
        inside_before = _inside(cov[:k, :k], found)

        def crossing(c: float, k: int = k, before: float = inside_before, target: float = target) -> float:
            return before - _inside(cov[: k + 1, : k + 1], [*found, c]) - target

        found.append(float(optimize.brentq(crossing, 0.5, 12.0, xtol=1e-6)))
    return found


def _inside(cov: np.ndarray, bounds: list[float]) -> float:
    """``P(|Z_j| < bounds_j for every j)``, ``Z`` standard normal with correlations ``cov``."""
    if len(bounds) == 1:
        return float(1 - 2 * stats.norm.sf(bounds[0]))
    upper = np.asarray(bounds)
    return float(
        stats.multivariate_normal.cdf(
            upper, np.zeros(len(upper)), cov, maxpts=200_000, abseps=_ABSEPS, releps=0, lower_limit=-upper, rng=_RNG
        )
    )


def nominal_levels(stages: list[int], alpha: float, spending: str) -> list[float]:
    """``p_k`` of each look: the two-sided p-value a comparison must go below at ``stages[k]`` seeds."""
    return [float(2 * stats.norm.sf(c)) for c in boundaries([n / stages[-1] for n in stages], alpha, spending)]


def decide(x: np.ndarray, y: np.ndarray, margin: float, level: float) -> dict[str, Any]:
    """One comparison at one look: ``x`` the entry's scores over seeds, ``y`` the baseline's."""
    equivalence = tost(x, y, margin, level)
    p = welch_test(x, y)["p_value"] if equivalence["se"] > 0 else float(equivalence["difference"] == 0)
    decision = "different" if p < level else f"equivalent within +-{margin:g}" if equivalence["equivalent"] else ""
    return {
        "seeds": [int(x.size), int(y.size)],
        "difference": float(np.mean(x) - np.mean(y)),
        "p_value": float(p),
        "p_tost": float(equivalence["p_value"]),
        "level": level,
        "decision": decision,
    }


def look(report: dict[str, Any], bench: BenchmarkConfig, level: float, decided: dict[str, Any]) -> dict[str, Any]:
    """Every entry against the baseline in a look's ``report``; a comparison ``decided`` earlier keeps its decision."""
    part, metric = compared_metric(report, bench.plan_metric)
    y = comparison_values(report, report["baseline"], part, metric)
    pairs = {}
    for algo in report["algos"][1:]:
        if decided.get(algo):
            pairs[algo] = decided[algo]
            continue
        x = comparison_values(report, algo, part, metric)
        pairs[algo] = decide(x, y, bench.margin, level)
        if not pairs[algo]["decision"]:  # what these seeds could detect
            pairs[algo]["verdict"] = str(verdict(x, y, bench.margin, level))
    return {"part": part, "metric": metric, "level": level, "pairs": pairs}


def run_hours(report: dict[str, Any]) -> dict[str, float]:
    """Each entry's training time per run, in hours: its median seconds per iteration times the iterations."""
    return {a: s["mean"] * report["iterations"] / 3600 for a, s in report["seconds_per_iteration"].items()}


def run_sequential(train: Any, bench: BenchmarkConfig, run_benchmark: Any) -> dict[str, Any]:
    """The stages of ``bench`` (``run_benchmark(train, bench)`` trains and reports one stage), to a decision,
    the last stage or the budget. Returns the record written to ``sequential.json``."""
    out = Path(bench.out)
    levels = nominal_levels(bench.stages, bench.alpha, bench.sequential)
    record: dict[str, Any] = {
        "spending": bench.sequential,
        "alpha": bench.alpha,
        "margin": bench.margin,
        "stages": bench.stages,
        "levels": levels,
        "budget_hours": bench.budget_hours,
        "looks": [],
    }
    decided: dict[str, Any] = {}
    hours: dict[str, float] = {}
    done_seeds = 0
    for k, seeds in enumerate(bench.stages):
        if bench.budget_hours and hours:
            spent = sum(hours.values()) * done_seeds
            more = sum(hours.values()) * (seeds - done_seeds)
            if spent + more > bench.budget_hours:
                record["stopped"] = (
                    f"budget: stage {k + 1} ({seeds} seeds) would take {spent + more:.3g} h of training, past "
                    f"--budget-hours {bench.budget_hours:g} ({spent:.3g} h spent)"
                )
                break
        stage = dataclasses.replace(
            bench, seeds=seeds, resume=bench.resume or k > 0, overwrite=bench.overwrite and k == 0
        )
        report = run_benchmark(train, stage)
        hours, done_seeds = run_hours(report), seeds
        result = look(report, bench, levels[k], decided)
        result["seeds"] = seeds
        decided = {a: p for a, p in result["pairs"].items() if p["decision"]}
        record["looks"].append(result)
        write_json(out / LOOKS, record)
        if len(decided) == len(report["algos"]) - 1:
            record["stopped"] = f"decided: every entry against {report['baseline']} at stage {k + 1} ({seeds} seeds)"
            break
    else:
        record["stopped"] = f"the last stage ({bench.stages[-1]} seeds)"
    record["verdicts"] = _verdicts(record, bench)
    write_json(out / LOOKS, record)
    return record


def _verdicts(record: dict[str, Any], bench: BenchmarkConfig) -> dict[str, str]:
    """Each comparison's words: its decision, or "undecided (power p, smallest detectable difference m)" at the
    seeds the study reached and the last look's level."""
    if not record["looks"]:
        return {}
    last = record["looks"][-1]
    words = {}
    for algo, pair in last["pairs"].items():
        if pair["decision"]:
            words[algo] = f"{pair['decision']} (at {pair['seeds'][0]} seeds)"
        else:
            words[algo] = str(pair.get("verdict", "undecided"))
    return words


def format_sequential(record: dict[str, Any]) -> str:
    """The looks as lines of text."""
    lines = [
        f"{record['spending']} alpha spending, alpha {record['alpha']:g}, margin +-{record['margin']:g}; "
        f"stopped: {record.get('stopped', 'running')}"
    ]
    for k, result in enumerate(record["looks"]):
        lines.append(f"look {k + 1}: {result['seeds']} seeds per entry, nominal level {result['level']:.4f}")
        for algo, p in result["pairs"].items():
            lines.append(
                f"  {algo}: difference {p['difference']:+.3g}, p {p['p_value']:.3g}, equivalence p {p['p_tost']:.3g}"
                f" -> {p['decision'] or 'undecided'}"
            )
    for algo, words in record.get("verdicts", {}).items():
        lines.append(f"{algo}: {words}")
    return "\n".join(lines)
