"""What attention a model's config asks each layer for: the sliding windows, and the modifiers plain
causal sdpa has no argument for.

Read from the config alone, so it works on a model instantiated on the meta device (a real checkpoint's
config, no weights): the padding-free passes (:mod:`cory_agents.speed.padding_free`) use it to decide
whether they can pack a model, and ``docs/supported-models.md`` to say what each family gets.

Example:
    >>> from transformers import MistralConfig, MistralForCausalLM
    >>> import torch
    >>> with torch.device("meta"):
    ...     model = MistralForCausalLM(MistralConfig(num_hidden_layers=2, sliding_window=4096))
    >>> sliding_windows(model), unsupported(model)
    ([4096, 4096], None)
"""

from __future__ import annotations

from torch import nn

from cory_env.models import hugging_face_model

#: The attention modifiers sdpa has no argument for, by config field: a model with one keeps padded
#: passes (and its own attention implementation, which sdpa is not for these).
MODIFIERS = {
    "attn_logit_softcapping": "soft-capped attention logits",
    "attention_chunk_size": "chunked attention",
    "use_bidirectional_attention": "bidirectional attention",
}

#: The layer types the packed attention computes exactly (causal, with or without a window).
LAYER_TYPES = frozenset({"full_attention", "sliding_attention"})


def unsupported(model: nn.Module) -> str | None:
    """Why the packed attention would not compute ``model``'s attention exactly, read from its config
    (no pass needed: this works on the meta device), or ``None``."""
    config = hugging_face_model(model).config.get_text_config()
    for name, what in MODIFIERS.items():
        if getattr(config, name, None) not in (None, False):
            return f"its {what} ({name}={getattr(config, name)!r})"
    others = sorted(set(getattr(config, "layer_types", None) or ()) - LAYER_TYPES)
    if others:
        return f"its {', '.join(others)} layers (layer_types)"
    return None


def sliding_windows(model: nn.Module) -> list[int | None]:
    """Each decoder layer's sliding window as ``model``'s config gives it (``None``: full attention):
    ``sliding_window`` on the layers ``layer_types`` call ``sliding_attention``, or on every layer of
    a model without layer types (Mistral, Phi-3). Read from the config: it works on the meta device."""
    config = hugging_face_model(model).config.get_text_config()
    window = getattr(config, "sliding_window", None)
    types = getattr(config, "layer_types", None)
    if types is None:
        return [window] * config.num_hidden_layers
    return [window if kind == "sliding_attention" else None for kind in types]
