"""The commands: ``cory-train``, ``cory-eval``, ``cory-export`` (and ``cory-bench``, in
:mod:`cory_agents.evaluation.reward_benchmark`).

Each module holds one command's ``build_parser`` and ``main``; ``examples/train_cory.py``,
``examples/evaluate.py`` and ``examples/export_model.py`` run the same ``main``, so every
documented ``python examples/...`` command works as before. docs/cli.md lists their flags.
"""
