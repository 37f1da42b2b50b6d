"""studies/multi_agent_games.py on the toy model: the signalling game's cory-bench of the four learners, seed by
seed, the archive (checkpoints deleted at the root, the run still finished), the report and the page's section."""

from __future__ import annotations

import json

import pandas as pd

from studies import multi_agent_games as study

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_the_games_study_runs_archives_and_writes_its_page(tmp_path, toy_model):
    root, archive, page = tmp_path / "runs", tmp_path / "archive", tmp_path / "page.md"
    start, end = study.markers("signal")
    page.write_text(f"# Page\n\n{start}\nnothing yet\n{end}\n\nafter\n")
    toy = ["--model", str(toy_model), "--batch-size", "4", "--mini-batch-size", "2", "--min-new-tokens", "3"]
    toy += ["--max-new-tokens", "4", "--context-length", "96", "--progress", "false", "--iterations", "2"]
    args = ["--games", "signal", "--root", str(root), "--archive", str(archive), "--page", str(page), "--seeds", "2"]
    study.main([*args, *toy])

    for arm in study.ARMS:
        for seed in (0, 1):
            run = root / "signal" / arm.replace(":", "-") / f"seed{seed}"
            assert not (run / "checkpoints").exists()  # deleted once archived: the run is marked finished
            folder = archive / "signal" / arm.replace(":", "-") / f"seed{seed}"
            names = ["config.json", "evaluation.json", "metrics.csv", "trained.json"]  # evaluation: communication
            assert sorted(p.name for p in folder.iterdir()) == names
            assert pd.read_csv(folder / "metrics.csv")["iteration"].tolist() == [0, 1]
    report = json.loads((archive / "signal" / "report.json").read_text())
    assert report["seeds"] == [0, 1] and report["baseline"] == "cory" and report["held_out"] is False
    assert (archive / "signal" / study.PER_LEARNER_PLOT).read_bytes()[:8] == PNG_MAGIC
    text = page.read_text()
    assert text.startswith("# Page") and text.endswith("after\n") and "nothing yet" not in text
    assert "2 of 2 seeds archived" in text and "**MAPPO - CORY**: success rate" in text
    assert "](multi-agent/games/signal/task_reward.png)" in text

    # Run again: nothing trains (the runs are finished without their checkpoints); --report-only rebuilds the page.
    before = {p: p.stat().st_mtime_ns for p in root.glob("signal/*/seed*/metrics.csv")}
    study.main([*args, *toy])
    assert {p: p.stat().st_mtime_ns for p in root.glob("signal/*/seed*/metrics.csv")} == before
    study.main(
        [
            "--games",
            "signal",
            "--archive",
            str(archive),
            "--page",
            str(page),
            "--report-only",
            "--root",
            str(tmp_path / "none"),
        ]
    )
    assert "2 of 3 seeds archived" in page.read_text()
