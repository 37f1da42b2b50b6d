"""Environment wrappers that turn the pioneer/observer game into CORY's training setup."""

from typing import Any

from cory_env.wrappers.collective_reward import CollectiveRewardWrapper
from cory_env.wrappers.role_exchange import LEARNER_NAMES, RoleExchangeWrapper, learner_names, old_name

__all__ = ["CollectiveRewardWrapper", "RoleExchangeWrapper", "LEARNER_NAMES", "learner_names"]


def __getattr__(name: str) -> Any:
    return old_name(__name__, name)
