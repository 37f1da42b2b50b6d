"""Dropout off everywhere a model keeps it (cory_agents.learners.dropout): layers, functional rates, configs."""

from __future__ import annotations

import copy

import torch
from transformers import FalconConfig, FalconForCausalLM, GPT2Config, GPT2LMHeadModel, OPTConfig, OPTForCausalLM

from cory_agents.learners.dropout import disable_dropout, has_dropout


def opt() -> OPTForCausalLM:
    """A tiny OPT with the real configs' rates: OPT drops through function calls, not ``nn.Dropout`` layers."""
    torch.manual_seed(0)
    config = OPTConfig(
        vocab_size=50,
        hidden_size=16,
        ffn_dim=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        word_embed_proj_dim=16,
        dropout=0.1,
        attention_dropout=0.1,
        activation_dropout=0.1,
        layerdrop=0.1,
    )
    return OPTForCausalLM(config)


def training_passes_agree(model: torch.nn.Module) -> bool:
    """Whether two training-mode passes of one batch give the same logits (nothing dropped at random)."""
    model.train()
    ids = torch.randint(0, 50, (2, 12))
    with torch.no_grad():
        return torch.equal(model(input_ids=ids).logits, model(input_ids=ids).logits)


def test_opts_functional_dropout_is_switched_off():
    model = opt()
    assert has_dropout(model) and not training_passes_agree(model)  # the rates are live, not layers
    disable_dropout(model)
    assert not has_dropout(model) and training_passes_agree(model)
    layer = model.model.decoder.layers[0]
    assert layer.dropout == layer.self_attn.dropout == model.model.decoder.dropout == 0.0
    assert model.config.dropout == model.config.attention_dropout == model.config.activation_dropout == 0.0
    assert model.config.layerdrop == 0.0 and model.model.decoder.layerdrop == 0.0
    assert not has_dropout(copy.deepcopy(model))  # a copy (a learner's policy) is off too


def test_falcons_rates_read_from_the_config_at_each_call_are_switched_off():
    torch.manual_seed(0)
    config = FalconConfig(
        vocab_size=50,
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        attention_dropout=0.1,
        hidden_dropout=0.1,
    )
    model = FalconForCausalLM(config)
    assert has_dropout(model) and not training_passes_agree(model)
    disable_dropout(model)
    assert model.config.attention_dropout == model.config.hidden_dropout == 0.0
    assert not has_dropout(model) and training_passes_agree(model)


def test_dropout_layers_are_switched_off_as_trl_does():
    model = GPT2LMHeadModel(GPT2Config(vocab_size=50, n_embd=16, n_layer=1, n_head=2))  # 0.1 everywhere
    assert has_dropout(model)
    disable_dropout(model)
    assert all(m.p == 0 for m in model.modules() if isinstance(m, torch.nn.Dropout))
    assert model.config.attn_pdrop == model.config.resid_pdrop == model.config.embd_pdrop == 0.0
    assert not has_dropout(model) and training_passes_agree(model)


def test_what_is_not_a_rate_is_left_alone():
    model = opt()
    disable_dropout(model)
    assert model.config.hidden_size == 16 and model.config.enable_bias is True  # ints and booleans untouched
