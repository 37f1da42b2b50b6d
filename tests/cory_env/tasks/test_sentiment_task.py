"""The sentiment task's prompt source (review prefixes) and the VADER reward."""

from __future__ import annotations

import time

import numpy as np
import pytest

from cory_env.prompts import Prompt, PromptSource
from cory_env.rewards.sentiment import vader_sentiment
from cory_env.tasks import DatasetUnavailableError, ReviewPrefixes, load_reviews, sentiment_prompts


@pytest.fixture(scope="module")
def rt_train():
    return load_reviews("rotten_tomatoes", "train")


# ------------------------------------------------------------------ load_reviews


def test_rotten_tomatoes_loads_with_disjoint_deterministic_splits(rt_train):
    test = load_reviews("rotten_tomatoes", "test")
    assert len(rt_train) + len(test) > 10_000
    assert 0.05 < len(test) / (len(rt_train) + len(test)) < 0.2
    assert not set(rt_train) & set(test)
    assert all(isinstance(t, str) and t.strip() for t in rt_train[:100])
    # plot summaries are dropped (they are long; critic blurbs are at most ~255 chars)
    assert max(len(t) for t in rt_train + test) < 400
    assert not any("&amp;" in t for t in rt_train)
    # deterministic, and callers get their own copy of the cached list
    again = load_reviews("rotten_tomatoes", "train")
    assert again == rt_train and again is not rt_train


def test_rotten_tomatoes_split_does_not_depend_on_the_process_cache(rt_train):
    from cory_env.tasks import sentiment

    sentiment._rotten_tomatoes_reviews.cache_clear()
    assert load_reviews("rotten_tomatoes", "train") == rt_train


def test_unknown_source_and_split_are_rejected():
    with pytest.raises(ValueError) as err:
        load_reviews("yelp")
    for name in ("imdb", "rotten_tomatoes", "auto"):
        assert name in str(err.value)
    with pytest.raises(ValueError, match="split"):
        load_reviews("rotten_tomatoes", "validation")


def _no_imdb_cache(monkeypatch, tmp_path):
    import datasets.config

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf_home"))
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "datasets"))
    # datasets reads its cache folder at import time
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "datasets"))
    from cory_env.tasks import sentiment

    sentiment._imdb_reviews.cache_clear()


def test_imdb_offline_without_cache_fails_fast_naming_the_embedded_source(monkeypatch, tmp_path):
    _no_imdb_cache(monkeypatch, tmp_path)
    start = time.monotonic()
    with pytest.raises(DatasetUnavailableError) as err:
        load_reviews("imdb")
    assert time.monotonic() - start < 15
    message = str(err.value)
    assert "rotten_tomatoes" in message
    assert "load_dataset" in message  # how to pre-download


def test_auto_falls_back_to_rotten_tomatoes_offline(monkeypatch, tmp_path, rt_train, caplog):
    _no_imdb_cache(monkeypatch, tmp_path)
    with caplog.at_level("INFO", logger="cory_env.tasks.sentiment"):
        reviews = load_reviews("auto", "train")
    assert reviews == rt_train
    assert "Rotten Tomatoes" in caplog.text


# ---------------------------------------------------------------- ReviewPrefixes


def test_review_prefixes_are_short_prefixes_of_reviews(gpt2_tokenizer, rt_train):
    source = ReviewPrefixes(rt_train, gpt2_tokenizer, min_tokens=2, max_tokens=7)
    assert isinstance(source, PromptSource)
    assert len(source) == len(rt_train)
    prompts = source.sample(np.random.default_rng(0), 256)
    assert len(prompts) == 256 and all(isinstance(p, Prompt) for p in prompts)
    reviews = set(rt_train)
    lengths = []
    for p in prompts:
        n = len(gpt2_tokenizer(p.query, add_special_tokens=False)["input_ids"])
        assert 2 - 1 <= n <= 7 + 1, (p.query, n)
        lengths.append(n)
        assert "\ufffd" not in p.query
        assert any(r.startswith(p.query) for r in reviews), p.query
    # the prefix length varies over the whole range
    assert min(lengths) <= 3 and max(lengths) >= 6


def test_review_prefixes_are_reproducible_from_the_rng(gpt2_tokenizer, rt_train):
    source = ReviewPrefixes(rt_train, gpt2_tokenizer)
    a = [p.query for p in source.sample(np.random.default_rng(123), 32)]
    b = [p.query for p in source.sample(np.random.default_rng(123), 32)]
    c = [p.query for p in source.sample(np.random.default_rng(124), 32)]
    assert a == b
    assert a != c


def test_review_prefixes_skip_too_short_reviews(gpt2_tokenizer):
    texts = ["Great.", "An utterly wonderful film about friendship and loss."]
    source = ReviewPrefixes(texts, gpt2_tokenizer, min_tokens=3, max_tokens=5)
    queries = {p.query for p in source.sample(np.random.default_rng(0), 20)}
    assert all(texts[1].startswith(q) for q in queries)
    with pytest.raises(ValueError, match="too short"):
        ReviewPrefixes(["Great."], gpt2_tokenizer, min_tokens=3).sample(np.random.default_rng(0), 1)


def test_review_prefixes_never_split_a_character(gpt2_tokenizer):
    # GPT-2 splits the 3-byte "’" over two tokens: a 5-token prefix would end in "\ufffd"
    text = "Uzumaki’s interesting social parallel and defiant aesthetic"
    source = ReviewPrefixes([text], gpt2_tokenizer, min_tokens=5, max_tokens=5)
    query = source.sample(np.random.default_rng(0), 1)[0].query
    assert "\ufffd" not in query and text.startswith(query)


def test_review_prefixes_validate_arguments(gpt2_tokenizer):
    with pytest.raises(ValueError, match="empty"):
        ReviewPrefixes([], gpt2_tokenizer)
    with pytest.raises(ValueError, match="empty"):
        ReviewPrefixes(["", "   "], gpt2_tokenizer)
    with pytest.raises(ValueError, match="min_tokens must be at least 1"):
        ReviewPrefixes(["a review"], gpt2_tokenizer, min_tokens=0)
    with pytest.raises(ValueError, match=r"min_tokens \(5\) must not exceed max_tokens \(3\)"):
        ReviewPrefixes(["a review"], gpt2_tokenizer, min_tokens=5, max_tokens=3)
    with pytest.raises(TypeError):
        ReviewPrefixes("a single string", gpt2_tokenizer)


def test_sentiment_prompts_convenience(gpt2_tokenizer):
    source = sentiment_prompts(gpt2_tokenizer, source="rotten_tomatoes", split="test", max_tokens=4)
    assert source.max_tokens == 4
    assert len(source) == len(load_reviews("rotten_tomatoes", "test"))
    assert len(source.sample(np.random.default_rng(0), 3)) == 3


# ---------------------------------------------------------------- vader_sentiment


def test_vader_sentiment_scores_the_whole_text():
    scores = vader_sentiment(
        ["This movie was", "This movie was", "The"],
        [" wonderful, a true delight. I loved it!", " terrible, boring and awful. I hated it.", ""],
    )
    assert len(scores) == 3 and all(isinstance(s, float) and -1 <= s <= 1 for s in scores)
    assert scores[0] > 0.3
    assert scores[1] < -0.3
    assert scores[2] == 0.0
    # the query counts too
    assert vader_sentiment(["I loved this"], [" film"])[0] > 0.3
    assert vader_sentiment([], []) == []
