"""The model zoo (tests/support/model_zoo.py) builds what it promises: for each family, a tiny model that runs,
saves and reloads unchanged; the windows and dropouts the tests rely on; a published config that builds the real
architecture on the meta device."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PretrainedConfig

from tests.support.model_zoo import (
    FAMILIES,
    PUBLISHED,
    SLIDING,
    WINDOW,
    published_config,
    save_tiny,
    tiny_config,
    tiny_model,
)
from tests.support.toy import toy_tokenizer


def windows(config: PretrainedConfig) -> list[int | None]:
    """Each layer's sliding window (None: full attention), as the config says: by layer_types where it has them
    (Qwen2, Gemma), else one window for every layer (Mistral, Phi-3)."""
    window = getattr(config, "sliding_window", None)
    types = getattr(config, "layer_types", None) or ["sliding_attention"] * config.num_hidden_layers
    return [window if kind == "sliding_attention" else None for kind in types]


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return toy_tokenizer()


@pytest.mark.parametrize("family", FAMILIES)
def test_tiny_model_runs_and_reloads_unchanged(family: str, tokenizer: Any, tmp_path: Path) -> None:
    ids = {"bos_token_id": tokenizer.eos_token_id, "eos_token_id": tokenizer.eos_token_id}
    model = tiny_model(family, vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id, **ids)
    assert not model.training and model.dtype == torch.float32
    assert model.config.num_hidden_layers == 2 and model.config.hidden_size == 64
    batch = torch.randint(3, len(tokenizer), (2, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        logits = model(input_ids=batch).logits
    assert logits.shape == (2, 12, len(tokenizer)) and torch.isfinite(logits).all()

    folder = save_tiny(family, tmp_path / family, tokenizer)
    reloaded = AutoModelForCausalLM.from_pretrained(folder)
    assert len(AutoTokenizer.from_pretrained(folder)) == len(tokenizer)
    assert type(reloaded) is type(model) and not reloaded.training
    assert reloaded.config._attn_implementation == model.config._attn_implementation
    with torch.no_grad():
        assert torch.equal(reloaded(input_ids=batch).logits, logits)


@pytest.mark.parametrize("family", SLIDING)
def test_sliding_windows_are_kept_and_bite(family: str) -> None:
    config = tiny_config(family, 64, 1, 1, 0)
    assert WINDOW in windows(config)
    # The default attention implementation applies the window: positions before it see the same as without it,
    # positions after it do not.
    batch = torch.randint(3, 64, (2, 12), generator=torch.Generator().manual_seed(0))
    config.sliding_window = 64
    torch.manual_seed(0)
    unwindowed = AutoModelForCausalLM.from_config(config).eval()
    with torch.no_grad():
        windowed, full = tiny_model(family)(input_ids=batch).logits, unwindowed(input_ids=batch).logits
    assert torch.allclose(windowed[:, :WINDOW], full[:, :WINDOW], atol=1e-6)
    assert not torch.allclose(windowed[:, WINDOW:], full[:, WINDOW:], atol=1e-4)


def test_distinctive_features_are_kept() -> None:
    def tiny(family: str) -> PretrainedConfig:
        return tiny_config(family, 64, 1, 1, 0)

    assert tiny("opt").dropout == 0.1 and tiny("gpt2").attn_pdrop == 0.1
    assert tiny("llama3").rope_parameters["rope_type"] == "llama3"
    assert tiny("smollm3").no_rope_layers == [1, 0]
    assert tiny("gemma2").attn_logit_softcapping == 50.0 and tiny("gemma2").final_logit_softcapping == 30.0
    assert tiny("gemma3").rope_parameters["sliding_attention"]["rope_theta"] == 10000.0
    assert tiny("gpt_neox").rope_parameters["partial_rotary_factor"] == 0.25
    assert tiny("falcon").new_decoder_architecture and tiny("falcon").num_key_value_heads == 2


@pytest.mark.parametrize("family", FAMILIES)
def test_published_config_builds_on_meta(family: str) -> None:
    config = published_config(family)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    assert all(p.is_meta for p in model.parameters())
    assert config.vocab_size == PUBLISHED[family]["config"]["vocab_size"]
    assert config.num_hidden_layers >= 12
