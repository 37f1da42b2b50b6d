"""studies/frontier.py: the report's arithmetic on synthetic runs whose answers are known, and
the whole pipeline (train, evaluate alone, archive, skip, report) on the toy model."""

from __future__ import annotations

import contextlib
import doctest
import io
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from studies import frontier
from tests.support import ROOT

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_the_docstring_examples():
    assert doctest.testmod(frontier).failed == 0


# ------------------------------------------------------------------------- the arithmetic


def test_reward_at_a_budget_is_read_where_the_kl_first_reaches_it():
    kl = [0.0, 0.5, 1.5, 2.5, 1.0, 4.0]  # crosses 2 between the 3rd and 4th points, then dips below it
    reward = [0.0, 0.1, 0.3, 0.7, 0.9, 0.2]
    assert frontier.at_budget(kl, reward, 2.0) == pytest.approx(0.3 + 0.5 * (0.7 - 0.3))
    assert frontier.at_budget(kl, reward, 2.5) == pytest.approx(0.7)  # exactly on a point
    assert frontier.at_budget(kl, reward, 0.0) == 0.0  # reached at the start
    assert math.isnan(frontier.at_budget(kl, reward, 4.5))  # never reached


def test_smoothing_is_a_trailing_mean():
    np.testing.assert_allclose(frontier.smoothed([1, 2, 3, 4, 5, 6], window=3), [1, 1.5, 2, 3, 4, 5])


def test_the_envelope_keeps_the_points_no_other_point_beats():
    kl = [3.0, 1.0, 2.0, 2.0, 4.0, 0.5]
    reward = [0.6, 0.4, 0.3, 0.5, 0.55, 0.1]
    xs, ys = frontier.envelope(kl, reward)
    assert xs.tolist() == [0.5, 1.0, 2.0, 3.0]  # (2, 0.3) is beaten by (1, 0.4) and (2, 0.5); (4, 0.55) by (3, 0.6)
    assert ys.tolist() == [0.1, 0.4, 0.5, 0.6]
    xs, _ = frontier.envelope([1.0, math.nan], [0.2, 0.9])
    assert xs.tolist() == [1.0]


def test_interpolation_across_coefficients():
    assert frontier.interpolate_across([3.0, 1.0], [0.9, 0.1], 2.5) == pytest.approx(0.7)
    assert math.isnan(frontier.interpolate_across([3.0, 1.0], [0.9, 0.1], 0.9))
    assert math.isnan(frontier.interpolate_across([], [], 1.0))


def test_each_collapse_criterion_alone():
    steady = [0.1] * 5 + [0.4] * 5
    assert frontier.collapsed(steady, True, 0.9, 0.9) == []
    assert frontier.collapsed(steady, True, 0.449, 0.9)[0].startswith("distinct-2 0.449")  # just under half
    assert frontier.collapsed(steady, True, 0.45, 0.9) == []  # exactly half does not collapse
    assert frontier.collapsed(steady[::-1], True, 0.9, 0.9)[0].startswith("task reward fell")
    assert frontier.collapsed(steady, False, 0.9, 0.9) == ["a logged value is not finite"]
    assert len(frontier.collapsed(steady[::-1], False, 0.1, 0.9)) == 3


@pytest.mark.parametrize(
    ("ppo", "cory", "verdict"),
    [
        ([True, True, False], [False, False, False], "supported"),
        ([True, False, False], [False, False, False], "inconclusive"),  # a minority of PPO's seeds
        ([True, True, True], [True, False, False], "inconclusive"),  # CORY collapsed once
        ([True, True, True], [True, True, False], "not supported"),  # CORY collapsed in a majority
        ([False, False, False], [False, False, False], "not supported"),
        ([], [False], "inconclusive"),
    ],
)
def test_the_collapse_verdict(ppo, cory, verdict):
    assert frontier.collapse_verdict(ppo, cory) == verdict


# ------------------------------------------------------------------------- a synthetic study

ITERATIONS = 20


def write_run(
    report: Path,
    name: str,
    seed: int,
    learners: dict[str, tuple[np.ndarray, np.ndarray]],
    held_out: dict[str, tuple[float, float, float]],
) -> None:
    """An archived run: ``learners`` -> (task reward, KL) per iteration; ``held_out`` -> (reward, KL, distinct-2)."""
    folder = report / "runs" / f"{name}-seed{seed}"
    folder.mkdir(parents=True)
    columns = {"iteration": np.arange(ITERATIONS)}
    for learner, (reward, kl) in learners.items():
        columns |= {
            f"{learner}/task_reward_mean": reward,
            f"{learner}/kl": kl,
            f"{learner}/policy_loss": np.zeros(ITERATIONS),
            f"{learner}/value_loss": np.zeros(ITERATIONS),
        }
    pd.DataFrame(columns).to_csv(folder / "metrics.csv", index=False)
    (folder / "config.json").write_text("{}")
    (folder / frontier.SAMPLES_FILE).write_text(
        json.dumps(
            {
                "iteration": ITERATIONS - 1,
                "learner": next(iter(learners)),
                "role": "pioneer",
                "task_reward": 0.5,
                "query": "q",
                "response": " r",
            }
        )
        + "\n"
    )
    summaries = {learner: {"task_reward_mean": r, "kl": k, "distinct_2": d} for learner, (r, k, d) in held_out.items()}
    (folder / frontier.EVALUATION_FILE).write_text(json.dumps({"learners": summaries}))


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    """PPO and CORY at every coefficient, 3 seeds: the KL rises linearly (to 4 x the coefficient's
    factor), the reward is a known function of the KL, CORY's 0.1 higher at every KL; at the large
    learning rates PPO's reward falls and CORY's rises."""
    report = tmp_path_factory.mktemp("frontier")
    t = np.arange(ITERATIONS, dtype=float)
    for seed, noise in enumerate((-0.01, 0.0, 0.01)):
        for value in frontier.KL_COEFS:
            kl = t * (0.2 / (1 + 10 * value))  # coefficient 0.01: up to 3.45; 0.3: up to 0.95
            for method, lift in (("ppo", 0.0), ("cory", 0.1)):
                reward = 0.1 * kl + lift + noise
                learners = (
                    {"pioneer": (reward, kl)} if method == "ppo" else {"llm_0": (reward, kl), "llm_1": (reward, kl)}
                )
                alone = {learner: (0.2 * kl[-1] + lift + noise, kl[-1], 0.8) for learner in learners}
                write_run(report, frontier.run_name(method, "--kl-coef", value), seed, learners, alone)
        for value in frontier.LEARNING_RATES:
            ppo = np.linspace(0.5, 0.1, ITERATIONS)  # falls: collapses
            write_run(
                report,
                frontier.run_name("ppo", "--lr", value),
                seed,
                {"pioneer": (ppo, t)},
                {"pioneer": (0.1, 5.0, 0.8)},
            )
            cory = np.linspace(0.1, 0.5, ITERATIONS)
            write_run(
                report,
                frontier.run_name("cory", "--lr", value),
                seed,
                {"llm_0": (cory, t), "llm_1": (cory, t)},
                {"llm_0": (0.4, 2.0, 0.8), "llm_1": (0.4, 2.0, 0.8)},
            )
    base = report / "runs" / frontier.BASE
    base.mkdir()
    (base / frontier.EVALUATION_FILE).write_text(
        json.dumps({"learners": {"pioneer": {"task_reward_mean": 0.1, "distinct_2": 0.9}}})
    )
    path = frontier.write_report(report, ITERATIONS, [0, 1, 2], {"frontier", "lr"})
    return report, path.read_text()


def test_the_synthetic_frontier_verdicts(synthetic):
    report, md = synthetic
    runs = frontier.load_runs(report, ITERATIONS)
    assert len(runs) == 2 * 3 * (len(frontier.KL_COEFS) + len(frontier.LEARNING_RATES))
    # By hand: at a budget B the smoothed curves are linear, so the reward there is 0.1 B + lift + noise.
    ppo = [r for r in runs if r.name == "ppo-kl0.01"]
    assert [frontier.reward_at(r, 1.0) for r in ppo] == pytest.approx([0.09, 0.1, 0.11])
    for budget in (1, 2, 3):
        assert f"- KL {budget}: **CORY above PPO: supported**, cory - ppo = +0.100" in md
    # Only the smallest coefficients reach a KL of 3; all four reach 0.5 and the best is any of them (equal).
    assert frontier.best_at(frontier.group(runs, "frontier"), "ppo", 3.0)[0] == 0.01
    # No GRPO run: one line for every budget, not one a budget.
    budgets = ", ".join(f"{b:g}" for b in frontier.budgets([r for r in runs if r.study == "frontier"]))
    assert f"- KL {budgets}: **GRPO above PPO: inconclusive**: no coefficient of grpo has 2" in md
    assert md.count("GRPO above PPO") == 1
    assert (report / "frontier.png").read_bytes()[:8] == PNG_MAGIC


def test_the_synthetic_collapse_and_models_alone(synthetic):
    report, md = synthetic
    assert "- lr 0.0001: **supported**; collapsed: PPO 3 of 3 seeds, CORY 0 of 3" in md
    assert "task reward fell" in md and (report / "lr_curves.png").read_bytes()[:8] == PNG_MAGIC
    # Alone: per seed, held-out reward 0.2 KL + lift + noise across coefficients; CORY better by 0.1 at a KL of 1.
    assert "| 1 | cory - ppo | 0.300 [0.275, 0.325] (3) | 0.200 [0.175, 0.225] (3) | +0.100" in md
    assert "| base model | - | 1 | 0.100 | 0.000 | 0.900 |" in md


def test_the_page_gets_the_claims_table_and_the_report_between_its_markers(synthetic, tmp_path):
    report, _ = synthetic
    page = tmp_path / "reproduction.md"
    (start, end), (report_start, report_end) = frontier.CLAIMS_MARKERS, frontier.REPORT_MARKERS
    page.write_text(
        f"# Title\n\n{start}\nold\n{end}\n\nkept\n\n## Frontier\n\n{report_start}\nold\n{report_end}\nend\n"
    )
    frontier.write_report(report, ITERATIONS, [0, 1, 2], {"frontier", "lr"}, page=page)
    text = page.read_text()
    assert "old" not in text and text.startswith("# Title\n\n") and "\nkept\n" in text and text.endswith("end\n")
    claims = text[text.index(start) : text.index(end)]
    assert "| At the same KL, CORY reaches a higher task reward than PPO" in claims
    assert "KL 1: +0.100 [" in claims and "KL 1: supported; KL 2: supported; KL 3: supported" in claims
    assert "lr 0.0001: PPO 3/3, CORY 0/3 seeds" in claims and "lr 0.0001: supported" in claims
    body = text[text.index(report_start) : text.index(report_end)]
    assert "\n### Rules (fixed before the runs)\n" in body and "\n#### Verdicts at matched KL\n" in body
    assert "frontier.png)" in body and "](frontier.png)" not in body  # the figure's path from the page
    # With one seed of CORY no budget has a comparison: said once for all of them, each inconclusive.
    runs = [r for r in frontier.load_runs(report, ITERATIONS) if r.method != "cory" or r.seed == 0]
    (row, *_) = frontier.claims_table(runs, 0.9, {})[0].splitlines()[2:]
    assert "matched KL: KL 1, 2, 3: fewer than 2 seeds of a method reached it | KL 1, 2, 3: inconclusive |" in row
    (tmp_path / "bare.md").write_text("no markers")
    with pytest.raises(SystemExit, match="lacks the markers"):
        frontier.update_page(tmp_path / "bare.md", ["x"], ["y"], report)


def test_the_reproduction_studys_own_verdicts_from_its_tracked_runs():
    """reproduce.py's rules on docs/reproduction/runs give what docs/reproduction.md reports."""
    verdicts = frontier.reproduction_verdicts()
    assert {name: verdict for name, (verdict, _) in verdicts.items()} == {
        "(a)": "inconclusive",
        "(b)": "not supported",
        "(c)": "inconclusive",
    }
    assert "final KL: PPO 3.150, CORY 2.560" in verdicts["(a)"][1]


# ------------------------------------------------------------------------- the real pipeline, toy scale


@pytest.mark.slow  # the toy study's runs (make test-ci-slow)
def test_runs_are_trained_evaluated_alone_archived_and_skipped(tmp_path, toy_model, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # the runs import tests.support.toy
    model = toy_model
    report, root = tmp_path / "report", tmp_path / "runs"
    flags = [
        "--model",
        str(model),
        "--reward",
        "tests.support.toy:fraction_good",
        "--prompt-source",
        "rotten_tomatoes",
        "--batch-size",
        "4",
        "--mini-batch-size",
        "2",
        "--ppo-epochs",
        "1",
        "--context-length",
        "48",
        "--min-new-tokens",
        "3",
        "--max-new-tokens",
        "3",
    ]
    argv = [
        "--studies",
        "lr",
        "--seeds",
        "0",
        "--iterations",
        "2",
        "--root",
        str(root),
        "--report",
        str(report),
        *flags,
    ]
    monkeypatch.setattr(frontier, "EVAL_PROMPTS", 4)
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        frontier.main(argv)
    names = sorted(p.name for p in (report / "runs").iterdir())
    assert names == ["base", "cory-lr0.0001-seed0", "cory-lr0.0003-seed0", "ppo-lr0.0001-seed0", "ppo-lr0.0003-seed0"]
    cory = report / "runs" / "cory-lr0.0003-seed0"
    assert sorted(p.name for p in cory.iterdir()) == ["config.json", "evaluation.json", "metrics.csv", "samples.jsonl"]
    evaluation = json.loads((cory / "evaluation.json").read_text())
    assert sorted(evaluation["learners"]) == ["llm_0", "llm_1"] and evaluation["num_prompts"] == 4
    assert json.loads((cory / "config.json").read_text())["lr"] == 3e-4
    assert not (root / "cory-lr0.0003" / "seed0" / "checkpoints").exists()  # deleted once archived
    md = (report / "results.md").read_text()
    assert "| cory-lr0.0003 | 0 | archived |" in md and "| ppo-lr0.0001 | 0 | archived |" in md

    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        frontier.main(argv)  # again: everything is archived, nothing trains
    assert buffer.getvalue().count("archived, skipped") == 4 and "starting" not in buffer.getvalue()


def test_the_run_order_gives_every_seed_of_the_frontiers_core_then_the_learning_rates_then_the_rest():
    order = frontier.run_order({"frontier", "lr"}, [0, 1, 2])
    assert len(order) == len(set(order)) == 3 * (3 * len(frontier.KL_COEFS) + 2 * len(frontier.LEARNING_RATES))
    core = [(f"{m}-kl{v:g}", s) for s in (0, 1, 2) for v in (0.01, 0.05) for m in ("ppo", "cory")]
    assert order[:12] == core  # PPO and CORY at 0.01 and 0.05, every seed: intervals at KL 1-3 first
    lr = [(f"{m}-lr{v:g}", s) for s in (0, 1, 2) for v in (1e-4, 3e-4) for m in ("ppo", "cory")]
    assert order[12:24] == lr  # then the learning-rate claim, every seed
    assert order[24:30] == [(f"{m}-kl0.1", s) for s in (0, 1, 2) for m in ("ppo", "cory")]  # the low end
    assert order[30:36] == [(f"grpo-kl{v:g}", s) for v in (0.01, 0.05) for s in (0, 1, 2)]  # GRPO's intervals
    assert order[36:42] == [(f"{m}-kl0.3", s) for s in (0, 1, 2) for m in ("ppo", "cory")]
    assert order[42:] == [(f"grpo-kl{v:g}", s) for s in (0, 1, 2) for v in (0.1, 0.3)]
    assert frontier.run_order({"lr"}, [0]) == lr[:4]


def test_flags_the_study_sets_are_refused(capsys):
    for flag in ("--kl-coef", "--lr", "--learner", "--seed"):
        with pytest.raises(SystemExit):
            frontier.main([flag, "1"])
        assert "the study sets these itself" in capsys.readouterr().err


def test_the_report_says_what_the_budget_cuts():
    def run(method: str, seconds: list[float]) -> frontier.Run:
        metrics = pd.DataFrame({"seconds": seconds})
        return frontier.Run(f"{method}-kl0.01", "frontier", method, 0.01, 0, Path("."), metrics, {})

    missing = [["cory-kl0.3", "2", "not run yet"]]
    # A PPO iteration's median is 60 s: the 3600 s pause (other work on the machine) counts as 60 s.
    under = [run("ppo", [60.0] * 59 + [3600.0]), run("ppo", [60.0] * 60)]
    wall, cost = frontier.study_hours(under)
    assert wall == pytest.approx((119 * 60 + 3600) / 3600)
    assert cost == pytest.approx((120 * 60 + 2 * 60 * frontier.RUN_OVERHEAD_MINUTES["ppo"]) / 3600)
    note = frontier.budget_note(under, missing)
    assert f"cost {cost:.1f} h" in note and f"wall time is {wall:.1f} h" in note
    assert "listed below as not run yet" in note and "spent" not in note
    # Each method at its own median: CORY's 400 s iterations are not PPO's 60 s.
    spent = [*under, run("cory", [400.0] * 60)]
    assert frontier.study_hours(spent)[1] == pytest.approx(
        cost + (60 * 400 + 60 * frontier.RUN_OVERHEAD_MINUTES["cory"]) / 3600
    )
    note = frontier.budget_note(spent, missing)
    assert "The budget is spent: the runs not archived below (1) are cut." in note
    assert "cut" not in frontier.budget_note(under, []).split("0.1 and 0.3.")[-1]


def test_no_run_starts_once_the_budget_is_spent(tmp_path):
    """The study stops itself at --budget-hours: it starts no run, says which are left, and reports."""
    report = tmp_path / "report"
    curve = (np.linspace(0.1, 0.5, ITERATIONS), np.arange(ITERATIONS))
    write_run(report, "ppo-lr0.0001", 0, {"pioneer": curve}, {"pioneer": (0.3, 2.0, 0.8)})
    metrics = pd.read_csv(report / "runs" / "ppo-lr0.0001-seed0" / "metrics.csv")
    metrics.assign(seconds=360.0).to_csv(report / "runs" / "ppo-lr0.0001-seed0" / "metrics.csv", index=False)
    base = report / "runs" / frontier.BASE
    base.mkdir()
    base_summary = {"task_reward_mean": 0.1, "distinct_2": 0.9}
    (base / frontier.EVALUATION_FILE).write_text(json.dumps({"learners": {"pioneer": base_summary}}))
    # 20 iterations of 360 s and the run's overhead: just over 2 h.
    args = ["--studies", "lr", "--seeds", "0", "--iterations", str(ITERATIONS), "--report", str(report)]
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        frontier.main([*args, "--root", str(tmp_path / "root"), "--budget-hours", "2"])
    out = buffer.getvalue()
    assert "ppo-lr0.0001 seed 0: archived, skipped" in out  # archived runs are skipped before the check
    assert "the budget is spent: the archived runs cost 2.0 h of 2; 3 runs from cory-lr0.0001 seed 0 on" in out
    assert "starting" not in out and not (tmp_path / "root" / "cory-lr0.0001").exists()
    assert "The budget is spent: the runs not archived below (3) are cut." in (report / "results.md").read_text()
