"""Task definitions: prompt sources for the paper's tasks."""

from cory_env.tasks.sentiment import (
    DatasetUnavailableError,
    ReviewPrefixes,
    load_reviews,
    sentiment_prompts,
)

__all__ = ["DatasetUnavailableError", "ReviewPrefixes", "load_reviews", "sentiment_prompts"]
