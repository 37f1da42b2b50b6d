"""cory-bench --study: a study file's runs trained, archived and written into its page; the page written again
from the archive alone; a sequential design's looks on the page; bad study files refused."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pandas as pd
import pytest

from cory_agents.evaluation.decisions import verdict
from cory_agents.evaluation.learning import learned_in
from cory_agents.evaluation.reward_benchmark import main, parse_args
from cory_agents.evaluation.rl_statistics import stratified_bootstrap_ci
from cory_agents.evaluation.study import PROFILE, load_study, study_argv, variant_names
from cory_agents.training.registry import register_learner, unregister_learner
from cory_env.errors import UsageError
from tests.support import ROOT

START, END = "<!-- study toy: written by cory-bench --study -->", "<!-- /study toy -->"


def write_study(folder, model, design: str) -> tuple:
    (folder / "docs").mkdir(parents=True)
    page = folder / "docs" / "page.md"
    page.write_text(f"# A page\n\nBefore.\n\n{START}\n{END}\n\nAfter.\n")
    study = folder / "toy.toml"
    study.write_text(
        f"""
[study]
name = "toy"
out = "{folder / "runs"}"
archive = "docs/toy-study"
page = "docs/page.md"

[design]
algos = ["cory", "cory:happo"]
final_window = 1
margin = 0.2
{design}

[settings]
model = "{model}"
reward = "tests.support.toy:fraction_good"
prompt_source = "rotten_tomatoes"
batch_size = 4
mini_batch_size = 2
ppo_epochs = 1
lr = 3e-2
min_new_tokens = 3
max_new_tokens = 4
context_length = 48
report_to = "none"
eval_prompts = 4
eval_samples_per_prompt = 2
eval_batch_size = 8
iterations = 2
progress = false
"""
    )
    return study, page


def test_a_study_is_run_archived_and_written_into_its_page_then_rewritten_from_the_archive(tmp_path, toy_model):
    study, page = write_study(tmp_path, toy_model, "seeds = 2")
    assert study_argv({"study": {"out": "o"}, "design": {"algos": ["cory"], "metric": "kl", "seeds": 2}}) == [
        *("--plan-metric", "kl", "--algos", "cory", "--seeds", "2", "--out", "o")
    ]
    main(["--study", str(study)])
    archive = tmp_path / "docs" / "toy-study"
    assert (archive / "report.json").is_file() and (archive / PROFILE).read_bytes()[:4] == b"\x89PNG"
    assert not list(archive.rglob("checkpoints"))
    text = page.read_text()
    assert text.startswith("# A page\n\nBefore.") and text.endswith("After.\n")  # the rest of the page stays
    body = text.split(START)[1].split(END)[0]
    assert "Declared before the runs (`toy.toml`)" in body and "margin 0.2" in body
    report = json.loads((archive / "report.json").read_text())
    (pair,) = report["decisions"]["pairs"]
    assert f"- **cory:happo** against cory: {pair['verdict']}" in body
    values = next(r for r in report["summary"] if r["algo"] == "cory" and r["learner"] == "mean")
    x = np.array(values["eval"]["task_reward_mean"]["values"])
    estimate, low, high = stratified_bootstrap_ci(x[:, None], "iqm")
    row = next(line for line in body.splitlines() if line.startswith("| cory "))
    assert [c.strip() for c in row.strip("|").split("|")] == [
        *("cory", "2", f"{np.mean(x):.3f}", f"{estimate:.3f} [{low:.3f}, {high:.3f}]", "")
    ]
    assert "](toy-study/performance_profile.png)" in body and "archived in `docs/toy-study/`" in body
    # The runs (GBs at full size) may go: the page is written again from the archive alone, the same.
    shutil.rmtree(tmp_path / "runs")
    page.write_text(f"# A page\n\nBefore.\n\n{START}\nstale\n{END}\n\nAfter.\n")
    main(["--study", str(study), "--report-only"])
    assert page.read_text() == text


def test_a_sequential_study_puts_its_looks_on_the_page(tmp_path, toy_model):
    study, page = write_study(tmp_path, toy_model, 'sequential = "pocock"\nstages = [2, 3]')
    main(["--study", str(study)])
    body = page.read_text().split(START)[1].split(END)[0]
    record = json.loads((tmp_path / "docs" / "toy-study" / "sequential.json").read_text())
    assert "Group-sequential design (pocock alpha spending, alpha 0.05, margin +-0.2, stages [2, 3])" in body
    assert f"stopped: {record['stopped']}" in body
    first = next(line for line in body.splitlines() if line.startswith(f"| {record['looks'][0]['seeds']} "))
    assert [c.strip() for c in first.strip("|").split("|")][:2] == ["2", f"{record['looks'][0]['level']:.2g}"]
    assert f"- **cory:happo** against cory: {record['verdicts']['cory:happo']}" in body


HEAD = '[study]\nname="x"\nout="o"\narchive="a"\npage="p.md"\n[design]\nalgos=["cory"]\n'


def test_bad_study_files_are_refused(tmp_path):
    cases = {
        "missing.toml": None,
        "broken.toml": "[study\n",
        "bare.toml": '[study]\nname = "x"\n',
        "unknown.toml": '[study]\nname="x"\nout="o"\narchive="a"\npage="p.md"\n[design]\nalgos=["cory"]\nwindow=5\n',
        "one-variant.toml": f"{HEAD}[variants]\nchat = {{ chat = true }}\n",
        "bad-variant.toml": f'{HEAD}[variants]\n"a b" = {{}}\nc = {{}}\n',
        "flat-variant.toml": f"{HEAD}[variants]\nchat = true\nraw = 1\n",
    }
    messages = {
        "missing.toml": "cannot be read",
        "broken.toml": "cannot be read",
        "bare.toml": "lacks study.out",
        "unknown.toml": r"\[design\] has no window",
        "one-variant.toml": "has one variant.*give two or more",
        "bad-variant.toml": "'a b' is not a folder name",
        "flat-variant.toml": "a table of settings per variant",
    }
    for name, text in cases.items():
        if text is not None:
            (tmp_path / name).write_text(text)
        with pytest.raises(UsageError, match=messages[name]):
            main(["--study", str(tmp_path / name)])


def test_a_study_of_variants_compares_each_arm_with_the_first_variant(tmp_path, toy_model):
    study, page = write_study(tmp_path, toy_model, "seeds = 2")
    text = study.read_text().replace('algos = ["cory", "cory:happo"]', 'algos = ["cory"]')
    study.write_text(text + "\n[variants]\nslow = {}\nfast = { lr = 1e-1, kl_coef = 0.0 }\n")
    main(["--study", str(study)])
    archive = tmp_path / "docs" / "toy-study"
    reports = {v: json.loads((archive / v / "report.json").read_text()) for v in ("slow", "fast")}
    assert reports["fast"]["settings"]["train"]["lr"] == 1e-1 and reports["slow"]["settings"]["train"]["lr"] == 3e-2
    assert (archive / "variants.png").read_bytes()[:4] == b"\x89PNG"
    body = page.read_text().split(START)[1].split(END)[0]
    assert "#### slow" in body and "#### fast" in body and "the variant fast adds lr 0.1, kl_coef 0.0." in body
    assert "One arm: nothing to decide" in body
    ends = {
        v: np.array(
            next(r for r in reports[v]["summary"] if r["learner"] == "mean")["eval"]["task_reward_mean"]["values"]
        )
        for v in reports
    }
    row = next(line for line in body.splitlines() if line.startswith("| cory | fast "))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[2] == "2" and cells[4] == f"{ends['fast'].mean():.3f} +- {ends['fast'].std():.3f}"
    assert cells[6].startswith(str(verdict(ends["fast"], ends["slow"], 0.2))), cells[6]
    reference = next(line for line in body.splitlines() if line.startswith("| cory | slow "))
    assert reference.strip("|").split("|")[-1].strip() == "reference"
    page.write_text(f"# A page\n\nBefore.\n\n{START}\nstale\n{END}\n\nAfter.\n")
    main(["--study", str(study), "--report-only"])
    assert page.read_text().split(START)[1].split(END)[0] == body


def test_a_learning_study_tests_each_seeds_end_against_its_start(tmp_path, toy_model):
    """``learning = true`` on a team game: each seed's last window against its first (Fisher exact, one-sided),
    from the archived metrics; the curves drawn, the dialogues shown."""
    from scipy import stats

    (tmp_path / "docs").mkdir()
    page = tmp_path / "docs" / "page.md"
    page.write_text(f"{START}\n{END}\n")
    study = tmp_path / "toy.toml"
    study.write_text(
        f"""
[study]
name = "toy"
out = "{tmp_path / "runs"}"
archive = "docs/toy-study"
page = "docs/page.md"

[design]
algos = ["cory"]
seeds = 2
final_window = 2
learning = true

[settings]
model = "{toy_model}"
task = "signal"
reward = "signal"
prompt_source = "auto"
context_length = 96
batch_size = 4
mini_batch_size = 2
ppo_epochs = 1
iterations = 4
report_to = "none"
progress = false
"""
    )
    main(["--study", str(study)])
    archive = tmp_path / "docs" / "toy-study"
    assert (archive / "learning.png").read_bytes()[:4] == b"\x89PNG"
    body = page.read_text().split(START)[1].split(END)[0]
    for seed in (0, 1):
        df = pd.read_csv(archive / "cory" / f"seed{seed}" / "metrics.csv")
        success = (df["llm_0/task_reward_mean"] + df["llm_1/task_reward_mean"]).to_numpy() * 4
        start, end = int(round(success[:2].sum())), int(round(success[-2:].sum()))
        p = stats.fisher_exact([[end, 8 - end], [start, 8 - start]], alternative="greater")[1]
        row = next(line for line in body.splitlines() if line.startswith(f"| cory | {seed} "))
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[2:] == [
            f"{start / 8:.3f} ({start}/8)",
            f"{end / 8:.3f} ({end}/8)",
            f"{p:.2g}",
            "yes" if p < 0.05 else "no",
        ]
    assert "- **cory** learned in " in body and "of 2 seeds" in body and "1. reward " in body
    with pytest.raises(ValueError, match="is not a count"):
        learned_in(np.array([0.1, 0.2, 0.3, 0.4]), games=4, window=2)


@pytest.fixture
def magrpo(monkeypatch):
    """The plug-in learner a study names (MAGRPO), registered from examples/plugins as its installed package
    would declare it."""
    monkeypatch.syspath_prepend(str(ROOT / "examples" / "plugins" / "magrpo"))
    from cory_magrpo import MAGRPO

    register_learner("magrpo", MAGRPO.factory, config=MAGRPO.config, supports=MAGRPO.supports)
    yield
    unregister_learner("magrpo")


@pytest.mark.parametrize("path", sorted((ROOT / "studies").glob("*.toml")), ids=lambda p: p.name)
def test_every_declared_study_reads_its_flags_parse_and_its_page_has_its_markers(path, magrpo):
    """A study declared in studies/ would otherwise fail only when its runs start."""
    study = load_study(path)
    for variant in variant_names(study):
        train, bench = parse_args(study_argv(study, variant))
        assert bench.seeds == study["design"].get("seeds", bench.seeds) and train.task == study["settings"]["task"]
    page = (ROOT / study["study"]["page"]).read_text()
    name = study["study"]["name"]
    assert f"<!-- study {name}: written by cory-bench --study -->" in page and f"<!-- /study {name} -->" in page
