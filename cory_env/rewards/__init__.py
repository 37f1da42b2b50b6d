"""Reward functions: batched ``(queries, responses, **metadata) -> list[float]``.

Built-ins: ``vader`` (:mod:`~cory_env.rewards.sentiment`), ``gsm8k``
(:mod:`~cory_env.rewards.gsm8k`), and text classifiers
(:mod:`~cory_env.rewards.classifier`). :func:`get_reward` finds any of them, your own
(:func:`register`), other packages' (entry points) and ``module:function`` by name.
"""

from cory_env.rewards.base import (
    RewardCallCancelled,
    RewardFunction,
    RewardFunctionError,
    RewardTimeoutError,
    score_responses,
)
from cory_env.rewards.registry import (
    DEFAULT_REWARD_TIMEOUT,
    ENTRY_POINT_GROUP,
    CheckedReward,
    RewardNotFoundError,
    available_rewards,
    get_reward,
    register,
    unregister,
)

__all__ = [
    "DEFAULT_REWARD_TIMEOUT",
    "ENTRY_POINT_GROUP",
    "CheckedReward",
    "RewardCallCancelled",
    "RewardFunction",
    "RewardFunctionError",
    "RewardNotFoundError",
    "RewardTimeoutError",
    "available_rewards",
    "get_reward",
    "register",
    "score_responses",
    "unregister",
]
