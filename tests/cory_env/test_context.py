"""cory_env.context.encode: the tokenizer's own ids, through the fast backend where that gives the same."""

from __future__ import annotations

import copy

from cory_env.context import encode

TEXTS = ["The movie was", "", "a long, long review that runs on and on past any padding length"]


def test_encode_gives_the_tokenizers_ids(embedded_tokenizer, gpt2_tokenizer):
    for tokenizer in (embedded_tokenizer, gpt2_tokenizer):  # a fast tokenizer, and a slow one
        for special in (True, False):
            assert encode(tokenizer, TEXTS, special) == tokenizer(TEXTS, add_special_tokens=special)["input_ids"]


def test_encode_leaves_out_a_backends_own_padding_and_truncation(embedded_tokenizer):
    tokenizer = copy.deepcopy(embedded_tokenizer)
    tokenizer.backend_tokenizer.enable_padding(length=8, pad_id=0)  # as a tokenizer.json may say
    tokenizer.backend_tokenizer.enable_truncation(max_length=3)
    ids = encode(tokenizer, TEXTS, add_special_tokens=False)
    assert ids == embedded_tokenizer(TEXTS, add_special_tokens=False)["input_ids"]
    assert [len(row) for row in ids][:2] == [3, 0] and len(ids[2]) > 8
