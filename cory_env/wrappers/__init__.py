"""Environment wrappers that turn the pioneer/observer game into CORY's training setup."""

import warnings
from typing import Any

from cory_env.wrappers.collective_reward import CollectiveRewardWrapper
from cory_env.wrappers.role_exchange import LEARNER_NAMES, RoleExchangeWrapper, learner_names

__all__ = ["CollectiveRewardWrapper", "RoleExchangeWrapper", "LEARNER_NAMES", "learner_names"]


def __getattr__(name: str) -> Any:
    if name == "LEARNERS":  # its name until cory-env 0.1; agents.training.build.LEARNERS is the learner registry
        warnings.warn("cory_env.wrappers.LEARNERS is now LEARNER_NAMES", DeprecationWarning, stacklevel=2)
        return LEARNER_NAMES
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
