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

    [variants]                                       # optional: the same arms under other settings
    raw = {}                                         # the first is the reference
    chat = { chat = true }

``cory-bench --study FILE`` trains what is missing (``--resume`` is implied: a stopped study continues),
then archives the runs (:mod:`~cory_agents.evaluation.archive`) and writes the page's section from the
archive; ``cory-bench --study FILE --report-only`` writes the page again from the archive, training
nothing. The section holds the declared design, the decision of each arm against the baseline (the
sequential looks, or the fixed design's verdict), the scores over seeds with the IQM and its stratified
bootstrap interval, the probability of improvement over the baseline, a performance profile (PNG) and the
commits the runs were made with; the archived report.md has the rest.

A study whose design says ``learning = true`` asks of each arm whether it learned (a game's success rate at the
end of training against its own start, seed by seed: :mod:`~cory_agents.evaluation.learning`) instead.

A study with ``[variants]`` asks how a setting changes each arm (the chat form against the raw form): each
variant is a benchmark of its own, with the settings it adds, in ``out/<variant>`` and ``archive/<variant>``
(the same seeds and held-out prompts), written as above under a heading of its own; then each arm's runs in
every later variant are decided against its runs in the first (:mod:`~cory_agents.evaluation.variants`).
"""

from __future__ import annotations

import json
import os
import re
import tomllib
from pathlib import Path
from typing import Any

import numpy as np

from cory_agents.evaluation.archive import archive, report_only
from cory_agents.evaluation.benchmark_report import code_line
from cory_agents.evaluation.learning import learning_section
from cory_agents.evaluation.plan import compared_metric, comparison_values
from cory_agents.evaluation.report import markdown_table, write_sections
from cory_agents.evaluation.rl_statistics import (
    plot_performance_profiles,
    probability_of_improvement,
    stratified_bootstrap_ci,
)
from cory_agents.evaluation.sequential import LOOKS
from cory_agents.evaluation.variants import compare_variants
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
    "learning",
)
#: The design's keys that are the study's own, not cory-bench flags.
STUDY_ONLY = ("learning",)
PROFILE = "performance_profile.png"
NAME = re.compile(r"[A-Za-z0-9_-]+")


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
    variants = study.get("variants", {})
    if not isinstance(variants, dict) or not all(isinstance(v, dict) for v in variants.values()):
        raise UsageError(f"--study {path}: [variants] holds a table of settings per variant (chat = {{ chat = true }})")
    if bad := [name for name in variants if not NAME.fullmatch(name)]:
        raise UsageError(
            f"--study {path}: the variant name {bad[0]!r} is not a folder name: use letters, digits, - and _"
        )
    if len(variants) == 1:
        raise UsageError(
            f"--study {path}: [variants] has one variant, and a variant is compared with the first: give two or more"
        )
    root = path.resolve().parent
    while not (root / ".git").exists() and root.parent != root:  # paths of the repository holding the study
        root = root.parent
    study["root"] = str(root if (root / ".git").exists() else path.resolve().parent)
    head["file"] = str(path)
    return study


def variant_names(study: dict[str, Any]) -> list[str]:
    """The study's variants, the reference first; ``[""]`` for a study of one benchmark."""
    return list(study.get("variants", {})) or [""]


def study_argv(study: dict[str, Any], variant: str = "") -> list[str]:
    """The cory-bench command line of ``study``'s runs (of its ``variant``: its settings added, in ``out/variant``)."""
    argv: list[str] = []
    for name, value in {**study.get("settings", {}), **study.get("variants", {}).get(variant, {})}.items():
        argv += _flag(name, value)
    design = {k: v for k, v in study["design"].items() if k not in STUDY_ONLY}
    if design.pop("metric", None):
        argv += ["--plan-metric", study["design"]["metric"]]
    for name, value in design.items():
        argv += _flag(name, value)
    return [*argv, "--out", str(Path(study["study"]["out"]).expanduser() / variant)]


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
    for variant in variant_names(study):
        out = Path(study["study"]["out"]).expanduser() / variant
        train, bench = parse_args(
            [*study_argv(study, variant), *(["--resume"] if (out / "benchmark.json").is_file() else [])]
        )
        if bench.sequential:
            run_sequential(train, bench, run_benchmark)
        else:
            run_benchmark(train, bench)
    return finish(study, train_first=True)


def finish(study: dict[str, Any], train_first: bool) -> Path:
    """Archive the study's runs (``train_first``: they were just trained) and write its page section; returns
    the page."""
    folders = {variant: archive_folder(study) / variant for variant in variant_names(study)}
    for variant, dest in folders.items():
        if train_first:
            archive(Path(study["study"]["out"]).expanduser() / variant, dest)
        else:
            report_only(dest)
    page = Path(study["root"]) / study["study"]["page"]
    name = study["study"]["name"]
    markers = (f"<!-- study {name}: written by cory-bench --study -->", f"<!-- /study {name} -->")
    if list(folders) == [""]:
        body = section(study, folders[""], page)
    else:
        parts = [f"#### {variant}\n\n{section(study, dest, page, variant)}" for variant, dest in folders.items()]
        body = "\n\n".join([compare_variants(study, folders, page), *parts])
    write_sections(page, {markers: body})
    return page


def section(study: dict[str, Any], folder: Path, page: Path, variant: str = "") -> str:
    """The page's section of the study (of its ``variant``), from its archive in ``folder``."""
    report = json.loads((folder / "report.json").read_text())
    design = study["design"]
    added = study.get("variants", {}).get(variant, {})
    declared = (
        f"Declared before the runs (`{Path(study['study']['file']).resolve().relative_to(study['root']).as_posix()}`): "
        + ", ".join(f"{k} {design[k]}" for k in DESIGN if k in design and k != "algos")
        + f"; settings: {', '.join(f'{k} {v}' for k, v in study.get('settings', {}).items())}"
        + (f"; the variant {variant} adds {', '.join(f'{k} {v}' for k, v in added.items())}" if added else "")
        + "."
    )
    archived = [
        code_line(report),
        f"The runs, cory-bench's report of them (`report.md`) and the looks are archived in "
        f"`{folder.relative_to(study['root']).as_posix()}/`; `cory-bench --study FILE --report-only` rewrites this "
        "section from them.",
    ]
    if design.get("learning"):  # did each arm learn, against its own start
        return "\n".join([declared, "", learning_section(study, folder, page), "", *archived])
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
        declared,
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
        *archived,
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
    if len(report["algos"]) == 1:
        return ["One arm: nothing to decide against a baseline here."]
    if not decisions:
        return ["No margin was declared: no decision."]
    return [f"- **{p['algo']}** against {p['against']}: {p['verdict']}" for p in decisions["pairs"]]
