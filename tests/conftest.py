"""Shared fixtures. Tests never touch the Hugging Face Hub."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def gpt2_tokenizer():
    """GPT-2's real BPE tokenizer (50257 tokens, no pad token), built offline: :func:`tests.toy.gpt2_tokenizer`."""
    from .toy import gpt2_tokenizer

    tokenizer = gpt2_tokenizer()
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
