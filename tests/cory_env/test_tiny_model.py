"""Tests for cory_env.tiny_model: ``--model tiny``, a small random model of the embedded architecture."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from cory_env import models, tiny_model
from cory_env.models import EMBEDDED_MODEL, TINY_MODEL, is_tiny_model, load_causal_lm, load_tokenizer, resolve_model

MB = 1_000_000


@pytest.fixture(scope="module")
def embedded_folder() -> Path:
    """The converted embedded model in the usual cache (converted there once, as the other tests do)."""
    return Path(resolve_model(EMBEDDED_MODEL))


@pytest.fixture
def cache(embedded_folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty cache of its own that holds the embedded model (a link to the converted one: no conversion)."""
    root = tmp_path / "cache"
    root.mkdir()
    (root / EMBEDDED_MODEL).symlink_to(embedded_folder, target_is_directory=True)
    monkeypatch.setenv("CORY_ENV_CACHE", str(root))
    return root


def _weights(folder: Path) -> dict[str, torch.Tensor]:
    return load_file(str(folder / "model.safetensors"))


def test_tiny_is_made_once_offline_and_reused(cache, monkeypatch, caplog):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    start = time.monotonic()
    with caplog.at_level(logging.INFO, logger="cory_env.models"):
        path = Path(resolve_model("Tiny"))
    seconds = time.monotonic() - start
    assert path == cache / TINY_MODEL and is_tiny_model(" TINY ") and not is_tiny_model(cache / "tiny")
    assert seconds < 30, seconds
    assert any("Made" in r.getMessage() for r in caplog.records)
    marker = json.loads((path / models._MARKER).read_text())
    assert marker["source"] == "random" and marker["hidden_size"] == tiny_model.HIDDEN_SIZE
    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"):
        assert (path / name).is_file(), name
    assert (path / "tokenizer.json").read_bytes() == (cache / EMBEDDED_MODEL / "tokenizer.json").read_bytes()
    assert not list(cache.glob(".tiny.tmp-*"))

    before = {p.name: p.stat().st_mtime_ns for p in path.iterdir()}
    monkeypatch.setattr(tiny_model, "make_tiny_model", lambda *a, **k: pytest.fail("made again"))
    assert resolve_model(TINY_MODEL) == str(path)
    assert before == {p.name: p.stat().st_mtime_ns for p in path.iterdir()}


def test_the_same_seed_gives_the_same_weights_and_leaves_the_caller_s_random_state(cache, tmp_path):
    torch.manual_seed(1234)
    state = torch.get_rng_state()
    first = _weights(tiny_model.make_tiny_model(tmp_path / "a"))
    second = _weights(tiny_model.make_tiny_model(tmp_path / "b"))
    assert torch.equal(torch.get_rng_state(), state)
    assert first.keys() == second.keys() and first
    for name, tensor in first.items():
        assert tensor.dtype == torch.float32, name
        assert torch.equal(tensor, second[name]), name
    other = _weights(tiny_model.make_tiny_model(tmp_path / "c", seed=1))
    assert not torch.equal(first["model.embed_tokens.weight"], other["model.embed_tokens.weight"])
    assert torch.equal(
        first["model.embed_tokens.weight"], _weights(Path(resolve_model("tiny")))["model.embed_tokens.weight"]
    )


def test_tiny_loads_as_any_model_and_runs_a_forward_pass(cache):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = Path(resolve_model(TINY_MODEL))
    model = AutoModelForCausalLM.from_pretrained(path)
    tokenizer = AutoTokenizer.from_pretrained(path)
    embedded = json.loads((cache / EMBEDDED_MODEL / "config.json").read_text())
    config = model.config
    assert type(model).__name__ == "LlamaForCausalLM" and model.dtype == torch.float32
    assert (config.num_hidden_layers, config.hidden_size) == (2, tiny_model.HIDDEN_SIZE)
    assert config.num_attention_heads * config.head_dim == config.hidden_size
    assert config.num_key_value_heads < config.num_attention_heads
    assert config.vocab_size == embedded["vocab_size"] == len(tokenizer) == 49152
    assert config.tie_word_embeddings == embedded["tie_word_embeddings"]
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    assert (config.bos_token_id, config.eos_token_id) == (embedded["bos_token_id"], embedded["eos_token_id"])

    batch = tokenizer(["The movie was great", "Awful"], return_tensors="pt", padding=True)
    with torch.no_grad():
        logits = model(**batch).logits
    assert logits.shape == (*batch["input_ids"].shape, 49152)
    assert torch.isfinite(logits).all()

    lm, tok = load_causal_lm("tiny"), load_tokenizer("TINY")
    assert tok.pad_token is not None and tok("The movie")["input_ids"] == tokenizer("The movie")["input_ids"]
    assert all(torch.equal(a, b) for a, b in zip(lm.state_dict().values(), model.state_dict().values()))


def test_tiny_is_a_few_megabytes(cache):
    path = Path(resolve_model(TINY_MODEL))
    weights = (path / "model.safetensors").stat().st_size
    folder = sum(p.stat().st_size for p in path.iterdir())
    # The tied embedding, 49152 x 16 float32, is nearly all of it; the tokenizer.json is 3.5 MB.
    assert 3 * MB < weights < 3.3 * MB, weights
    assert folder < 8 * MB, folder


def test_a_folder_named_tiny_that_is_not_the_tiny_model_is_left_alone(cache):
    notes = cache / TINY_MODEL / "notes.txt"
    notes.parent.mkdir()
    notes.write_text("mine")
    with pytest.raises(models.ModelNotAvailableError, match="is not the tiny model cory-env makes.*leaves it alone"):
        resolve_model(TINY_MODEL)
    assert notes.read_text() == "mine"
