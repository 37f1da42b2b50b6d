"""Environment wrappers that turn the pioneer/observer game into CORY's training setup."""

from cory_env.wrappers.collective_reward import CollectiveRewardWrapper
from cory_env.wrappers.role_exchange import LEARNER_NAMES, RoleExchangeWrapper, learner_names

__all__ = ["CollectiveRewardWrapper", "RoleExchangeWrapper", "LEARNER_NAMES", "learner_names"]
