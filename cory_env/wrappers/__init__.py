"""Environment wrappers that turn the pioneer/observer game into CORY's training setup."""

from typing import Any

from cory_env.wrappers import role_exchange
from cory_env.wrappers.collective_reward import CollectiveRewardWrapper
from cory_env.wrappers.role_exchange import LEARNER_NAMES, RoleExchangeWrapper, learner_names

__all__ = ["CollectiveRewardWrapper", "RoleExchangeWrapper", "LEARNER_NAMES", "learner_names"]


def __getattr__(name: str) -> Any:
    if name == "LEARNERS":  # the old name of LEARNER_NAMES, with a warning
        return role_exchange.LEARNERS
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
