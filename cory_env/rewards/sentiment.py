"""Sentiment reward: VADER's compound score of the whole text.

This is the offline default stand-in for ``lvwerra/distilbert-imdb`` (the classifier
the CORY paper and TRL's sentiment example use, whose raw POSITIVE logit is the
reward). No transformer sentiment classifier is available from a package registry,
while VADER (``vadersentiment``, MIT) ships its lexicon inside the package. Scores
lie in [-1, 1] rather than on the logit scale of the classifier.

Following the paper's convention, the query and the response are scored together
(``query + response``), not the response alone. In chat form (``--chat``) an answer is a reply,
not a continuation of the query's last word: ``vader-joined`` joins the two with a space where
neither has one, so that the query's last word and the reply's first stay two words.
"""

from __future__ import annotations

import functools
from typing import Any


@functools.cache
def _analyzer() -> Any:
    from vaderSentiment.vaderSentiment import SentimentIntensityAnalyzer

    return SentimentIntensityAnalyzer()


def vader_sentiment(queries: list[str], responses: list[str], **_: Any) -> list[float]:
    """VADER compound score in [-1, 1] of each ``query + response``."""
    if len(queries) != len(responses):
        raise ValueError(f"got {len(queries)} queries but {len(responses)} responses")
    analyzer = _analyzer()
    return [float(analyzer.polarity_scores(q + r)["compound"]) for q, r in zip(queries, responses)]


def vader_joined(queries: list[str], responses: list[str], **_: Any) -> list[float]:
    """VADER compound score of each query and response joined by a space (where neither ends or begins with
    whitespace): the sentiment task's reward in chat form.

    >>> vader_joined(["The film was"], ["great."]) == vader_sentiment(["The film was"], [" great."])
    True
    """
    joined = [r if not r or not q or q[-1].isspace() or r[0].isspace() else " " + r for q, r in zip(queries, responses)]
    return vader_sentiment(queries, joined)
