"""studies/happo_clip.py on the toy model: the clipped runs through cory-bench, the archive, the Welch
differences against unclipped HAPPO runs (checked by hand), the figure and the page's section."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from cory_agents.evaluation import reward_benchmark
from studies import happo_clip, multi_agent

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_the_clip_study_runs_archives_and_compares_against_unclipped_runs(tmp_path, toy_model):
    toy = [
        "--model",
        str(toy_model),
        "--reward",
        "tests.support.toy:fraction_good",
        "--prompt-source",
        "rotten_tomatoes",
    ]
    toy += ["--batch-size", "4", "--mini-batch-size", "2", "--min-new-tokens", "3", "--max-new-tokens", "4"]
    toy += ["--context-length", "48", "--report-to", "none", "--eval-prompts", "4", "--progress", "false"]
    toy += ["--lr", "3e-2", "--iterations", "2"]
    unclipped = tmp_path / "unclipped"  # HAPPO without the clip, as the comparison's archive holds it
    reward_benchmark.main(["--algos", "cory:happo", "--seeds", "2", "--out", str(unclipped), *toy])
    root, archive, page = tmp_path / "runs", tmp_path / "archive", tmp_path / "page.md"
    page.write_text(f"# Page\n\n{happo_clip.MARKERS[0]}\nnothing yet\n{happo_clip.MARKERS[1]}\n\nafter\n")
    folders = ["--root", str(root), "--archive", str(archive), "--unclipped", str(unclipped), "--page", str(page)]
    happo_clip.main([*folders, "--seeds", "2", *toy])

    for seed in (0, 1):
        folder = archive / "cory-happo" / f"seed{seed}"
        assert sorted(p.name for p in folder.iterdir()) == sorted(multi_agent.ARCHIVED)  # no checkpoints
        assert json.loads((folder / "config.json").read_text())["happo_factor_clip"] == happo_clip.CLIP
        metrics = pd.read_csv(folder / "metrics.csv")
        assert metrics["iteration"].tolist() == [0, 1]
        assert metrics.filter(like="/happo_factor_max").to_numpy().max() <= happo_clip.CLIP
    result = json.loads((archive / "comparison.json").read_text())
    assert result["seeds"] == 2 and len(result["unclipped"]) == 2
    # The held-out task reward's test by hand: each run's mean of its two learners, Welch's t-test over seeds.
    held_out = {
        name: [
            np.mean(
                [v["task_reward_mean"] for v in json.loads((f / "evaluation.json").read_text())["learners"].values()]
            )
            for f in (where / "cory-happo" / "seed0", where / "cory-happo" / "seed1")
        ]
        for name, where in (("clipped", archive), ("unclipped", unclipped))
    }
    test = result["tests"]["held-out task reward"]["difference"]
    assert test["difference"] == pytest.approx(np.mean(held_out["clipped"]) - np.mean(held_out["unclipped"]))
    expected = stats.ttest_ind(held_out["clipped"], held_out["unclipped"], equal_var=False).pvalue
    assert test["p_value"] == (pytest.approx(expected) if np.isfinite(expected) else None)  # JSON: null
    assert (archive / happo_clip.PLOT).read_bytes()[:8] == PNG_MAGIC
    text = page.read_text()
    assert text.startswith("# Page") and text.endswith("after\n") and "nothing yet" not in text
    assert "2 of 3 seeds with the clip" in text and "| held-out task reward |" in text
    table = [line for line in text.splitlines() if line.startswith("|")]
    assert len(table) == 2 + len(happo_clip.COMPARED)  # the header, the rule and one row per value

    # --report-only rebuilds the section from the archive, without training.
    page.write_text(f"{happo_clip.MARKERS[0]}\n{happo_clip.MARKERS[1]}\n")
    happo_clip.main(["--archive", str(archive), "--unclipped", str(unclipped), "--page", str(page), "--report-only"])
    assert "| reward rise z |" in page.read_text()
