"""studies/multi_agent.py on the toy model: cory-bench seed by seed, the archive, the report of the
seeds every algorithm finished, the per-learner figure, the page's results section."""

from __future__ import annotations

import json

import pandas as pd

from studies import multi_agent

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_the_study_runs_archives_and_writes_its_page(tmp_path, toy_model):
    model = toy_model
    root, archive, page = tmp_path / "runs", tmp_path / "archive", tmp_path / "page.md"
    page.write_text(f"# Page\n\n{multi_agent.MARKERS[0]}\nnothing yet\n{multi_agent.MARKERS[1]}\n\nafter\n")
    toy = ["--model", str(model), "--reward", "tests.support.toy:fraction_good", "--prompt-source", "rotten_tomatoes"]
    toy += ["--batch-size", "4", "--mini-batch-size", "2", "--min-new-tokens", "3", "--max-new-tokens", "4"]
    toy += ["--context-length", "48", "--report-to", "none", "--eval-prompts", "4", "--progress", "false"]
    args = ["--root", str(root), "--archive", str(archive), "--page", str(page), "--seeds", "2", "--iterations", "2"]
    multi_agent.main([*args, *toy])

    for arm in multi_agent.ARMS:
        for seed in (0, 1):
            folder = archive / arm.replace(":", "-") / f"seed{seed}"
            assert sorted(p.name for p in folder.iterdir()) == sorted(multi_agent.ARCHIVED)  # no checkpoints
            assert pd.read_csv(folder / "metrics.csv")["iteration"].tolist() == [0, 1]
    report = json.loads((archive / "report.json").read_text())
    assert report["seeds"] == [0, 1] and report["baseline"] == "cory"
    assert (archive / multi_agent.PER_LEARNER_PLOT).read_bytes()[:8] == PNG_MAGIC
    text = page.read_text()
    assert text.startswith("# Page") and text.endswith("after\n") and "nothing yet" not in text
    assert "2 of 2 seeds archived" in text and "**HAPPO - CORY**" in text and "**difference rewards - CORY**" in text
    assert "](multi-agent/task_reward.png)" in text

    # A seed that one algorithm has not finished is left out of the report; --report-only rebuilds it.
    (archive / "cory-happo" / "seed1" / "evaluation.json").unlink()
    multi_agent.main(["--archive", str(archive), "--page", str(page), "--report-only"])
    assert json.loads((archive / "report.json").read_text())["seeds"] == [0]
    assert "1 of 3 seeds archived" in page.read_text()
