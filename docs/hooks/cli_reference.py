"""MkDocs hook: the command-line reference, generated at build time from the scripts' own --help.

Each entry of ``COMMANDS`` maps the command a reader types to the function that builds its
argparse parser, as ``path/to/script.py:function`` (loaded from the file) or
``package.module:function`` (imported). Adding a script to docs/cli.md is one line here.
The page's ``<!-- cli-reference -->`` marker is replaced by one section per command with the
parser's ``format_help()`` (and one per subcommand, for parsers with subcommands), so the page
can never drift from the code.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys
from pathlib import Path

from mkdocs.exceptions import PluginError

COMMANDS: dict[str, str] = {
    "cory-train": "cory_agents.cli.train:build_parser",
    "cory-train --learner grpo": "cory_agents.cli.train:grpo_parser",
    "cory-train --learner happo": "cory_agents.cli.train:happo_parser",
    "cory-train --learner mappo": "cory_agents.cli.train:mappo_parser",
    "python examples/play_episode.py": "examples/play_episode.py:build_parser",
    "python examples/plot_runs.py": "examples/plot_runs.py:build_parser",
    "python examples/train_sb3.py": "examples/train_sb3.py:build_parser",
    "python examples/train_torchrl.py": "examples/train_torchrl.py:build_parser",
    "cory-eval": "cory_agents.cli.evaluate:build_parser",
    "cory-export": "cory_agents.cli.export:build_parser",
    "cory-bench": "cory_agents.evaluation.reward_benchmark:build_parser",
    "python -m cory_agents.training.checkpoint": "cory_agents.training.checkpoint:build_parser",
}
PAGE = "cli.md"
MARKER = "<!-- cli-reference -->"
HELP_WIDTH = "80"  # columns argparse wraps to, so the page does not depend on the terminal

_root = Path(__file__).resolve().parents[2]


def load_parser(spec: str) -> argparse.ArgumentParser:
    """Call the parser-building function named by ``spec`` (``file.py:func`` or ``module:func``)."""
    target, sep, func = spec.partition(":")
    if not sep or not func:
        raise PluginError(f"cli_reference: {spec!r} is not 'path/to/script.py:function' or 'module:function'")
    if str(_root) not in sys.path:
        sys.path.insert(0, str(_root))  # the scripts import cory_env and agents from the repository
    if target.endswith(".py"):
        path = _root / target
        if not path.is_file():
            raise PluginError(f"cli_reference: {path} does not exist (fix COMMANDS in {__file__})")
        module_spec = importlib.util.spec_from_file_location(f"_cli_reference_{path.stem}", path)
        module = importlib.util.module_from_spec(module_spec)
        module_spec.loader.exec_module(module)
    else:
        module = importlib.import_module(target)
    if not callable(getattr(module, func, None)):
        raise PluginError(f"cli_reference: {target} has no function {func}() that builds its parser")
    return getattr(module, func)()


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """A parser's subcommands (``prog sub --help`` for each), in the order they were added, aliases skipped."""
    subs: dict[str, argparse.ArgumentParser] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                if all(sub is not seen for seen in subs.values()):
                    subs[name] = sub
    return subs


def _help(parser: argparse.ArgumentParser) -> str:
    previous = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = HELP_WIDTH
    try:
        return parser.format_help().rstrip()
    finally:
        if previous is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = previous


def render() -> str:
    """One section per command: its --help, then one subsection per subcommand, if any."""
    sections = []
    for command, spec in COMMANDS.items():
        parser = load_parser(spec)
        parser.prog = command
        sections.append(f"## `{command}`\n\nGenerated from `{spec}`.\n\n```text\n{_help(parser)}\n```\n")
        for name, sub in _subcommands(parser).items():
            sub.prog = f"{command} {name}"
            sections.append(f"### `{command} {name}`\n\n```text\n{_help(sub)}\n```\n")
    return "\n".join(sections)


def on_page_markdown(markdown: str, page, config, files) -> str:
    if page.file.src_uri != PAGE:
        return markdown
    if MARKER not in markdown:
        raise PluginError(f"cli_reference: docs/{PAGE} lost its {MARKER} marker")
    return markdown.replace(MARKER, render())
