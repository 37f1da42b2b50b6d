"""The packages cory-env installs (everything else is in pyproject.toml).

The folder ``agents/`` installs as the import package ``cory_agents``: a top-level ``agents`` would
share its name with the OpenAI Agents SDK's (``pip install openai-agents``), and each install would
overwrite the other's files. So code imports ``cory_agents.learners``, ``cory_agents.training``, ...

An editable install (``pip install -e .``, ``make setup``) puts one folder on ``sys.path``,
``build/editable/``, holding a link per import package: ``cory_env`` to ``cory_env/`` and ``cory_agents``
to ``agents/``. Editors and type checkers (Pylance/pyright, mypy, jedi) find modules on ``sys.path``
only: setuptools' default for a renamed folder, an import hook that maps ``cory_agents`` to ``agents/``
at run time, left every import unresolved for them. The links are to folders, not to each file as
setuptools' ``editable_mode=strict`` makes them, so a module added to ``agents/`` imports without
reinstalling. ``--config-settings editable_mode=lenient`` (or ``strict``, ``compat``) still picks
setuptools' own way, and where no link can be made (Windows without the symlink privilege) the install
falls back to the import hook. tests/test_packaging.py checks both packages resolve without it.
"""

import os
from pathlib import Path

from setuptools import find_packages, setup
from setuptools.command.editable_wheel import editable_wheel

PACKAGE_DIR = {"cory_agents": "agents"}  # import package: its folder, where they differ
PACKAGES = [*find_packages(include=["cory_env*"]), *(f"cory_{p}" for p in find_packages(include=["agents*"]))]


class LinkedPackages:
    """What an editable wheel holds (setuptools' ``EditableStrategy``): a ``.pth`` file naming ``folder``."""

    def __init__(self, name: str, folder: Path):
        self.name, self.folder = name, folder

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        return None

    def __call__(self, wheel, files, mapping):
        wheel.writestr(f"__editable__.{self.name}.pth", f"{self.folder}\n".encode())


class EditableWheel(editable_wheel):
    """``pip install -e .``: the import packages as links in build/editable/ (the module docstring says why)."""

    def _select_strategy(self, name, tag, build_lib):
        if self.mode:  # one of setuptools' own, asked for by name
            return super()._select_strategy(name, tag, build_lib)
        project = Path(self.project_dir).resolve()
        folder = project / "build" / "editable"
        try:
            folder.mkdir(parents=True, exist_ok=True)
            for package in (p for p in PACKAGES if "." not in p):
                # A new link, renamed over the old one: an import meanwhile finds one or the other.
                new = folder / f"{package}.new"
                new.unlink(missing_ok=True)
                new.symlink_to(project / PACKAGE_DIR.get(package, package), target_is_directory=True)
                os.replace(new, folder / package)
        except OSError:
            return super()._select_strategy(name, tag, build_lib)
        return LinkedPackages(name, folder)


setup(packages=PACKAGES, package_dir=PACKAGE_DIR, cmdclass={"editable_wheel": EditableWheel})
