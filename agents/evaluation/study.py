"""``cory-bench --study FILE``: a study declared in a file, run to its decision, archived, and written into its page.

A study is a comparison made once and kept: its design is fixed before the runs (arms, settings, the metric
and its window, the margin that matters, alpha, the stages of seeds, the budget) and its page is written
from its archived runs alone. The file (TOML) declares it::

    [study]
    name = "signalling"
    out = "~/.cache/cory_env/studies/signalling"    # the runs, with their checkpoints (resumable)
    archive = "docs/multi-agent/signalling-study"    # their record, in the repository
    page = "docs/multi-agent-algorithms.md"          # the page, between <!-- study signalling --> and
                                                     # <!-- /study signalling -->

    [design]
    algos = ["cory", "cory:mappo", "cory:happo"]     # the first is the baseline
    metric = "collective_reward"
    final_window = 10
    margin = 0.15
    alpha = 0.05
    sequential = "obrien-fleming"                    # or "" with seeds = N: a fixed design
    stages = [4, 8, 12]
    budget_hours = 12

    [settings]                                       # cory-train's flags, by field name
    task = "signal"
    batch_size = 32

``cory-bench --study FILE`` trains what is missing (``--resume`` is implied: a stopped study continues),
then archives the runs (:mod:`~cory_agents.evaluation.archive`) and writes the page's section from the
archive; ``cory-bench --study FILE --report-only`` writes the page again from the archive, training
nothing. The section holds the declared design, the decision of each arm against the baseline (the
sequential looks, or the fixed design's verdict), the scores over seeds with the IQM and its stratified
bootstrap interval, the probability of improvement over the baseline, a performance profile (PNG) and the
commits the runs were made with; the archived report.md has the rest.
"""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path
from typing import Any

import numpy as np

from cory_agents.evaluation.archive import archive, report_only
from cory_agents.evaluation.benchmark_report import code_line
from cory_agents.evaluation.plan import compared_metric, comparison_values
from cory_agents.evaluation.report import markdown_table, write_sections
from cory_agents.evaluation.rl_statistics import (
    plot_performance_profiles,
    probability_of_improvement,
    stratified_bootstrap_ci,
)
from cory_agents.evaluation.sequential import LOOKS
from cory_env.errors import UsageError

#: The design's keys and the cory-bench flags they become.
DESIGN = (
    "algos",
    "seeds",
    "metric",
    "final_window",
    "margin",
    "alpha",
    "sequential",
    "stages",
    "budget_hours",
    "jobs",
)
PROFILE = "performance_profile.png"


def load_study(path: str | Path) -> dict[str, Any]:
    """The study file at ``path``, checked: ``[study]`` with name, out, archive and page; ``[design]``; ``[settings]``."""
    path = Path(path)
    try:
        study = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise UsageError(f"--study {path} cannot be read ({error}): give a study file (TOML)") from None
    head = study.get("study", {})
    missing = [f"study.{k}" for k in ("name", "out", "archive", "page") if not head.get(k)]
    missing += [] if study.get("design", {}).get("algos") else ["design.algos"]
    if missing:
        raise UsageError(
            f"--study {path} lacks {', '.join(missing)}: a study file has [study] name, out, archive, page; "
            f"[design] algos, ...; [settings]"
        )
    unknown = sorted(set(study["design"]) - set(DESIGN))
    if unknown:
        raise UsageError(f"--study {path}: [design] has no {', '.join(unknown)}: choose among {', '.join(DESIGN)}")
    root = path.resolve().parent
    while not (root / ".git").exists() and root.parent != root:  # paths of the repository holding the study
        root = root.parent
    study["root"] = str(root if (root / ".git").exists() else path.resolve().parent)
    head["file"] = str(path)
    return study


def study_argv(study: dict[str, Any]) -> list[str]:
    """The cory-bench command line of ``study``'s runs."""
    argv: list[str] = []
    for name, value in study.get("settings", {}).items():
        argv += _flag(name, value)
    design = dict(study["design"])
    if design.pop("metric", None):
        argv += ["--plan-metric", study["design"]["metric"]]
    for name, value in design.items():
        argv += _flag(name, value)
    return [*argv, "--out", str(Path(study["study"]["out"]).expanduser())]


def _flag(name: str, value: Any) -> list[str]:
    flag = f"--{name.replace('_', '-')}"
    if isinstance(value, bool):
        return [flag, str(value)]
    if isinstance(value, list):
        return [flag, *map(str, value)]
    return [flag, str(value)]


def archive_folder(study: dict[str, Any]) -> Path:
    return Path(study["root"]) / study["study"]["archive"]


def run_study(path: str | Path, report_only_: bool = False) -> Path:
    """``cory-bench --study PATH``: train what the study still lacks (resuming it), archive it, write its page
    section; with ``report_only_`` only the section, from the archive. Returns the page."""
    from cory_agents.evaluation.reward_benchmark import parse_args, run_benchmark
    from cory_agents.evaluation.sequential import run_sequential

    study = load_study(path)
    if report_only_:
        return finish(study, train_first=False)
    argv = study_argv(study)
    out = Path(study["study"]["out"]).expanduser()
    train, bench = parse_args([*argv, *(["--resume"] if (out / "benchmark.json").is_file() else [])])
    if bench.sequential:
        run_sequential(train, bench, run_benchmark)
    else:
        run_benchmark(train, bench)
    return finish(study, train_first=True)


def finish(study: dict[str, Any], train_first: bool) -> Path:
    """Archive the study's runs (``train_first``: they were just trained) and write its page section; returns
    the page."""
    dest = archive_folder(study)
    if train_first:
        out = Path(study["study"]["out"]).expanduser()
        archive(out, dest)
    else:
        report_only(dest)
    page = Path(study["root"]) / study["study"]["page"]
    name = study["study"]["name"]
    markers = (f"<!-- study {name}: written by cory-bench --study -->", f"<!-- /study {name} -->")
    write_sections(page, {markers: section(study, dest, page)})
    return page


def section(study: dict[str, Any], folder: Path, page: Path) -> str:
    """The page's section of the study, from its archive in ``folder``."""
    report = json.loads((folder / "report.json").read_text())
    design = study["design"]
    part, metric = compared_metric(report, design.get("metric", ""))
    baseline = report["baseline"]
    scores = {a: comparison_values(report, a, part, metric) for a in report["algos"]}
    rows = []
    for algo, x in scores.items():
        estimate, low, high = stratified_bootstrap_ci(x[:, None], "iqm")
        improvement = (
            ""
            if algo == baseline
            else "{:.2f} [{:.2f}, {:.2f}]".format(*probability_of_improvement(x[:, None], scores[baseline][:, None]))
        )
        rows.append([algo, str(x.size), f"{np.mean(x):.3f}", f"{estimate:.3f} [{low:.3f}, {high:.3f}]", improvement])
    values = np.concatenate(list(scores.values()))
    thresholds = np.linspace(min(values.min(), 0.0), max(values.max(), 1e-9), 50)
    plot_performance_profiles(
        {a: x[:, None] for a, x in scores.items()},
        thresholds,
        folder / PROFILE,
        xlabel=metric,
        title=study["study"]["name"],
    )
    relative = Path(os.path.relpath(folder, page.parent))
    lines = [
        f"Declared before the runs (`{Path(study['study']['file']).resolve().relative_to(study['root']).as_posix()}`): "
        + ", ".join(f"{k} {design[k]}" for k in DESIGN if k in design and k != "algos")
        + f"; settings: {', '.join(f'{k} {v}' for k, v in study.get('settings', {}).items())}.",
        "",
        *_decisions(folder, report),
        "",
        f"{metric} over seeds ("
        + (
            "the final policies' held-out evaluation"
            if part == "eval"
            else f"the last {report['final_window']} training iterations"
        )
        + f"): mean, IQM with its 95% stratified bootstrap interval, and the probability that a run of the arm "
        f"scores above a run of {baseline} [95% bootstrap interval].",
        "",
        markdown_table(["arm", "seeds", "mean", "IQM [95%]", f"P(arm > {baseline})"], rows),
        "",
        f"![performance profile]({(relative / PROFILE).as_posix()})",
        "",
        code_line(report),
        f"The runs, cory-bench's report of them (`report.md`) and the looks are archived in "
        f"`{folder.relative_to(study['root']).as_posix()}/`; `cory-bench --study FILE --report-only` rewrites this "
        "section from them.",
    ]
    return "\n".join(lines)


def _decisions(folder: Path, report: dict[str, Any]) -> list[str]:
    """Each arm's decision: the sequential study's (its looks), else the fixed design's verdict (``--margin``)."""
    looks_path = folder / LOOKS
    if looks_path.is_file():
        record = json.loads(looks_path.read_text())
        head = (
            f"Group-sequential design ({record['spending']} alpha spending, alpha {record['alpha']:g}, margin "
            f"+-{record['margin']:g}, stages {record['stages']}); stopped: {record.get('stopped', 'not yet')}."
        )
        looks = [
            [
                str(look["seeds"]),
                f"{look['level']:.2g}",
                *(p["decision"] or "undecided" for p in look["pairs"].values()),
            ]
            for look in record["looks"]
        ]
        arms = list(record["looks"][0]["pairs"]) if record["looks"] else []
        table = markdown_table(["seeds", "nominal level", *arms], looks) if looks else ""
        verdicts = [f"- **{a}** against {report['baseline']}: {w}" for a, w in record.get("verdicts", {}).items()]
        return [head, "", table, "", *verdicts]
    decisions = report.get("decisions")
    if not decisions:
        return ["No margin was declared: no decision."]
    return [f"- **{p['algo']}** against {p['against']}: {p['verdict']}" for p in decisions["pairs"]]
