"""Evaluate a trained policy (or a model as it is) on held-out prompts: the ``cory-eval`` command.

``python examples/evaluate.py --help`` lists its flags; the command lives in :mod:`cory_agents.cli.evaluate`
(installed as a console script with the package), so both run the same code.
"""

from __future__ import annotations

from cory_agents.cli.evaluate import build_parser, main  # noqa: F401 (build_parser: docs/cli.md)

if __name__ == "__main__":
    main()  # reads sys.argv; a known error ends it in one line (cory_agents.cli.errors)
