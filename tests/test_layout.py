"""The package layout: one subpackage per concept, imports one way, modules of a readable size."""

from __future__ import annotations

import importlib
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import ROOT


def test_the_old_module_paths_are_retired_as_the_changelog_says():
    """cory-env 0.2 dropped the import aliases of 0.1's flat ``agents/`` (CHANGELOG.md lists the moves)."""
    for old in ("agents.ppo", "agents.trainer", "agents.checkpoint"):
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module(old)
    assert "| `agents.ppo` | `agents.learners.ppo` |" in (ROOT / "CHANGELOG.md").read_text()


def test_the_checkpoint_tool_runs_as_a_command():
    result = subprocess.run(
        [sys.executable, "-m", "cory_agents.training.checkpoint", "--help"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "verify" in result.stdout and "convert" in result.stdout


def test_every_subpackage_says_what_it_holds():
    for folder in sorted(p for p in (ROOT / "agents").iterdir() if (p / "__init__.py").exists()):
        module = importlib.import_module(f"cory_agents.{folder.name}")
        assert module.__doc__ and len(module.__doc__.split()) > 5, folder.name


def test_the_commands_are_console_scripts_and_the_examples_run_them():
    import tomllib

    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    for command, module, example in (
        ("cory-train", "cory_agents.cli.train", "train_cory.py"),
        ("cory-eval", "cory_agents.cli.evaluate", "evaluate.py"),
        ("cory-export", "cory_agents.cli.export", "export_model.py"),
    ):
        assert scripts[command] == f"{module}:main"
        spec = importlib.util.spec_from_file_location(f"_example_{example[:-3]}", ROOT / "examples" / example)
        script = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(script)
        assert script.main is importlib.import_module(module).main, example


def _package_modules() -> list[Path]:
    return sorted(p for package in ("agents", "cory_env") for p in (ROOT / package).rglob("*.py"))


#: Modules allowed more lines, and why.
LONGER_MODULES = {
    # The environment class: every AEC method of the game in one place, as PettingZoo's own
    # environments are written. What is not the AEC state machine lives in its own modules:
    # turn_prompts (how each turn is prompted), episode_record (turns, rewards, transcript),
    # context (the turn's token layout), speakers, spaces, templates.
    "cory_env/pioneer_observer.py": 520,
}


def test_no_module_has_much_over_400_lines_of_code():
    """The module docstring does not count: the environment's is its reference page."""
    import ast

    over = {}
    for path in _package_modules():
        source = path.read_text()
        tree = ast.parse(source)
        docstring_end = tree.body[0].end_lineno if ast.get_docstring(tree) is not None else 0
        name = str(path.relative_to(ROOT))
        size = len(source.splitlines()) - docstring_end
        if size > LONGER_MODULES.get(name, 420):
            over[name] = size
    assert not over, over


#: Imports each module named on the command line in a fresh child of one interpreter (a fork after the
#: third-party imports, which every module shares: one start-up instead of one a module), and prints which
#: speed modules each import brought in, as JSON.
SPEED_PROBE = """
import importlib, json, os, sys
import numpy, torch, transformers  # before the forks: what the children share
found = {}
for module in sys.argv[1:]:
    read, write = os.pipe()
    if os.fork() == 0:
        try:
            os.close(read)
            importlib.import_module(module)
            os.write(write, json.dumps(sorted(m for m in sys.modules if m.startswith("cory_agents.speed"))).encode())
        except BaseException:
            import traceback
            traceback.print_exc()
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as child:
        found[module] = json.loads(child.read() or '"the import failed"')
    os.wait()
print(json.dumps(found))
"""


def test_learners_actors_and_their_math_never_import_a_speed_mechanism():
    """A run switches speed mechanisms on (cory_agents.training.build, .registry): a padding-free model
    packs its own passes, so acting/ and learners/ call a model one plain way and read the same
    without them. Checked through every import, not only the direct ones, each module imported alone."""
    import ast
    import json

    paths = [
        p for folder in ("learners", "algorithms", "acting") for p in sorted((ROOT / "agents" / folder).glob("*.py"))
    ]
    modules = [f"cory_agents.{p.parent.name}.{p.stem}".removesuffix(".__init__") for p in paths]
    modules.append("cory_agents.training.build")  # the control: it switches the mechanisms on, so it imports them
    if hasattr(os, "fork"):
        probes = [[sys.executable, "-c", SPEED_PROBE, *modules]]
    else:  # no fork (Windows): one interpreter a module
        probes = [[sys.executable, "-c", SPEED_PROBE, module] for module in modules]
    found = {}
    for probe in probes:
        result = subprocess.run(probe, capture_output=True, text=True, cwd=ROOT, timeout=300)
        assert result.returncode == 0, result.stderr[-2000:]
        found |= json.loads(result.stdout)
    assert sorted(found) == sorted(modules)
    assert "cory_agents.speed.padding_free" in found.pop("cory_agents.training.build")  # the probe sees imports
    for module, speed in found.items():
        assert speed == [], f"{module} imports {speed}"
    for path in paths:
        tree = ast.parse(path.read_text())
        imported = [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
        assert not [m for m in imported if m.startswith("cory_agents.speed")], path.name


def test_one_thing_is_named_learners():
    import cory_env.wrappers
    from cory_agents.training.registry import LEARNERS

    assert callable(LEARNERS["ppo"].factory)  # the learner registry
    assert cory_env.wrappers.LEARNER_NAMES == ("llm_0", "llm_1") and not hasattr(cory_env.wrappers, "LEARNERS")


def test_a_run_is_built_one_way_and_the_trainer_is_the_loop():
    """config -> build -> trainer: no module of the three imports a later one, even through others,
    and ``Trainer.__init__`` only calls the two steps and keeps what they return."""
    import ast

    steps = (
        "cory_agents.training.registry",
        "cory_agents.training.config",
        "cory_agents.training.build",
        "cory_agents.training.trainer",
    )
    for i, step in enumerate(steps[:-1]):
        probe = f"import sys, {step}; print(sorted(m for m in {steps[i + 1 :]!r} if m in sys.modules))"
        result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=300)
        assert result.returncode == 0, result.stderr[-2000:]
        assert result.stdout.strip() == "[]", f"{step} imports {result.stdout.strip()}"
    tree = ast.parse((ROOT / "agents" / "training" / "trainer.py").read_text())
    init = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    assert init.end_lineno - init.body[0].lineno <= 15, (
        "Trainer.__init__ grew: put settings in resolve, parts in assemble"
    )


def test_the_tests_mirror_the_packages():
    """tests/cory_env/..., tests/agents/<subpackage>/..., tests/benchmarks/: each folder names a real one;
    what the tests share is in tests/support/ and tests/conftest.py, and no test file imports another."""
    import ast

    tests = ROOT / "tests"
    for folder in sorted(p for p in tests.rglob("*") if p.is_dir() and p.name != "__pycache__"):
        parts = folder.relative_to(tests).parts
        if parts[0] in ("cory_env", "agents", "benchmarks"):
            assert (ROOT / folder.relative_to(tests)).is_dir(), f"{folder} mirrors no folder of the repository"
    for path in tests.rglob("test_*.py"):
        tree = ast.parse(path.read_text())
        imported = [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
        assert not [m for m in imported if m.rpartition(".")[2].startswith("test_")], path.name
