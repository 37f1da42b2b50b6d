"""Environment wrappers that turn the pioneer/observer game into CORY's training setup."""

from cory_env.wrappers.collective_reward import CollectiveRewardWrapper
from cory_env.wrappers.role_exchange import LEARNERS, RoleExchangeWrapper, learner_names

__all__ = ["CollectiveRewardWrapper", "RoleExchangeWrapper", "LEARNERS", "learner_names"]
