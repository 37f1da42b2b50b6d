"""studies/reproduce.py at toy scale: real runs, resume, report, and the verdict rules."""

from __future__ import annotations

import contextlib
import io
import json
import math
from pathlib import Path

import pandas as pd
import pytest

from studies import reproduce
from tests.support import ROOT

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
CONFIGS = ("ppo", "cory", "cory-no-kt", "cory-no-rex")
SEEDS = (0, 1)
ITERATIONS = 6


def toy_flags(model: Path) -> list[str]:
    """Pass-through flags: the toy model and reward, tiny batches and answers."""
    return [
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
        "--lr",
        "3e-2",
        "--context-length",
        "48",
        "--min-new-tokens",
        "3",
        "--max-new-tokens",
        "3",
    ]


def metrics_mtimes(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_mtime_ns for p in root.glob("*/seed*/metrics.csv")}


def verdict_lines(md: str) -> list[str]:
    return [line for line in md.splitlines() if line.startswith("- **(")]


@pytest.fixture(scope="module")
def study(tmp_path_factory, toy_model):
    """PPO seed 0 for 3 iterations; the report of that incomplete study; the whole study (2 seeds x 6
    iterations, PPO seed 0 resumed); the same command again."""
    mp = pytest.MonkeyPatch()
    mp.setenv("PYTHONPATH", str(ROOT))  # the runs import tests.support.toy
    model = toy_model
    root, reports = tmp_path_factory.mktemp("runs"), tmp_path_factory.mktemp("reports")
    args = ["--root", str(root), "--final-window", "2"]
    out = {}

    def run(*argv: str) -> str:  # what the command prints
        buffer = io.StringIO()
        with contextlib.redirect_stdout(buffer):
            reproduce.main([*args, *argv])
        return buffer.getvalue()

    run("--configs", "ppo", "--seeds", "0", "--iterations", "3", "--report", str(reports / "first"), *toy_flags(model))
    out["first"] = pd.read_csv(root / "ppo" / "seed0" / "metrics.csv")
    out["incomplete"] = run(
        "--report-only", "--seeds", "0,1", "--iterations", str(ITERATIONS), "--report", str(reports / "incomplete")
    )
    whole = ["--seeds", "0,1", "--iterations", str(ITERATIONS), "--report", str(reports / "whole"), *toy_flags(model)]
    out["whole"] = run(*whole)
    out["mtimes"] = metrics_mtimes(root)
    out["again"] = run(*whole)
    yield root, reports, out
    mp.undo()


@pytest.mark.slow  # the toy study's runs (make test-ci-slow)
def test_every_run_is_trained_and_resumed_not_restarted(study):
    root, _, out = study
    for config in CONFIGS:
        for seed in SEEDS:
            metrics = pd.read_csv(root / config / f"seed{seed}" / "metrics.csv")
            assert metrics["iteration"].tolist() == list(range(ITERATIONS)), (config, seed)
            assert (root / config / f"seed{seed}" / "config.json").exists()
    # each configuration's flags reached its runs: role exchange at iteration 5 except without it
    roles = {c: pd.read_csv(root / c / "seed0" / "metrics.csv")["llm_0/role"].tolist() for c in CONFIGS[1:]}
    assert roles == {"cory": [0] * 5 + [1], "cory-no-kt": [0] * 5 + [1], "cory-no-rex": [0] * 6}
    settings = {c: json.loads((root / c / "seed1" / "config.json").read_text()) for c in CONFIGS}
    assert [settings[c]["algo"] for c in CONFIGS] == ["ppo", "cory", "cory", "cory"]
    assert [settings[c]["no_knowledge_transfer"] for c in CONFIGS] == [False, False, True, False]
    assert settings["ppo"]["lr"] == 3e-2 and settings["ppo"]["checkpoint_every"] == 5  # a pass-through flag
    resumed = pd.read_csv(root / "ppo" / "seed0" / "metrics.csv")
    pd.testing.assert_frame_equal(resumed.iloc[:3], out["first"], check_exact=True)  # kept, not retrained
    assert "ppo seed 0: resuming at iteration 3" in out["whole"]
    assert out["whole"].count(": starting") == len(CONFIGS) * len(SEEDS) - 1


@pytest.mark.slow  # the toy study's runs (make test-ci-slow)
def test_a_second_invocation_does_not_retrain(study):
    root, _, out = study
    assert metrics_mtimes(root) == out["mtimes"] and len(out["mtimes"]) == len(CONFIGS) * len(SEEDS)
    assert out["again"].count("finished, skipped") == len(CONFIGS) * len(SEEDS)


@pytest.mark.slow  # the toy study's runs (make test-ci-slow)
def test_report_of_the_whole_study(study):
    root, reports, _ = study
    report = reports / "whole"
    md = (report / "results.md").read_text()
    for config in CONFIGS:
        assert f"| {config} | 2 |" in md  # the final table: every configuration over both seeds
        assert f"### {config} (seed 0, iteration {ITERATIONS - 1})" in md
        for seed in SEEDS:
            for name in ("metrics.csv", "config.json"):
                assert (report / "runs" / f"{config}-seed{seed}" / name).exists()
    lines = verdict_lines(md)
    assert [line[4:7] for line in lines] == ["(a)", "(b)", "(c)"]
    for line in lines:
        assert any(f": {v}.**" in line for v in ("supported", "not supported", "inconclusive")), line
        assert "incomplete" not in line and "Rule:" in line
    assert "llm_0 (pioneer)" in md and "llm_1 (observer)" in md  # CORY's samples, per learner
    for png in ("curves.png", "kl_vs_reward.png"):
        assert (report / png).read_bytes()[:8] == PNG_MAGIC
    # a final value is the mean over seeds of each run's last 2 iterations (CORY: the mean of its learners)
    finals = [
        pd.read_csv(root / "cory" / f"seed{s}" / "metrics.csv")[["llm_0/kl", "llm_1/kl"]].iloc[-2:].to_numpy().mean()
        for s in SEEDS
    ]
    row = next(line for line in md.splitlines() if line.startswith("| cory | 2 |")).split(" | ")
    assert row[3].startswith(f"{sum(finals) / 2:.3f} ± ")  # configuration, seeds, task reward, KL


@pytest.mark.slow  # the toy study's runs (make test-ci-slow)
def test_report_only_on_an_incomplete_study_says_so(study):
    _, reports, out = study
    md = (reports / "incomplete" / "results.md").read_text()
    lines = verdict_lines(md)
    assert len(lines) == 3 and all(": inconclusive: incomplete.**" in line for line in lines), lines
    assert "ppo seed 0 (3 of 6 iterations)" in md and "cory seed 0 (0 of 6 iterations)" in md
    assert "| ppo | 0 | 3 of 6 | stopped |" in md and "| cory | 0 | 0 of 6 | not started |" in md
    assert "inconclusive: incomplete" in out["incomplete"]
    assert (reports / "incomplete" / "curves.png").read_bytes()[:8] == PNG_MAGIC


def test_list_and_refused_flags(capsys):
    reproduce.main(["--list", "--iterations", "7", "--root", "/tmp/x", "--lr", "1e-5"])
    listed = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in listed] == list(CONFIGS)
    assert "--no-knowledge-transfer" in listed[2] and "--no-role-exchange" in listed[3]
    assert all("--lr 1e-5 --iterations 7" in line and "--checkpoint-every 5" in line for line in listed)
    for taken in ("--seed", "--out=x", "--no-role-exchange"):
        with pytest.raises(SystemExit):
            reproduce.main([taken])


# ------------------------------------------------------------------------- the verdict rules


def synthetic(finals: dict[str, list[tuple[float, float]]], changes: dict[str, list[float]]) -> reproduce.Study:
    """A Study of finished runs: per configuration, (task reward, KL) per seed and combined-reward changes."""
    runs = {}
    for config, values in finals.items():
        runs[config] = [
            reproduce.RunResult(
                config,
                seed,
                10,
                final={"task_reward_mean": r, "kl": kl, "combined_reward": r - kl},
                first=0.0,
                last=changes[config][seed],
            )
            for seed, (r, kl) in enumerate(values)
        ]
    return reproduce.Study(runs, iterations=10, window=2)


def test_kl_ratio_rule():
    similar = [(0.50, 1.0), (0.52, 1.1), (0.48, 0.9)]
    study = synthetic(
        {"ppo": [(0.5, 10.0), (0.51, 11.0), (0.49, 12.0)], "cory": similar}, {"ppo": [0, 0, 0], "cory": [0, 0, 0]}
    )
    assert reproduce.claim_kl_ratio(study)[0] == "supported"
    study = synthetic(
        {"ppo": [(0.5, 1.5), (0.51, 1.6), (0.49, 1.4)], "cory": similar}, {"ppo": [0, 0, 0], "cory": [0, 0, 0]}
    )
    assert reproduce.claim_kl_ratio(study)[0] == "not supported"  # 1.5 < 2 x 1.0, decided
    study = synthetic(
        {"ppo": [(0.9, 10.0), (0.91, 11.0), (0.89, 12.0)], "cory": similar}, {"ppo": [0, 0, 0], "cory": [0, 0, 0]}
    )
    assert reproduce.claim_kl_ratio(study)[0] == "not supported"  # rewards 0.4 apart: not similar
    study = synthetic(
        {"ppo": [(0.5, 0.5), (0.51, 6.0), (0.49, 1.0)], "cory": similar}, {"ppo": [0, 0, 0], "cory": [0, 0, 0]}
    )
    assert reproduce.claim_kl_ratio(study)[0] == "inconclusive"


def test_combined_trend_and_ablation_rules():
    finals = {
        "ppo": [(0.5, 3.0)] * 3,
        "cory": [(0.5, 1.0), (0.5, 1.1), (0.5, 0.9)],
        "cory-no-kt": [(0.5, 2.0), (0.5, 2.1), (0.5, 1.9)],
        "cory-no-rex": [(0.5, 3.0), (0.5, 3.2), (0.5, 2.8)],
    }
    study = synthetic(finals, {c: [0.0] * 3 for c in finals} | {"ppo": [-0.2, -0.3, -0.25], "cory": [0.2, 0.3, 0.25]})
    assert reproduce.claim_combined_trend(study)[0] == "supported"
    assert reproduce.claim_ablations_raise_kl(study)[0] == "supported"
    study = synthetic(finals, {c: [0.0] * 3 for c in finals} | {"ppo": [0.2, 0.3, 0.25], "cory": [0.2, -0.3, 0.25]})
    assert reproduce.claim_combined_trend(study)[0] == "not supported"  # PPO's rises, decided
    finals["cory-no-kt"] = [(0.5, 0.5), (0.5, 0.6), (0.5, 0.4)]  # lower than CORY's, decided
    assert reproduce.claim_ablations_raise_kl(synthetic(finals, {c: [0.0] * 3 for c in finals}))[0] == "not supported"
    finals["cory-no-kt"] = [(0.5, 0.5), (0.5, 2.6), (0.5, 1.0)]
    verdict, text = reproduce.claim_ablations_raise_kl(synthetic(finals, {c: [0.0] * 3 for c in finals}))
    assert verdict == "inconclusive" and "cory-no-rex - cory KL = +2.000" in text
    assert math.isnan(reproduce.over_seeds([1.0])["low"])
