"""Collection for the whole repository: ``pytest`` also runs the ``>>>`` examples in the docstrings of
``cory_env/`` and ``agents/`` (``--doctest-modules`` over the ``testpaths`` of pyproject.toml). The
tests' fixtures are in tests/conftest.py."""

import importlib.util
import os

# The examples never touch the Hugging Face Hub either: the embedded model and data sets only.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Under pytest-xdist (`make test` runs one worker per core: TEST_WORKERS in the Makefile) each worker
# computes on one thread, and so do the processes it starts: two workers of two threads each on two
# cores would fight for them. Set here, before anything imports torch.
if os.environ.get("PYTEST_XDIST_WORKER"):
    for variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[variable] = os.environ.get(variable) or "1"

# Modules that need an optional extra (pyproject.toml's marl) to import or to run their examples:
# left out without it, as tests/agents/integrations/test_torchrl.py and test_tianshou.py skip without it.
OPTIONAL = {"agents/integrations/torchrl.py": "torchrl", "agents/integrations/tianshou.py": "tianshou"}
collect_ignore = [path for path, package in OPTIONAL.items() if importlib.util.find_spec(package) is None]
