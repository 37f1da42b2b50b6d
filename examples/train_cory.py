"""Fine-tune a language model with CORY (or single-agent PPO): the ``cory-train`` command.

``python examples/train_cory.py --help`` lists its flags; the command lives in :mod:`cory_agents.cli.train`
(installed as a console script with the package), so both run the same code.
"""

from __future__ import annotations

from cory_agents.cli.train import build_parser, learning_summary, main, parse_config  # noqa: F401 (build_parser: docs/cli.md)

if __name__ == "__main__":
    main()  # reads sys.argv; a known error ends it in one line (cory_agents.cli.errors)
