"""How cory-env installs: one version everywhere, an editable install that editors can read, and a
user's ``pip install`` of cory-env beside the OpenAI Agents SDK, in either order.

The SDK (``pip install openai-agents``) installs a top-level ``agents``; the repository's folder
``agents/`` installs as ``cory_agents`` (setup.py), so neither install touches the other's files.
Each of those tests makes a fresh virtual environment, builds cory-env from a copy of the repository
with ``pip install`` (not editable), and installs the SDK with its dependencies from the package index.
The heavy dependencies (torch, transformers, ...) are not downloaded again: a ``.pth`` file lets the
new environment see this one's site-packages, after its own.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

import pytest

from tests.support import ROOT

SDK = "openai-agents"

# What is never part of the build (.gitignore's outputs, the caches) stays behind in the copy.
NOT_COPIED = shutil.ignore_patterns(
    ".venv", ".git", "build", "dist", "site", "runs", "*.egg-info", "__pycache__", ".*_cache", ".hypothesis"
)

# Run by the new environment's python, outside the repository: where each package comes from, and
# whether the SDK's files are still the ones its wheel installed (pip's RECORD holds their hashes).
PROBE = r"""
import base64, hashlib, importlib, importlib.metadata as md, json, sys, sysconfig

site = sysconfig.get_paths()["purelib"]

def files(name):  # installed in the new environment (this one's packages are on sys.path too)
    dist = next(iter(md.distributions(name=name, path=[site])), None)
    return dist and (dist, [f for f in dist.files or () if f.parts[0] == "agents"])

def changed(dist, records):
    out = []
    for f in records:
        if f.hash is None:
            continue
        digest = hashlib.new(f.hash.mode, f.locate().read_bytes()).digest()
        if base64.urlsafe_b64encode(digest).rstrip(b"=").decode() != f.hash.value:
            out.append(str(f))
    return out

state = {"site": site, "path0": sys.path[0], "modules": {}}
for module in sys.argv[1:]:
    try:
        state["modules"][module] = importlib.import_module(module).__file__
    except ImportError as exc:
        state["modules"][module] = f"ImportError: {exc}"
agents = sys.modules.get("agents")
state["sdk_names"] = bool(agents) and all(hasattr(agents, n) for n in ("Agent", "Runner", "function_tool"))
sdk, cory = files("openai-agents"), files("cory-env")
if sdk:
    state["sdk_agents_files"] = [str(f) for f in sdk[1]]
    state["sdk_changed"] = changed(*sdk)
if cory:
    state["cory_files_in_agents"] = [str(f) for f in cory[1]]
print(json.dumps(state))
"""


def _run(command: list[str], **kwargs) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600, **kwargs)
    assert result.returncode == 0, f"{' '.join(command)} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


def test_the_version_is_the_same_everywhere_it_is_stated():
    """pyproject.toml, ``cory_env.__version__``, the installed metadata (``pip show cory-env``) and the
    latest release in CHANGELOG.md; an "Unreleased" section there is for a later version."""
    import importlib.metadata

    import cory_env

    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert cory_env.__version__ == version, f"cory_env.__version__ is {cory_env.__version__}, not {version}"
    installed = importlib.metadata.version("cory-env")
    assert installed == version, f"this environment has cory-env {installed} installed: run `make setup` again"
    changelog = (ROOT / "CHANGELOG.md").read_text()
    releases = re.findall(r"^## (\S+) \(\d{4}-\d{2}-\d{2}\)$", changelog, flags=re.MULTILINE)
    assert releases[0] == version, f"CHANGELOG.md's latest release is {releases[0]}, pyproject.toml says {version}"
    unreleased = re.findall(r"^## Unreleased \((\S+)\)$", changelog, flags=re.MULTILINE)
    assert ".".join(version.split(".")[:2]) not in unreleased, "CHANGELOG.md: the version is out, not unreleased"


#: Run by this environment's python outside the repository: where jedi finds each name given, with the
#: interpreter's sys.path and no import hook, as pyright (Pylance) and mypy look (they read sys.path and
#: run no code). setuptools' default editable install of a renamed folder is such a hook, which jedi alone
#: would run; setup.py's links are on sys.path instead. Then where ``cory_agents``'s modules are looked for.
STATIC_PROBE = r"""
import importlib.machinery, importlib.util, json, sys
import jedi

plain = (importlib.machinery.BuiltinImporter, importlib.machinery.FrozenImporter, importlib.machinery.PathFinder)
sys.meta_path[:] = [finder for finder in sys.meta_path if finder in plain]
environment = jedi.InterpreterEnvironment()  # this interpreter, without the hooks
found = {}
for name in sys.argv[1:]:
    script = jedi.Script(f"import {name.rpartition('.')[0]}\n{name}", path="probe.py", environment=environment)
    found[name] = [str(d.module_path) for d in script.goto(2, len(name), follow_imports=True)]
spec = importlib.util.find_spec("cory_agents")
print(json.dumps({"found": found, "cory_agents": spec and spec.submodule_search_locations}))
"""


def test_editors_and_type_checkers_resolve_both_import_packages(tmp_path):
    """An editable install (``make setup``, ``pip install -e .``) that static tools read: jedi, without
    import hooks, goes to a definition in each package, in the repository's own file. ``cory_agents`` is
    looked for in ``agents/`` itself (through a link), not in a copy or a tree of links to each file
    (setuptools' ``editable_mode=strict``), so a module added there imports without reinstalling."""
    definitions = {
        "cory_agents.learners.ppo.PPOLearner": ROOT / "agents" / "learners" / "ppo.py",
        "cory_env.pioneer_observer.PioneerObserverEnv": ROOT / "cory_env" / "pioneer_observer.py",
    }
    state = json.loads(_run([sys.executable, "-c", STATIC_PROBE, *definitions], cwd=tmp_path).stdout)
    for name, file in definitions.items():
        paths = state["found"][name]
        assert paths, f"{name} does not resolve without an import hook: reinstall with `make setup` (setup.py)"
        assert [Path(p).resolve() for p in paths] == [file], f"{name} resolves to {paths}, not to {file}"
    where = [Path(p).resolve() for p in state["cory_agents"] or ()]
    assert where == [ROOT / "agents"], f"cory_agents is looked for in {where}: a new module would need a reinstall"


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    """A copy of the working tree to build from (an in-tree build would write build/ into the repository);
    the SDK must be downloadable, else the module skips."""
    where = tmp_path_factory.mktemp("packaging")
    check = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--dest", str(where / "download"), SDK],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if check.returncode != 0:
        reason = (check.stderr.strip().splitlines() or ["no output"])[-1]
        pytest.skip(f"cannot download {SDK} from the package index (is PyPI reachable?): {reason}")
    return Path(shutil.copytree(ROOT, where / "cory-env", ignore=NOT_COPIED))


def _new_venv(where: Path) -> Path:
    """A fresh virtual environment whose python also sees this one's packages (after its own)."""
    _run([sys.executable, "-m", "venv", str(where)])
    python = where / "bin" / "python"
    site = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip())
    ours = dict.fromkeys(sysconfig.get_paths()[key] for key in ("purelib", "platlib"))  # this environment's
    (site / "_cory_env_test_heavy_dependencies.pth").write_text("".join(f"{p}\n" for p in ours))
    return python


def _state(python: Path, cwd: Path, *modules: str) -> dict:
    return json.loads(_run([str(python), "-c", PROBE, *modules], cwd=cwd).stdout)


@pytest.mark.slow
@pytest.mark.parametrize("first", ["sdk", "cory-env"])
def test_cory_env_and_the_openai_agents_sdk_install_side_by_side(source, tmp_path, first):
    elsewhere = tmp_path / "elsewhere"  # the working directory: the repository's folders are not on sys.path
    elsewhere.mkdir()
    assert ROOT not in elsewhere.resolve().parents
    python = _new_venv(tmp_path / "venv")
    installs = {"sdk": [SDK], "cory-env": ["--no-deps", str(source)]}
    for name in (first, *(n for n in installs if n != first)):
        _run([str(python), "-m", "pip", "install", *installs[name]], cwd=elsewhere)

    state = _state(python, elsewhere, "agents", "cory_agents.learners.ppo", "cory_env")
    site = Path(state["site"])
    assert site.is_relative_to(tmp_path / "venv") and state["path0"] in ("", str(elsewhere))
    for module, file in state["modules"].items():
        assert Path(file).is_relative_to(site), f"{module} comes from {file}, not from the new environment"
    assert state["modules"]["agents"] == str(site / "agents" / "__init__.py")
    assert state["sdk_names"], "`import agents` is not the OpenAI Agents SDK (no Agent, Runner, function_tool)"
    # The SDK's files are byte for byte what its wheel installed, and cory-env's record owns none of them.
    assert "agents/__init__.py" in state["sdk_agents_files"] and len(state["sdk_agents_files"]) > 20
    assert state["sdk_changed"] == []
    assert state["cory_files_in_agents"] == []

    help_ = _run([str(python.parent / "cory-train"), "--help"], cwd=elsewhere)
    assert help_.stdout.startswith("usage: cory-train")

    # Uninstalling the one installed second leaves the first whole.
    gone = "cory-env" if first == "sdk" else SDK
    _run([str(python), "-m", "pip", "uninstall", "--yes", gone], cwd=elsewhere)
    state = _state(python, elsewhere, "agents" if first == "sdk" else "cory_agents.learners.ppo")
    if first == "sdk":
        assert state["sdk_names"] and state["sdk_changed"] == [] and "cory_files_in_agents" not in state
        assert not (site / "cory_agents").exists() and not (site / "cory_env").exists()
    else:
        assert Path(state["modules"]["cory_agents.learners.ppo"]).is_relative_to(site / "cory_agents")
        assert "sdk_agents_files" not in state and not (site / "agents").exists()
