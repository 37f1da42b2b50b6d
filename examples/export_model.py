"""Write a checkpoint's policies as Hugging Face models: the ``cory-export`` command.

``python examples/export_model.py --help`` lists its flags; the command lives in :mod:`cory_agents.cli.export`
(installed as a console script with the package), so both run the same code.
"""

from __future__ import annotations

from cory_agents.cli.export import build_parser, main  # noqa: F401 (build_parser: docs/cli.md)

if __name__ == "__main__":
    main()  # reads sys.argv; a known error ends it in one line (cory_agents.cli.errors)
