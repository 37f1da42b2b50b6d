"""cory-bench --sequential: alpha-spending boundaries against published values and a simulation, the looks'
decisions against hand computations, a study of toy runs stopping at a decision or at its budget; the final
window aligned to the role exchange; --jobs; decisions in the report."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from cory_agents.evaluation.decisions import tost, verdict
from cory_agents.evaluation.reward_benchmark import main
from cory_agents.evaluation.rl_statistics import aligned_window
from cory_agents.evaluation.sequential import LOOKS, alpha_spent, boundaries, decide, nominal_levels
from cory_env.errors import UsageError
from tests.support.runs import toy_bench_args

GAME = ["--task", "signal", "--reward", "signal", "--prompt-source", "auto", "--context-length", "96"]


@pytest.mark.parametrize(
    ("spending", "fractions", "published"),
    [  # Jennison and Turnbull; gsDesign (sfLDOF, sfLDPocock), two-sided alpha 0.05
        ("obrien-fleming", [0.2, 0.4, 0.6, 0.8, 1.0], [4.877, 3.357, 2.680, 2.290, 2.031]),
        ("pocock", [0.5, 1.0], [2.157, 2.201]),
    ],
)
def test_boundaries_are_the_published_ones(spending, fractions, published):
    assert boundaries(fractions, 0.05, spending) == pytest.approx(published, abs=2e-3)


@pytest.mark.parametrize("spending", ["obrien-fleming", "pocock"])
def test_under_no_difference_the_looks_together_err_at_alpha(spending):
    """Brownian motion observed at the looks of --stages 3 6 10 15: each look's first crossings are what the
    spending function allots it, and all of them together alpha (200,000 simulated studies)."""
    stages = [3, 6, 10, 15]
    t = np.array(stages) / stages[-1]
    c = np.array(boundaries(list(t), 0.05, spending))
    rng = np.random.default_rng(0)
    n = 200_000
    sums = np.cumsum(rng.standard_normal((n, len(t))) * np.sqrt(np.diff(t, prepend=0.0)), axis=1)
    crossed = np.abs(sums / np.sqrt(t)) >= c
    first = np.where(crossed.any(axis=1), crossed.argmax(axis=1), -1)
    for k in range(len(t)):
        allotted = alpha_spent(t[k], 0.05, spending) - (alpha_spent(t[k - 1], 0.05, spending) if k else 0.0)
        assert np.mean(first == k) == pytest.approx(allotted, abs=4 * np.sqrt(allotted / n) + 1e-5)
    assert np.mean(first >= 0) == pytest.approx(0.05, abs=4 * np.sqrt(0.05 / n))
    assert nominal_levels(stages, 0.05, spending) == pytest.approx(list(2 * stats.norm.sf(c)))


def test_one_look_is_the_fixed_design():
    for spending in ("obrien-fleming", "pocock"):
        assert nominal_levels([5], 0.05, spending) == pytest.approx([0.05])


def test_a_look_decides_by_its_nominal_level():
    x, y = np.array([0.8, 0.7, 0.75]), np.array([0.2, 0.3, 0.25])
    assert decide(x, y, 0.15, 0.01)["decision"] == "different"
    p = stats.ttest_ind(x, y, equal_var=False).pvalue
    assert decide(x, y, 0.15, p / 2)["decision"] == ""  # the same data, a stricter look: undecided
    same = np.array([0.50, 0.52, 0.51, 0.49]), np.array([0.51, 0.50, 0.50, 0.52])
    result = decide(*same, 0.15, 0.01)
    assert result["decision"] == "equivalent within +-0.15"
    assert result["p_tost"] == pytest.approx(tost(*same, 0.15, 0.01)["p_value"])
    assert decide(*same, 0.005, 0.01)["decision"] == ""  # within 0.005 the four seeds cannot tell


def test_the_final_window_is_aligned_to_the_role_exchange(tmp_path, toy_model):
    assert [aligned_window(w, 2, 9) for w in (1, 4, 5, 20)] == [4, 4, 8, 9]
    out = tmp_path / "aligned"
    args = [*GAME, "--algos", "cory", "--seeds", "1", "--iterations", "4", "--role-exchange-period", "1"]
    main(toy_bench_args(toy_model, out, *args, "--final-window", "1"))
    report = json.loads((out / "report.json").read_text())
    assert report["final_window"] == 2 and report["final_window_requested"] == 1
    df = pd.read_csv(out / "cory" / "seed0" / "metrics.csv").tail(2)  # one iteration of each arrangement
    by_hand = (df["llm_0/task_reward_mean"] + df["llm_1/task_reward_mean"]).mean()
    row = next(r for r in report["summary"] if r["learner"] == "mean")
    assert row["train"]["collective_reward"]["values"] == pytest.approx([by_hand])
    assert "aligned to the role exchange" in (out / "report.md").read_text()


def test_a_sequential_study_looks_after_each_stage_and_stops_at_a_decision_or_its_budget(tmp_path, toy_model):
    """A margin of 0.001 no toy seeds can show equivalence within, so each look is a test of a difference."""
    out = tmp_path / "study"
    design = ["--margin", "0.001", "--sequential", "pocock", "--stages", "2", "3", "--algos", "cory", "cory:happo"]
    main(toy_bench_args(toy_model, out, "--iterations", "2", *design))
    record = json.loads((out / LOOKS).read_text())
    assert record["levels"] == pytest.approx(nominal_levels([2, 3], 0.05, "pocock"))
    first, last = record["looks"][0], record["looks"][-1]
    assert first["seeds"] == 2 and (first["part"], first["metric"]) == ("eval", "task_reward_mean")
    report = json.loads((out / "report.json").read_text())  # the last look's
    rows = {r["algo"]: r for r in report["summary"] if r["learner"] == "mean"}
    x, y = (np.array(rows[a]["eval"]["task_reward_mean"]["values"]) for a in ("cory:happo", "cory"))
    pair = last["pairs"]["cory:happo"]
    assert pair["seeds"] == [len(x), len(y)]
    assert pair == {**decide(x, y, 0.001, last["level"]), **({"verdict": pair["verdict"]} if "verdict" in pair else {})}
    if first["pairs"]["cory:happo"]["decision"]:  # decided at the first look: no seed more
        assert len(record["looks"]) == 1 and len(x) == 2 and record["stopped"].startswith("decided")
        return
    assert len(record["looks"]) == 2 and len(x) == 3  # undecided after 2 seeds: a third
    if not pair["decision"]:
        assert record["verdicts"]["cory:happo"] == str(verdict(x, y, 0.001, last["level"]))
        assert record["stopped"] == "the last stage (3 seeds)"
    # A budget the first stage already spends: the study stops before the second.
    tight = tmp_path / "tight"
    main(toy_bench_args(toy_model, tight, "--iterations", "2", *design, "--budget-hours", "1e-6"))
    record = json.loads((tight / LOOKS).read_text())
    assert len(record["looks"]) == 1 and record["stopped"].startswith("budget: stage 2 (3 seeds) would take")
    assert not (tight / "cory" / "seed2").exists()


def test_sequential_flags_are_checked(tmp_path):
    base = ["--out", str(tmp_path / "x"), "--algos", "cory", "cory:mappo"]
    cases = [
        (["--sequential", "pocock", "--stages", "3", "6"], "--sequential needs --margin"),
        (["--margin", "0.1", "--sequential", "pocock", "--stages", "6", "3"], "increasing from at least 2"),
        (["--margin", "0.1", "--sequential", "pocock"], "needs at least two looks"),
        (["--stages", "3", "6"], "--stages and --budget-hours are --sequential's"),
        (["--margin", "0.1", "--alpha", "1.5"], "--alpha must be between 0 and 1"),
        (["--jobs", "0"], "--jobs must be at least 1"),
    ]
    for extra, message in cases:
        with pytest.raises(UsageError, match=message):
            main([*base, *extra])
    assert not (tmp_path / "x").exists()


def test_jobs_train_the_runs_in_parallel_processes(tmp_path, toy_model):
    out = tmp_path / "jobs"
    main(toy_bench_args(toy_model, out, *GAME, "--algos", "cory", "--seeds", "2", "--iterations", "2", "--jobs", "2"))
    for seed in (0, 1):
        run = out / "cory" / f"seed{seed}"
        assert pd.read_csv(run / "metrics.csv")["iteration"].tolist() == [0, 1]
        assert json.loads((run / "trained.json").read_text()) == {"iterations_trained": 2}
        assert json.loads((run / "config.json").read_text())["seed"] == seed
    assert json.loads((out / "report.json").read_text())["seeds"] == [0, 1]


def test_a_margin_words_each_comparison_in_the_report(tmp_path, toy_model):
    out = tmp_path / "decided"
    args = [*GAME, "--algos", "cory", "cory:happo", "--seeds", "2", "--iterations", "2", "--margin", "0.2"]
    main(toy_bench_args(toy_model, out, *args))
    report = json.loads((out / "report.json").read_text())
    rows = {r["algo"]: r for r in report["summary"] if r["learner"] == "mean"}
    x, y = (rows[a]["train"]["collective_reward"]["values"] for a in ("cory:happo", "cory"))
    (pair,) = report["decisions"]["pairs"]
    assert pair["verdict"] == str(verdict(x, y, 0.2, 0.05))
    text = (out / "report.md").read_text()
    assert "## Decisions: collective_reward (training), margin +-0.2" in text and pair["verdict"] in text
