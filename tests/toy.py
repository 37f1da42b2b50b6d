"""Tiny real parts for fast tests: a random-initialised Llama over GPT-2's tokenizer, toy rewards."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM


def save_tiny_llama(folder: Path, tokenizer, seed: int = 0) -> Path:
    """A 2-layer Llama (the embedded model's architecture) with random weights, saved with a tokenizer."""
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
        bos_token_id=tokenizer.eos_token_id, eos_token_id=tokenizer.eos_token_id, tie_word_embeddings=True,
    )  # fmt: skip
    model = LlamaForCausalLM(config)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def long_words(queries, responses, **_):
    """Characters per response / 40: rises when the policy prefers long tokens."""
    return [len(r) / 40 for r in responses]


TOY_WORDS = "the movie was good bad great fine awful ok plot acting film is not very".split()


def toy_tokenizer():
    """A word-level tokenizer over 15 words (plus <pad>, <eos>, <unk>): a tiny action space."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {w: i for i, w in enumerate(["<pad>", "<eos>", "<unk>", *TOY_WORDS])}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    backend.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
    return PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>")


def fraction_good(queries, responses, **_):
    """The fraction of response words that are "good" (the toy task reward)."""
    return [r.split().count("good") / max(len(r.split()), 1) for r in responses]
