"""The learning agents and everything around their training, one subpackage per concept.

=================  ==================================================================
``algorithms``     the math: advantages, losses, KL estimators and controllers
``learners``       the ``Learner`` interface, PPO, GRPO/RLOO
``acting``         the KV-cache actor that plays a policy in the environment
``training``       config, the loop, checkpoints, metrics, trackers, plots, export
``speed``          mechanisms a run switches on (padding-free passes, CPU layout, ...)
``distributed``    data parallel, FSDP and DeepSpeed ZeRO
``evaluation``     held-out evaluation and the reward benchmark
``integrations``   Stable-Baselines3, TorchRL, Tianshou
=================  ==================================================================

docs/architecture.md follows one training iteration through them. The modules' paths of
cory-env 0.1 (``agents.ppo``, ``agents.trainer``, ...) still import: each is the moved module
itself (:data:`MOVED`).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
from types import ModuleType

#: Where the modules of cory-env 0.1's flat ``agents/`` went.
MOVED = {
    "agents.advantages": "agents.algorithms.advantages",
    "agents.losses": "agents.algorithms.losses",
    "agents.kl": "agents.algorithms.kl",
    "agents.learner": "agents.learners.base",
    "agents.lm_learner": "agents.learners.lm",
    "agents.ppo": "agents.learners.ppo",
    "agents.grpo": "agents.learners.grpo",
    "agents.value_model": "agents.learners.value_model",
    "agents.lm_actor": "agents.acting.actor",
    "agents.adapters": "agents.training.adapters",
    "agents.trainer": "agents.training.trainer",
    "agents.checkpoint": "agents.training.checkpoint",
    "agents.interrupt": "agents.training.interrupt",
    "agents.metrics": "agents.training.metrics",
    "agents.trackers": "agents.training.trackers",
    "agents.plots": "agents.training.plots",
    "agents.export": "agents.training.export",
    "agents.padding_free": "agents.speed.padding_free",
    "agents.cpu_linear": "agents.speed.cpu_linear",
    "agents.host_memory": "agents.speed.host_memory",
    "agents.fsdp": "agents.distributed.fsdp",
    "agents.zero": "agents.distributed.zero",
    "agents.reward_benchmark": "agents.evaluation.reward_benchmark",
    "agents.statistics": "agents.evaluation.statistics",
    "agents.sb3": "agents.integrations.sb3",
    "agents.torchrl_policy": "agents.integrations.torchrl",
    "agents.tianshou_env": "agents.integrations.tianshou",
}


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports an old path as the moved module itself (one module object under both names)."""

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> object:
        return importlib.util.spec_from_loader(fullname, self) if fullname in MOVED else None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = importlib.import_module(MOVED[spec.name])
        self._spec = module.__spec__  # importlib sets the alias's spec on it next: put it back below
        return module

    def exec_module(self, module: ModuleType) -> None:
        module.__spec__ = self._spec

    def get_code(self, fullname: str) -> object:  # python -m agents.checkpoint (runpy)
        new = MOVED[fullname]
        return importlib.util.find_spec(new).loader.get_code(new)


def names_of(module: str):
    """``__getattr__`` for a package that was one module in cory-env 0.1 (``agents.distributed``,
    ``agents.evaluation``): its old names, forwarded to the module that holds them now."""

    def __getattr__(name: str) -> object:
        if not name.startswith("__"):
            try:
                return getattr(importlib.import_module(module), name)
            except AttributeError:
                pass
        raise AttributeError(f"module {module.rsplit('.', 1)[0]!r} has no attribute {name!r}")

    return __getattr__


if not any(isinstance(f, _MovedModules) for f in sys.meta_path):
    sys.meta_path.append(_MovedModules())
