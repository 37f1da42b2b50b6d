"""Tiny random models of the 13 families users bring, and the published configs they stand for.

The package must cope with whatever causal LM a user points it at, not only the embedded Llama
(tests/support/toy.py's :func:`~tests.support.toy.save_tiny_llama`). Each family here is built offline,
in well under a second, from its transformers config class, with what makes the family distinctive kept:
Llama 3's rope scaling, SmolLM3's layers without RoPE, Qwen3's q/k norm, Gemma 2's soft-capping and
alternating sliding/full layers, Gemma 3's local/global layers with two RoPE bases, the sliding windows of
Phi-3, Mistral and Qwen2, GPT-NeoX's partial rotary, and the non-zero dropouts of GPT-2, OPT and Falcon
(the package must switch those off itself). The windows are 8 tokens, so that a test's sequences
exceed them.

:data:`PUBLISHED` holds, for each family, the fields of one real checkpoint's config.json that matter for
attention and dropout; :func:`published_config` builds the real config class from them, small enough to
instantiate on the meta device (``with torch.device("meta"): AutoModelForCausalLM.from_config(...)``),
which allocates nothing.

The attention implementation is left as transformers chooses it (no ``attn_implementation`` is passed):
the package must work with the default a user gets. With transformers 5.25 that is ``"sdpa"`` for every
family but Gemma 2, whose modelling code declares no SDPA support (SDPA cannot soft-cap) and so gets
``"eager"``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    FalconConfig,
    Gemma2Config,
    Gemma3TextConfig,
    GPT2Config,
    GPTNeoXConfig,
    LlamaConfig,
    MistralConfig,
    Olmo2Config,
    OPTConfig,
    Phi3Config,
    PretrainedConfig,
    PreTrainedModel,
    Qwen2Config,
    Qwen3Config,
    SmolLM3Config,
)

FAMILIES: tuple[str, ...] = (
    "llama3",
    "smollm3",
    "qwen2",
    "qwen3",
    "gemma2",
    "gemma3",
    "phi3",
    "mistral",
    "olmo2",
    "gpt2",
    "gpt_neox",
    "opt",
    "falcon",
)
"""The families, in a fixed order (test ids follow it)."""

#: The sliding window of the tiny models that have one: short, so that tests exceed it.
WINDOW = 8

#: The families whose tiny model has a sliding window of :data:`WINDOW` on at least one layer.
SLIDING: tuple[str, ...] = ("qwen2", "gemma2", "gemma3", "phi3", "mistral")

# The tiny shape: 2 decoder layers, hidden size 64, 4 attention heads (2 key/value heads where the
# family uses grouped-query attention), an intermediate size of 128, 256 positions.
_LAYERS, _HIDDEN, _HEADS, _KV_HEADS, _INTERMEDIATE, _POSITIONS = 2, 64, 4, 2, 128, 256
_HEAD_DIM = _HIDDEN // _HEADS

_COMMON: dict[str, Any] = {
    "hidden_size": _HIDDEN,
    "num_hidden_layers": _LAYERS,
    "num_attention_heads": _HEADS,
    "intermediate_size": _INTERMEDIATE,
    "max_position_embeddings": _POSITIONS,
}


def tiny_config(
    family: str, vocab_size: int, bos_token_id: int, eos_token_id: int, pad_token_id: int | None = None
) -> PretrainedConfig:
    """The tiny config of ``family`` (one of :data:`FAMILIES`), over a vocabulary of ``vocab_size`` tokens."""
    ids: dict[str, Any] = {
        "vocab_size": vocab_size,
        "bos_token_id": bos_token_id,
        "eos_token_id": eos_token_id,
        "pad_token_id": pad_token_id,
    }
    gqa = {**_COMMON, **ids, "num_key_value_heads": _KV_HEADS}
    if family == "llama3":
        # Llama 3.2's "llama3" rope scaling, with its factors; the original context shrunk with the model
        # (8192 -> 64 of 256 positions) so that the 16-dimensional heads have frequencies in all three of
        # its bands (kept, smoothed, divided by the factor) and transformers does not warn that the original
        # context exceeds max_position_embeddings.
        rope = {
            "rope_type": "llama3",
            "rope_theta": 500000.0,
            "factor": 32.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 64,
        }
        return LlamaConfig(**gqa, head_dim=_HEAD_DIM, rope_parameters=rope, tie_word_embeddings=True)
    if family == "smollm3":
        # SmolLM3 leaves RoPE out of every 4th layer (no_rope_layers: 1 = RoPE, 0 = none); with 2 layers the
        # default interval of 4 would leave no such layer, so the second layer is the NoPE one.
        return SmolLM3Config(
            **gqa,
            no_rope_layers=[1, 0],
            no_rope_layer_interval=2,
            rope_parameters={"rope_type": "default", "rope_theta": 5000000.0},
        )
    if family == "qwen2":
        # Qwen2Config nulls sliding_window unless use_sliding_window, and makes the layers from
        # max_window_layers on sliding: layer 0 full, layer 1 a window of 8 (layer_types says it outright).
        return Qwen2Config(
            **gqa,
            use_sliding_window=True,
            sliding_window=WINDOW,
            max_window_layers=1,
            layer_types=["full_attention", "sliding_attention"],
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        )
    if family == "qwen3":
        # head_dim is Qwen3Config's own field (default 128); q_norm/k_norm are always there.
        return Qwen3Config(**gqa, head_dim=_HEAD_DIM, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})
    if family == "gemma2":
        # Sliding (window 8) then full, soft-capped attention (50) and logits (30). query_pre_attn_scalar
        # is 32, not head_dim (16): queries are scaled by 32**-0.5, as Gemma 2 9B/27B scale by other than
        # head_dim, so that code which assumes head_dim**-0.5 shows.
        return Gemma2Config(
            **gqa,
            head_dim=_HEAD_DIM,
            sliding_window=WINDOW,
            layer_types=["sliding_attention", "full_attention"],
            query_pre_attn_scalar=32,
            attn_logit_softcapping=50.0,
            final_logit_softcapping=30.0,
        )
    if family == "gemma3":
        # One local layer (window 8, RoPE base 10 000) and one global (RoPE base 1 000 000), as Gemma 3's
        # 5 local : 1 global pattern in two layers; query_pre_attn_scalar as for gemma2.
        return Gemma3TextConfig(
            **gqa,
            head_dim=_HEAD_DIM,
            sliding_window=WINDOW,
            layer_types=["sliding_attention", "full_attention"],
            query_pre_attn_scalar=32,
            rope_parameters={
                "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                "full_attention": {"rope_type": "default", "rope_theta": 1000000.0},
            },
        )
    if family == "phi3":
        # Phi-3-mini has as many key/value heads as heads (no GQA). Its dropouts are 0 in config.json.
        return Phi3Config(
            **_COMMON,
            **ids,
            num_key_value_heads=_HEADS,
            original_max_position_embeddings=_POSITIONS,
            sliding_window=WINDOW,
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attention_dropout=0.0,
        )
    if family == "mistral":
        return MistralConfig(**gqa, head_dim=_HEAD_DIM, sliding_window=WINDOW)
    if family == "olmo2":
        # OLMo 2 1B has as many key/value heads as heads; q/k norm and post-norms are the class's own.
        return Olmo2Config(**_COMMON, **ids, num_key_value_heads=_HEADS)
    if family == "gpt2":
        # GPT-2's own dropouts (0.1 each), left on.
        return GPT2Config(
            n_embd=_HIDDEN,
            n_layer=_LAYERS,
            n_head=_HEADS,
            n_inner=_INTERMEDIATE,
            n_positions=_POSITIONS,
            attn_pdrop=0.1,
            resid_pdrop=0.1,
            embd_pdrop=0.1,
            **ids,
        )
    if family == "gpt_neox":
        # Pythia: rotary on a quarter of each head (4 of 16 dimensions), parallel residual.
        return GPTNeoXConfig(
            **_COMMON,
            **ids,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25},
            use_parallel_residual=True,
            attention_dropout=0.0,
            hidden_dropout=0.0,
        )
    if family == "opt":
        # OPT's dropout of 0.1, kept on purpose: the package must switch it off. activation_dropout is no
        # field of OPTConfig (transformers 5 keeps it as a plain attribute, and OPT's modelling code reads
        # none); it is here because every OPT config.json has it.
        return OPTConfig(
            hidden_size=_HIDDEN,
            num_hidden_layers=_LAYERS,
            num_attention_heads=_HEADS,
            ffn_dim=_INTERMEDIATE,
            max_position_embeddings=_POSITIONS,
            word_embed_proj_dim=_HIDDEN,
            dropout=0.1,
            attention_dropout=0.0,
            activation_dropout=0.0,
            **ids,
        )
    if family == "falcon":
        # Falcon 40B/180B's (and Falcon 2 11B's) new decoder architecture: grouped key/value heads
        # (num_kv_heads), parallel attention and MLP, rotary, no biases. Its dropouts are 0 in config.json.
        # num_ln_in_parallel_attn is left out, as in Falcon 40B's config.json: FalconDecoderLayer sets it to
        # 2 on the config when it builds.
        return FalconConfig(
            hidden_size=_HIDDEN,
            num_hidden_layers=_LAYERS,
            num_attention_heads=_HEADS,
            num_kv_heads=_KV_HEADS,
            ffn_hidden_size=_INTERMEDIATE,
            max_position_embeddings=_POSITIONS,
            new_decoder_architecture=True,
            parallel_attn=True,
            bias=False,
            alibi=False,
            hidden_dropout=0.0,
            attention_dropout=0.0,
            **ids,
        )
    raise ValueError(f"unknown family {family!r}; choose one of {FAMILIES}")


def tiny_model(family: str, vocab_size: int = 64, seed: int = 0, **ids: int | None) -> PreTrainedModel:
    """A tiny random ``family`` model: float32, in eval mode, its weights drawn after ``torch.manual_seed(seed)``.

    ``ids`` are the ``bos_token_id``, ``eos_token_id`` and ``pad_token_id`` (default 1, 1 and 0: the toy
    tokenizer's ``<eos>`` and ``<pad>``).
    """
    ids = {"bos_token_id": 1, "eos_token_id": 1, "pad_token_id": 0, **ids}
    config = tiny_config(family, vocab_size, **ids)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    return model.eval()


def save_tiny(family: str, folder: Path, tokenizer: Any, seed: int = 0) -> Path:
    """A tiny ``family`` model over ``tokenizer``, saved in ``folder`` with the tokenizer (``save_pretrained``).

    ``AutoModelForCausalLM.from_pretrained(folder)`` and ``AutoTokenizer.from_pretrained(folder)`` load them.
    A tokenizer without a BOS token (the toy tokenizer) starts sequences with its EOS token, as
    :func:`~tests.support.toy.save_tiny_llama` does.
    """
    bos = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
    model = tiny_model(
        family,
        vocab_size=len(tokenizer),
        seed=seed,
        bos_token_id=bos,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


# Each family's real config.json, the fields that matter for attention and dropout (names as config.json
# spells them: rope_scaling/rope_theta, n_embd, rotary_pct... which the v5 config classes convert). The
# Hugging Face Hub is out of reach here, so each was checked against copies of the config.json in public
# repositories (the code corpus of the project's search tool); the comment above each entry names the copies
# and says what could not be checked.
PUBLISHED: dict[str, dict[str, Any]] = {
    # Verified: kevinstephano/thunder_model_blocks hf_llama/llama_config.py (a copy of the config.json, from
    # the -Instruct repo, architecture identical) and two more unnamed copies agree on every field below.
    "llama3": {
        "checkpoint": "meta-llama/Llama-3.2-1B",
        "config": {
            "model_type": "llama",
            "hidden_size": 2048,
            "intermediate_size": 8192,
            "num_hidden_layers": 16,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "head_dim": 64,
            "max_position_embeddings": 131072,
            "rope_theta": 500000.0,
            "rope_scaling": {
                "factor": 32.0,
                "high_freq_factor": 4.0,
                "low_freq_factor": 1.0,
                "original_max_position_embeddings": 8192,
                "rope_type": "llama3",
            },
            "attention_bias": False,
            "attention_dropout": 0.0,
            "mlp_bias": False,
            "rms_norm_eps": 1e-05,
            "tie_word_embeddings": True,
            "vocab_size": 128256,
            "bos_token_id": 128000,
            "eos_token_id": 128001,
        },
    },
    # Verified: several copies agree on the shape, rope_theta 5e6, max_position_embeddings 65536, the
    # 36-entry no_rope_layers (1,1,1,0 x 9), use_sliding_window false / sliding_window null, the token ids
    # (one copy calls itself an "authoritative copy of HuggingFaceTB/SmolLM3-3B/config.json"). Not seen in a
    # copy: attention_dropout (0.0 is SmolLM3Config's default; no dropout is known for SmolLM3).
    "smollm3": {
        "checkpoint": "HuggingFaceTB/SmolLM3-3B",
        "config": {
            "model_type": "smollm3",
            "hidden_size": 2048,
            "intermediate_size": 11008,
            "num_hidden_layers": 36,
            "num_attention_heads": 16,
            "num_key_value_heads": 4,
            "max_position_embeddings": 65536,
            "rope_theta": 5000000.0,
            "rope_scaling": None,
            "no_rope_layer_interval": 4,
            "no_rope_layers": [1, 1, 1, 0] * 9,
            "use_sliding_window": False,
            "sliding_window": None,
            "attention_bias": False,
            "attention_dropout": 0.0,
            "rms_norm_eps": 1e-06,
            "tie_word_embeddings": True,
            "vocab_size": 128256,
            "bos_token_id": 128000,
            "eos_token_id": 128012,
            "pad_token_id": 128004,
        },
    },
    # Verified: two unnamed copies of Qwen/Qwen2.5-0.5B's config.json (one a debug dump of the downloaded
    # file) agree on every field below, sliding_window 32768 with use_sliding_window false included.
    "qwen2": {
        "checkpoint": "Qwen/Qwen2.5-0.5B",
        "config": {
            "model_type": "qwen2",
            "hidden_size": 896,
            "intermediate_size": 4864,
            "num_hidden_layers": 24,
            "num_attention_heads": 14,
            "num_key_value_heads": 2,
            "max_position_embeddings": 32768,
            "max_window_layers": 24,
            "sliding_window": 32768,
            "use_sliding_window": False,
            "rope_theta": 1000000.0,
            "attention_dropout": 0.0,
            "rms_norm_eps": 1e-06,
            "tie_word_embeddings": True,
            "vocab_size": 151936,
            "bos_token_id": 151643,
            "eos_token_id": 151643,
        },
    },
    # Verified: two unnamed copies of Qwen/Qwen3-0.6B's config.json (one quoting
    # https://huggingface.co/Qwen/Qwen3-0.6B/raw/main/config.json) agree on every field below.
    "qwen3": {
        "checkpoint": "Qwen/Qwen3-0.6B",
        "config": {
            "model_type": "qwen3",
            "hidden_size": 1024,
            "intermediate_size": 3072,
            "num_hidden_layers": 28,
            "num_attention_heads": 16,
            "num_key_value_heads": 8,
            "head_dim": 128,
            "max_position_embeddings": 40960,
            "max_window_layers": 28,
            "sliding_window": None,
            "use_sliding_window": False,
            "rope_theta": 1000000,
            "rope_scaling": None,
            "attention_bias": False,
            "attention_dropout": 0.0,
            "rms_norm_eps": 1e-06,
            "tie_word_embeddings": True,
            "vocab_size": 151936,
            "bos_token_id": 151643,
            "eos_token_id": 151645,
        },
    },
    # Verified: a copy with "_name_or_path": "google/gemma-2-2b" and a copy of
    # https://huggingface.co/google/gemma-2-2b-it/blob/main/config.json (same architecture) agree on every
    # field below. config.json has no layer_types: Gemma2Config makes every other layer sliding
    # (sliding, full, sliding, ...).
    "gemma2": {
        "checkpoint": "google/gemma-2-2b",
        "config": {
            "model_type": "gemma2",
            "hidden_size": 2304,
            "intermediate_size": 9216,
            "num_hidden_layers": 26,
            "num_attention_heads": 8,
            "num_key_value_heads": 4,
            "head_dim": 256,
            "max_position_embeddings": 8192,
            "sliding_window": 4096,
            "query_pre_attn_scalar": 256,
            "attn_logit_softcapping": 50.0,
            "final_logit_softcapping": 30.0,
            "rope_theta": 10000.0,
            "attention_bias": False,
            "attention_dropout": 0.0,
            "hidden_activation": "gelu_pytorch_tanh",
            "rms_norm_eps": 1e-06,
            "vocab_size": 256000,
            "bos_token_id": 2,
            "eos_token_id": 1,
            "pad_token_id": 0,
        },
    },
    # Verified: several copies of the Gemma 3 1B config.json (one from google/gemma-3-1b-pt's structure, one
    # of google/gemma-3-1b-it's, same architecture) agree on the shape, sliding_window 512,
    # sliding_window_pattern 6 (every 6th layer global), rope_theta 1e6, rope_local_base_freq 1e4,
    # query_pre_attn_scalar 256, max_position_embeddings 32768, vocab 262144. Not verified for the 1B
    # itself: rope_scaling null (the 4B/12B/27B have a linear factor 8; one 1B-derived copy has null),
    # the soft-capping fields null (seen null only in the 4B+ text configs) and attention_dropout 0.0.
    "gemma3": {
        "checkpoint": "google/gemma-3-1b-pt",
        "config": {
            "model_type": "gemma3_text",
            "hidden_size": 1152,
            "intermediate_size": 6912,
            "num_hidden_layers": 26,
            "num_attention_heads": 4,
            "num_key_value_heads": 1,
            "head_dim": 256,
            "max_position_embeddings": 32768,
            "sliding_window": 512,
            "sliding_window_pattern": 6,
            "query_pre_attn_scalar": 256,
            "attn_logit_softcapping": None,
            "final_logit_softcapping": None,
            "rope_theta": 1000000.0,
            "rope_local_base_freq": 10000.0,
            "rope_scaling": None,
            "attention_bias": False,
            "attention_dropout": 0.0,
            "hidden_activation": "gelu_pytorch_tanh",
            "rms_norm_eps": 1e-06,
            "vocab_size": 262144,
            "bos_token_id": 2,
            "eos_token_id": 1,
            "pad_token_id": 0,
        },
    },
    # Verified: several copies, one quoting https://huggingface.co/microsoft/Phi-3-mini-4k-instruct/blob/main/
    # config.json, agree on every field below; sliding_window is 2047 (not 2048) in config.json.
    "phi3": {
        "checkpoint": "microsoft/Phi-3-mini-4k-instruct",
        "config": {
            "model_type": "phi3",
            "hidden_size": 3072,
            "intermediate_size": 8192,
            "num_hidden_layers": 32,
            "num_attention_heads": 32,
            "num_key_value_heads": 32,
            "max_position_embeddings": 4096,
            "original_max_position_embeddings": 4096,
            "sliding_window": 2047,
            "rope_theta": 10000.0,
            "rope_scaling": None,
            "attention_bias": False,
            "attention_dropout": 0.0,
            "embd_pdrop": 0.0,
            "resid_pdrop": 0.0,
            "rms_norm_eps": 1e-05,
            "tie_word_embeddings": False,
            "vocab_size": 32064,
            "bos_token_id": 1,
            "eos_token_id": 32000,
            "pad_token_id": 32000,
        },
    },
    # Verified: a printed MistralConfig of "mistralai/Mistral-7B-v0.1" (two copies) agrees on every field
    # below. Whether config.json itself carries attention_dropout (the printout may show the class default)
    # was not verified; 0.0 either way.
    "mistral": {
        "checkpoint": "mistralai/Mistral-7B-v0.1",
        "config": {
            "model_type": "mistral",
            "hidden_size": 4096,
            "intermediate_size": 14336,
            "num_hidden_layers": 32,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "max_position_embeddings": 32768,
            "sliding_window": 4096,
            "rope_theta": 10000.0,
            "attention_dropout": 0.0,
            "rms_norm_eps": 1e-05,
            "tie_word_embeddings": False,
            "vocab_size": 32000,
            "bos_token_id": 1,
            "eos_token_id": 2,
        },
    },
    # Verified: a fairseq2-derived OLMO2Config whose defaults are "the allenai/OLMo-2-0425-1B model" and a
    # checkpoint check of OLMo-2-0425-1B agree on the shape (2048 hidden, 16 layers, 16 heads, 16 key/value
    # heads), max_position_embeddings 4096, rope_theta 500000, vocab 100352; the first gives intermediate
    # 8192, rms_norm_eps 1e-6, no tying, eos 100257, pad 100277. Not verified: attention_bias false and
    # attention_dropout 0.0 (Olmo2Config's defaults; OLMo 2 has no dropout).
    "olmo2": {
        "checkpoint": "allenai/OLMo-2-0425-1B",
        "config": {
            "model_type": "olmo2",
            "hidden_size": 2048,
            "intermediate_size": 8192,
            "num_hidden_layers": 16,
            "num_attention_heads": 16,
            "num_key_value_heads": 16,
            "max_position_embeddings": 4096,
            "rope_theta": 500000.0,
            "rope_scaling": None,
            "attention_bias": False,
            "attention_dropout": 0.0,
            "rms_norm_eps": 1e-06,
            "tie_word_embeddings": False,
            "vocab_size": 100352,
            "eos_token_id": 100257,
            "pad_token_id": 100277,
        },
    },
    # Verified: several copies of gpt2's config.json agree on every field below (its three dropouts 0.1,
    # summary_first_dropout 0.1 too, which only GPT2DoubleHeadsModel uses).
    "gpt2": {
        "checkpoint": "gpt2",
        "config": {
            "model_type": "gpt2",
            "n_embd": 768,
            "n_layer": 12,
            "n_head": 12,
            "n_inner": None,
            "n_positions": 1024,
            "n_ctx": 1024,
            "activation_function": "gelu_new",
            "attn_pdrop": 0.1,
            "embd_pdrop": 0.1,
            "resid_pdrop": 0.1,
            "summary_first_dropout": 0.1,
            "layer_norm_epsilon": 1e-05,
            "vocab_size": 50257,
            "bos_token_id": 50256,
            "eos_token_id": 50256,
        },
    },
    # Verified: the shape, 2048 positions, rotary on 25% and both dropouts 0 from EleutherAI/pythia's
    # models/160M/pythia-160m.yml (the training config behind the checkpoint); vocab 50304, rotary base
    # 10000, parallel residual, untied embeddings and layer_norm_eps from copies of Pythia config.jsons
    # (70M, same tokenizer and recipe). Not seen in a copy of pythia-160m's config.json itself: its
    # attention_dropout/hidden_dropout keys (0.0 each in the training config and GPTNeoXConfig's defaults),
    # bos/eos 0.
    "gpt_neox": {
        "checkpoint": "EleutherAI/pythia-160m",
        "config": {
            "model_type": "gpt_neox",
            "hidden_size": 768,
            "intermediate_size": 3072,
            "num_hidden_layers": 12,
            "num_attention_heads": 12,
            "max_position_embeddings": 2048,
            "rotary_pct": 0.25,
            "rotary_emb_base": 10000,
            "use_parallel_residual": True,
            "attention_dropout": 0.0,
            "hidden_dropout": 0.0,
            "hidden_act": "gelu",
            "layer_norm_eps": 1e-05,
            "tie_word_embeddings": False,
            "vocab_size": 50304,
            "bos_token_id": 0,
            "eos_token_id": 0,
        },
    },
    # Verified: three copies of facebook/opt-125m's config.json agree on every field below (dropout 0.1,
    # attention_dropout 0.0, activation_dropout 0.0, layerdrop 0.0).
    "opt": {
        "checkpoint": "facebook/opt-125m",
        "config": {
            "model_type": "opt",
            "hidden_size": 768,
            "ffn_dim": 3072,
            "num_hidden_layers": 12,
            "num_attention_heads": 12,
            "max_position_embeddings": 2048,
            "word_embed_proj_dim": 768,
            "do_layer_norm_before": True,
            "dropout": 0.1,
            "attention_dropout": 0.0,
            "activation_dropout": 0.0,
            "layerdrop": 0.0,
            "activation_function": "relu",
            "vocab_size": 50272,
            "bos_token_id": 2,
            "eos_token_id": 2,
            "pad_token_id": 1,
        },
    },
    # Verified: Cerebras' Falcon-7B converter defaults and other copies agree on every field below. Falcon-7B
    # has the OLD decoder architecture (multi-query: one key/value head, new_decoder_architecture false),
    # unlike the tiny model (Falcon 40B's new architecture): between them both of FalconAttention's paths
    # are covered.
    "falcon": {
        "checkpoint": "tiiuae/falcon-7b",
        "config": {
            "model_type": "falcon",
            "hidden_size": 4544,
            "num_hidden_layers": 32,
            "num_attention_heads": 71,
            "new_decoder_architecture": False,
            "multi_query": True,
            "parallel_attn": True,
            "alibi": False,
            "bias": False,
            "attention_dropout": 0.0,
            "hidden_dropout": 0.0,
            "layer_norm_epsilon": 1e-05,
            "vocab_size": 65024,
            "bos_token_id": 11,
            "eos_token_id": 11,
        },
    },
}
"""Per family: ``{"checkpoint": <Hub id>, "config": {<fields of its config.json>}}``."""


def published_config(family: str) -> PretrainedConfig:
    """``family``'s real config class, built from :data:`PUBLISHED` (through ``AutoConfig.for_model``)."""
    fields = dict(PUBLISHED[family]["config"])
    return AutoConfig.for_model(fields.pop("model_type"), **fields)
