"""cory-bench --plan: the seeds a comparison needs, from a pilot's report (a report written here by hand)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from cory_agents.evaluation.decisions import pooled_sd, power_two_sample
from cory_agents.evaluation.plan import compared_metric, format_plan, plan
from cory_agents.evaluation.reward_benchmark import main
from cory_env.errors import UsageError

CORY = [0.40, 0.55, 0.47]
MAPPO = [0.52, 0.38, 0.61]
HAPPO = [0.20, 0.22, 0.21]


def over_seeds(values):
    return {"mean": float(np.mean(values)), "values": values}


def pilot() -> dict:
    """A signalling pilot: no held-out evaluation, the team's collective reward on the mean rows."""
    rows = []
    for algo, values in (("cory", CORY), ("cory:mappo", MAPPO), ("cory:happo", HAPPO)):
        rows.append({"algo": algo, "learner": "llm_0", "train": {"task_reward_mean": over_seeds([0.0] * 3)}})
        rows.append({"algo": algo, "learner": "mean", "train": {"collective_reward": over_seeds(values)}})
    return {
        "held_out": False,
        "baseline": "cory",
        "algos": ["cory", "cory:mappo", "cory:happo"],
        "iterations": 40,
        "summary": rows,
        "seconds_per_iteration": {a: {"mean": 9.0} for a in ("cory", "cory:mappo", "cory:happo")},
    }


def test_the_plan_of_each_pair_against_the_baseline():
    result = plan(pilot(), margin=0.15)
    assert (result["part"], result["metric"]) == ("train", "collective_reward")
    mappo, happo = result["pairs"]
    sd = pooled_sd(MAPPO, CORY)
    assert mappo["pooled_sd"] == pytest.approx(sd) and mappo["seeds"] == [3, 3]
    n = mappo["seeds_needed"]  # the least seeds whose power reaches 80%
    assert power_two_sample(0.15, sd, n) >= 0.8 > power_two_sample(0.15, sd, n - 1)
    assert mappo["verdict"].startswith("undecided (power ")
    assert mappo["cpu_seconds"] == pytest.approx(2 * (n - 3) * 9.0 * 40)
    assert happo["verdict"] == "different" and happo["difference"] == pytest.approx(np.mean(HAPPO) - np.mean(CORY))
    text = format_plan(result)
    assert f"{n} seeds per learner needed" in text and "cory:mappo against cory (3 and 3 seeds)" in text


def test_the_metric_is_chosen_or_named():
    report = pilot()
    assert compared_metric(report, "task_reward_mean") == ("train", "task_reward_mean")
    with pytest.raises(UsageError, match="--plan-metric 'success' is not in the pilot's report: choose one of"):
        compared_metric(report, "success")
    report["held_out"] = True
    report["summary"][1]["eval"] = {"task_reward_mean": over_seeds([0.1, 0.2, 0.3])}
    assert compared_metric(report) == ("eval", "task_reward_mean")
    with pytest.raises(UsageError, match="--margin must be a positive number"):
        plan(pilot(), margin=0.0)


def test_the_command_reads_a_pilot_and_trains_nothing(tmp_path, capsys, monkeypatch):
    (tmp_path / "report.json").write_text(json.dumps(pilot()))
    main(["--plan", "--margin", "0.15", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert "collective_reward (training), difference that matters: +-0.15" in out and "cory:happo" in out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]  # nothing trained, nothing written
    with pytest.raises(UsageError, match="--plan needs --margin"):
        main(["--plan", "--out", str(tmp_path)])
    with pytest.raises(UsageError, match="is not there: run the pilot first"):
        main(["--plan", "--margin", "0.1", "--out", str(tmp_path / "nowhere")])
