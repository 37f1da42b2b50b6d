"""The packages cory-env installs (everything else is in pyproject.toml).

The folder ``agents/`` installs as the import package ``cory_agents``: a top-level ``agents`` would
share its name with the OpenAI Agents SDK's (``pip install openai-agents``), and each install would
overwrite the other's files. So code imports ``cory_agents.learners``, ``cory_agents.training``, ...
"""

from setuptools import find_packages, setup

setup(
    packages=[*find_packages(include=["cory_env*"]), *(f"cory_{p}" for p in find_packages(include=["agents*"]))],
    package_dir={"cory_agents": "agents"},
)
