"""Dropout off everywhere a model keeps it: RL fine-tuning compares log-probabilities of passes.

PPO's ratio, the KL to the reference and the scoring pass that stands in for the rollout's all
compare log-probabilities computed in different passes (some in training mode, some not), so a
pass must not drop anything at random: with dropout, iteration 0's KL to an identical reference
is not 0. TRL's :func:`~trl.trainer.utils.disable_dropout_in_model` sets the rate of every
``nn.Dropout`` layer to 0, but many Hugging Face models also drop through a function call whose
rate they keep as a plain float: OPT's decoder (``self.dropout``, read from ``config.dropout``,
0.1 in the real checkpoints), the attention rate every model passes to its attention function
(``self.attention_dropout``), or the config itself read at each call (Falcon's
``config.attention_dropout`` and ``hidden_dropout``).
:func:`disable_dropout` zeroes all three: layers, float attributes of modules and config fields
whose names say they are a dropout rate (:data:`RATE_NAMES`), and OPT's ``layerdrop`` (whole
layers skipped at random in training mode).

The config's fields are zeroed too, so a copy or a model built from the config later is the same;
a model exported after training says ``dropout: 0.0``, the rate it was trained with.

Example:
    >>> from transformers import OPTConfig, OPTForCausalLM
    >>> model = OPTForCausalLM(OPTConfig(hidden_size=16, ffn_dim=32, num_hidden_layers=1, num_attention_heads=2,
    ...                                  word_embed_proj_dim=16, dropout=0.1))
    >>> has_dropout(model), disable_dropout(model), has_dropout(model)
    (True, None, False)
"""

from __future__ import annotations

import re

import torch
from trl.trainer.utils import disable_dropout_in_model

#: The names of the float attributes and config fields that are a dropout rate (``dropout``,
#: ``attention_dropout``, ``activation_dropout``, ``hidden_dropout``, GPT-2's ``attn_pdrop``, OPT's
#: ``layerdrop``, ...).
RATE_NAMES = re.compile(r"dropout|pdrop|layerdrop|drop_path")


def disable_dropout(model: torch.nn.Module) -> None:
    """Set every dropout rate of ``model`` to 0, in place: its ``nn.Dropout`` layers, the rates its
    modules keep as floats, and the rates in its configs (sub-configs included)."""
    disable_dropout_in_model(model)
    for module in model.modules():
        _zero_rates(vars(module))
        config = getattr(module, "config", None)
        if config is not None and hasattr(config, "to_dict"):
            for sub in _configs(config):
                _zero_rates(vars(sub))


def has_dropout(model: torch.nn.Module) -> bool:
    """Whether a training-mode forward pass of ``model`` may drop anything: an ``nn.Dropout`` with
    ``p > 0``, or a rate kept as a float by a module or a config (:data:`RATE_NAMES`)."""
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout) and module.p > 0:
            return True
        if _rates(vars(module)):
            return True
        config = getattr(module, "config", None)
        if config is not None and hasattr(config, "to_dict") and any(_rates(vars(c)) for c in _configs(config)):
            return True
    return False


def _rates(attributes: dict) -> list[str]:
    """The names of ``attributes`` that are a non-zero dropout rate."""
    return [
        name
        for name, value in attributes.items()
        if isinstance(value, float) and value > 0 and RATE_NAMES.search(name.lower())
    ]


def _zero_rates(attributes: dict) -> None:
    for name in _rates(attributes):
        attributes[name] = 0.0


def _configs(config) -> list:
    """``config`` and the configs inside it (a multimodal model's ``text_config``, ...)."""
    found = [config]
    for value in vars(config).values():
        if hasattr(value, "to_dict") and hasattr(value, "model_type") and value is not config:
            found.extend(_configs(value))
    return found
