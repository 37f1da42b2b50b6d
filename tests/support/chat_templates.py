"""Small tokenizers that carry the real chat templates of five model families (tests/data/chat_templates/).

Each is the embedded model's tokenizer (SmolLM2's BPE) with the family's special tokens added, its BOS and
EOS set as the family's are, and the family's published template: the rendering is the family's own, only
the ordinary words are tokenized by another vocabulary.
"""

from __future__ import annotations

from typing import Any

from transformers import AutoTokenizer

from cory_env.models import resolve_model
from tests.support import ROOT

TEMPLATES = ROOT / "tests" / "data" / "chat_templates"

#: By family: its template's file, the special tokens it writes, its BOS and EOS, and its end-of-turn token.
FAMILIES: dict[str, dict[str, Any]] = {
    "smollm2": dict(file="smollm2.jinja", special=[], bos=None, eos="<|im_end|>", end="<|im_end|>"),
    "qwen2.5": dict(file="qwen2.5.jinja", special=[], bos=None, eos="<|im_end|>", end="<|im_end|>"),
    "llama3": dict(
        file="llama3.jinja",
        special=["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"],
        bos="<|begin_of_text|>",
        eos="<|eot_id|>",
        end="<|eot_id|>",
    ),
    "gemma3": dict(
        file="gemma3.jinja",
        special=["<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>"],
        bos="<bos>",
        eos="<eos>",
        end="<end_of_turn>",
    ),
    "phi3": dict(
        file="phi3.jinja",
        special=["<|system|>", "<|user|>", "<|assistant|>", "<|end|>", "<|endoftext|>"],
        bos=None,
        eos="<|endoftext|>",
        end="<|end|>",
    ),
}


def family_tokenizer(family: str) -> Any:
    """A fresh small tokenizer with ``family``'s chat template and special tokens."""
    spec = FAMILIES[family]
    tokenizer = AutoTokenizer.from_pretrained(resolve_model())  # the embedded model, made on first use
    if spec["special"]:
        tokenizer.add_special_tokens({"additional_special_tokens": spec["special"]})
    tokenizer.bos_token = spec["bos"]
    tokenizer.eos_token = spec["eos"]
    tokenizer.chat_template = (TEMPLATES / spec["file"]).read_text()
    return tokenizer
