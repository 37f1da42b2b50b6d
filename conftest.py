"""Collection for the whole repository: ``pytest`` also runs the ``>>>`` examples in the docstrings of
``cory_env/`` and ``agents/`` (``--doctest-modules`` over the ``testpaths`` of pyproject.toml). The
tests' fixtures are in tests/conftest.py."""

import importlib.util
import os

# The examples never touch the Hugging Face Hub either: the embedded model and data sets only.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# Modules that need an optional extra (pyproject.toml's marl) to import or to run their examples:
# left out without it, as tests/agents/integrations/test_torchrl.py and test_tianshou.py skip without it.
OPTIONAL = {"agents/integrations/torchrl.py": "torchrl", "agents/integrations/tianshou.py": "tianshou"}
collect_ignore = [path for path, package in OPTIONAL.items() if importlib.util.find_spec(package) is None]
