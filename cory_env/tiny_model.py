"""The tiny model, ``"tiny"``: the embedded model's architecture and tokenizer, shrunk, with random weights.

``--model tiny`` (or ``load_causal_lm("tiny")``) gives a ``LlamaForCausalLM`` of 2 layers and width
:data:`HIDDEN_SIZE` over the embedded SmolLM2-135M tokenizer (vocabulary 49152), with random weights from a
fixed seed. **It learns nothing**: its rewards are noise. It is for smoke runs: a plug-in learner, a reward
or a task run end to end in seconds on a CPU, with checkpoints of a few MB instead of the embedded model's
half gigabyte.

The folder, ``cache_dir() / "tiny"`` (:func:`cory_env.models.cache_dir`), is made at the first use, once per
cache, as the embedded model is converted (:func:`cory_env.models.build_once`: a file lock, a temporary
folder renamed into place, a marker written last), in about a second: the embedded model's ``config.json``
shrunk (:func:`tiny_config`), weights drawn from :data:`SEED` in a forked random state (the caller's is
untouched), saved as float32 safetensors, and the embedded folder's tokenizer files copied beside them. It
needs the embedded model's folder once (converted at its first use, offline). The same seed gives
bit-identical weights on every call with the same torch version.

Example:
    >>> from cory_env.models import load_causal_lm, load_tokenizer
    >>> model, tokenizer = load_causal_lm("tiny"), load_tokenizer("tiny")
    >>> model.config.num_hidden_layers, model.config.hidden_size, len(tokenizer)
    (2, 16, 49152)
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import torch

from cory_env.models import TINY_MODEL, build_once, cache_dir, resolve_model

__all__ = ["HIDDEN_SIZE", "SEED", "ensure_tiny_model", "make_tiny_model", "tiny_config", "tiny_model_path"]

#: The width. The embedding matrix (vocabulary x width, tied with the output layer as in the embedded model)
#: is nearly all of the weights: 49152 x 16 float32 is 3.1 MB (width 32: 6.3 MB, 64: 12.6 MB), so a learner's
#: share of a checkpoint (its weights and the optimizer's two moments) stays under 10 MB.
HIDDEN_SIZE = 16
#: The seed of the random weights.
SEED = 0
#: The shape, besides the width: 2 layers; 2 attention heads over 1 key-value head (grouped-query attention,
#: as the embedded model's 9 over 3), each head 8 wide (the least GPU attention kernels take); the
#: feed-forward layer twice as wide as the model.
SHAPE = {"num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1}
#: The embedded folder's files that hold its tokenizer.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja")


def tiny_model_path() -> Path:
    """Where the tiny model lives (or will live): ``cache_dir() / "tiny"``."""
    return cache_dir() / TINY_MODEL


def tiny_config(embedded: Any, hidden_size: int = HIDDEN_SIZE) -> Any:
    """The embedded model's config (a ``LlamaConfig``) shrunk: :data:`SHAPE` at ``hidden_size``; the
    vocabulary, special tokens, tied embeddings, RoPE and norms as the embedded model's."""
    settings = {k: v for k, v in embedded.to_dict().items() if k not in ("_name_or_path", "_model_name_or_path")}
    config = embedded.__class__.from_dict(settings)
    heads = SHAPE["num_attention_heads"]
    width = {"hidden_size": hidden_size, "head_dim": hidden_size // heads, "intermediate_size": 2 * hidden_size}
    for key, value in {**SHAPE, **width}.items():
        setattr(config, key, value)
    config.dtype = torch.float32
    return config


def make_tiny_model(dest: str | Path, *, seed: int = SEED, hidden_size: int = HIDDEN_SIZE) -> Path:
    """Write the tiny model into the folder ``dest`` (made if missing): weights drawn from ``seed``, the
    embedded model's tokenizer files copied (the embedded model is converted first if it is not yet).
    Neither torch's global random state nor any other is changed."""
    from transformers import AutoConfig, LlamaForCausalLM

    embedded = Path(resolve_model())
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    config = tiny_config(AutoConfig.from_pretrained(embedded, local_files_only=True), hidden_size)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config).to(torch.float32)
    model.save_pretrained(dest)
    for name in TOKENIZER_FILES:
        if (embedded / name).is_file():
            shutil.copyfile(embedded / name, dest / name)
    return dest


def ensure_tiny_model() -> Path:
    """The tiny model's folder, made once per cache (what ``resolve_model("tiny")`` returns)."""
    final = tiny_model_path()
    return build_once(
        final,
        make_tiny_model,
        writer="a build of the tiny model",
        kind="the tiny model cory-env makes",
        announce=f"Making the tiny random model (it learns nothing: for smoke runs) once into {final}...",
        marker={"source": "random", "seed": SEED, "hidden_size": HIDDEN_SIZE},
    )
