"""Reward functions: batched ``(queries, responses, **metadata) -> list[float]``."""

from cory_env.rewards.base import RewardFunction, RewardFunctionError, score_responses

__all__ = ["RewardFunction", "RewardFunctionError", "score_responses"]
