"""What is measured of a policy's answers: diversity (distinct-n, repetition) and pass@k.

Pure functions of the answers' texts or of their correctness; :mod:`cory_agents.evaluation.held_out`
reports them per learner.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def ngrams(tokens: Sequence[int], n: int) -> list[tuple[int, ...]]:
    """The ``n``-grams of one token sequence, in order (none if it is shorter than ``n``)."""
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    tokens = list(tokens)
    return [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]


def distinct_n(responses: Sequence[Sequence[int]], n: int) -> float:
    """Distinct-n (Li et al., 2016, "A Diversity-Promoting Objective Function for Neural
    Conversation Models"): the number of distinct ``n``-grams divided by the number of
    ``n``-grams, pooled over all responses (token ids).

    1.0 when no ``n``-gram occurs twice anywhere; near 0 when every response says the same
    thing. NaN when no response has ``n`` tokens.

    >>> distinct_n([[1, 2, 3], [1, 2, 4]], 1)  # 4 distinct of 6 unigrams
    0.6666666666666666
    """
    grams = [g for r in responses for g in ngrams(r, n)]
    return len(set(grams)) / len(grams) if grams else float("nan")


def repetition_rate(responses: Sequence[Sequence[int]], n: int = 2) -> float:
    """seq-rep-n (Welleck et al., 2020, "Neural Text Generation with Unlikelihood Training"):
    the share of a response's ``n``-grams that repeat an earlier ``n``-gram of the same
    response, ``1 - |distinct n-grams| / |n-grams|``, averaged over the responses.

    Unlike :func:`distinct_n` it looks inside each response: "marvelous marvelous marvelous"
    scores 0.5 with ``n=2`` (two bigrams, one distinct). Responses shorter than ``n`` tokens
    have no ``n``-gram and are left out; NaN when none is long enough.

    >>> repetition_rate([[5, 5, 5], [1, 2, 3]], n=2)  # (1 - 1/2 + 1 - 2/2) / 2
    0.25
    """
    rates = [1 - len(set(g)) / len(g) for g in (ngrams(r, n) for r in responses) if g]
    return float(np.mean(rates)) if rates else float("nan")


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k (Chen et al., 2021, "Evaluating Large Language Models Trained on Code"):
    the probability that at least one of ``k`` answers drawn without replacement from ``n``
    sampled answers, ``c`` of them correct, is correct: ``1 - C(n-c, k) / C(n, k)``.

    Computed as ``1 - prod_{i=n-c+1}^{n} (1 - k / i)``, which never forms the (huge)
    binomial coefficients.

    >>> pass_at_k(n=4, c=1, k=2)  # 1 - C(3, 2) / C(4, 2) = 1 - 3/6
    0.5
    """
    for name, value in (("n", n), ("c", c), ("k", k)):
        if isinstance(value, bool) or int(value) != value:
            raise TypeError(f"pass_at_k needs integer n, c, k; got {name}={value!r}")
    if not 0 <= c <= n:
        raise ValueError(f"the number of correct answers c={c} must lie in [0, n={n}]")
    if not 1 <= k <= n:
        raise ValueError(f"k={k} must lie in [1, n={n}]: pass@k needs at least k samples per question")
    if n - c < k:  # every k-subset holds a correct answer
        return 1.0
    return 1.0 - float(np.prod(1.0 - k / np.arange(n - c + 1, n + 1, dtype=np.float64)))


def mean_pass_at_k(correct: np.ndarray, k: int) -> float:
    """pass@k averaged over questions; ``correct`` is ``(questions, n)`` booleans."""
    correct = np.asarray(correct, dtype=bool)
    n = correct.shape[1]
    return float(np.mean([pass_at_k(n, int(c), k) for c in correct.sum(axis=1)]))
