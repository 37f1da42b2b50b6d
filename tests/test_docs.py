"""The documentation site builds without a warning, and its generated pages follow the code.

`mkdocs build --strict` fails on any warning: a broken link or anchor, a page missing from the
nav, a docstring mkdocstrings cannot parse, an API object that no longer exists.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import ROOT

DOCS = ROOT / "docs"


def _load_hook(name: str):
    spec = importlib.util.spec_from_file_location(f"_docs_hook_{name}", DOCS / "hooks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = dict(os.environ, HF_HUB_OFFLINE="1", NO_COLOR="1")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, f"mkdocs build --strict failed:\n{result.stdout}\n{result.stderr}"
    assert "WARNING" not in result.stderr, result.stderr
    return out


def page(site: Path, name: str) -> str:
    return (site / name / "index.html").read_text(encoding="utf-8")


def text(html: str) -> str:
    """The page's text, without tags (code blocks are split into highlighted spans)."""
    return re.sub(r"<[^>]+>", "", html).replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def _nav_pages(nav) -> list[str]:
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, dict):
        return [p for value in nav.values() for p in _nav_pages(value)]
    return [p for item in nav for p in _nav_pages(item)]


def test_every_nav_page_is_built(site):
    import yaml

    nav = _nav_pages(yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))["nav"])
    assert "index.md" in nav and "api.md" in nav and "cli.md" in nav
    for src in nav:
        assert (DOCS / src).is_file(), f"the nav lists {src}, which docs/ lacks"
        built = site / ("index.html" if src == "index.md" else src.removesuffix(".md") + "/index.html")
        assert built.is_file(), src
    assert "make demo" in text((site / "index.html").read_text(encoding="utf-8"))


def test_cli_page_is_the_scripts_own_help(site):
    from cory_agents.training.config import TrainConfig

    html = text(page(site, "cli"))
    assert "cli-reference" not in html
    for field in dataclasses.fields(TrainConfig):  # every flag, with its help text as the parser prints it
        assert f"--{field.name.replace('_', '-')}" in html, field.name
    assert "--role-exchange-period" in html
    assert "iterations between role exchanges" in html
    for script in ("play_episode", "plot_runs"):
        assert f"usage: python examples/{script}.py" in html
    for command in ("cory-train", "cory-eval", "cory-export", "cory-bench"):
        assert f"usage: {command}" in html


def test_every_example_script_with_a_command_line_is_in_the_cli_reference():
    listed = {spec.partition(":")[0] for spec in _load_hook("cli_reference").COMMANDS.values()}
    for script in sorted((ROOT / "examples").glob("*.py")):
        if "ArgumentParser" in script.read_text(encoding="utf-8"):
            path = script.relative_to(ROOT).as_posix()
            assert path in listed, f"{path} has a command line: add it to COMMANDS in docs/hooks/cli_reference.py"


def test_api_page_documents_the_public_api(site):
    html = page(site, "api")
    for identifier in (
        "cory_env.pioneer_observer.PioneerObserverEnv",
        "cory_env.pioneer_observer.env",
        "cory_env.wrappers.collective_reward.CollectiveRewardWrapper",
        "cory_env.wrappers.role_exchange.RoleExchangeWrapper",
        "cory_env.prompts.Prompt",
        "cory_env.templates.SENTIMENT_OBSERVER",
        "cory_env.rewards.base.RewardFunctionError",
        "cory_env.tasks.sentiment.sentiment_prompts",
        "cory_env.models.load_causal_lm",
        "cory_agents.acting.actor.LMActor",
        "cory_agents.learners.ppo.PPOLearner",
        "cory_agents.learners.ppo.PPOConfig",
        "cory_agents.training.trainer.Trainer",
        "cory_agents.training.config.TrainConfig",
        "cory_agents.training.registry.LEARNERS",
    ):
        assert f'id="{identifier}"' in html, identifier
    # Sphinx roles became links or code, doctest prompts became code blocks.
    assert not re.search(r":(class|func|meth|attr|mod|data):`", html)
    assert '<a class="autorefs autorefs-internal"' in html
    assert "doctest:" not in html


def _modules(package: str, folder: str = "") -> list[str]:
    path = [str(ROOT / (folder or package))]
    found = []
    for info in pkgutil.walk_packages(path, prefix=f"{package}."):
        if not info.ispkg and not info.name.rsplit(".", 1)[-1].startswith("_"):
            found.append(info.name)
    return found


def test_every_module_is_in_the_api_page():
    documented = re.findall(r"^::: ([\w.]+)", (DOCS / "api.md").read_text(encoding="utf-8"), flags=re.M)
    for module in _modules("cory_env") + _modules("cory_agents", "agents"):
        assert any(d == module or d.startswith(module + ".") for d in documented), (
            f"{module} is not in docs/api.md: add a '::: {module}' line in its section"
        )


@pytest.mark.slow
def test_index_examples_run(tmp_path):
    """The Python examples on the home page run as written (embedded model, offline)."""
    blocks = re.findall(r"```python\n(.*?)```", (DOCS / "index.md").read_text(encoding="utf-8"), flags=re.S)
    assert len(blocks) == 2
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    for code in blocks:
        result = subprocess.run(
            [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
        )
        assert result.returncode == 0, f"{code}\n{result.stderr[-3000:]}"
    assert (tmp_path / "runs" / "quick" / "metrics.csv").is_file()
