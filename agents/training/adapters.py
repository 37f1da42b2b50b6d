"""LoRA with a shared base: one copy of the weights serves pioneer, observer and reference.

Each learner is a LoRA adapter on one frozen base model (peft); the reference for the KL
penalty is the same model with its adapters disabled. CORY then needs about the memory
of single-agent PPO instead of three full models (the authors' code held three).

    >>> from peft import LoraConfig
    >>> from cory_env.models import load_causal_lm
    >>> base = load_causal_lm()
    >>> shared = shared_lora_model(base, ["llm_0", "llm_1"], LoraConfig(r=16, target_modules="all-linear"))
    >>> policy_0, reference = AdapterView(shared, "llm_0"), AdapterView(shared, None)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from cory_env.errors import UsageError


def shared_lora_model(base: nn.Module, adapters: Sequence[str], lora_config: Any) -> nn.Module:
    """Wrap ``base`` in a ``PeftModel`` with one LoRA adapter per name (base weights frozen)."""
    from peft import get_peft_model

    try:
        model = get_peft_model(base, lora_config, adapter_name=adapters[0])
    except ValueError as exc:  # peft's NoMatchingPeftModuleError: no module of that name in the model
        if "not found in the base model" not in str(exc):
            raise
        linear = sorted({name.rsplit(".", 1)[-1] for name, m in base.named_modules() if isinstance(m, nn.Linear)})
        wanted = lora_config.target_modules
        raise UsageError(
            f"--lora-target-modules {wanted if isinstance(wanted, str) else ','.join(sorted(wanted))}: no layer of "
            f"the model has such a name; its linear layers are {', '.join(linear)}: give some of them, comma-separated, or all-linear"
        ) from exc
    for name in adapters[1:]:
        model.add_adapter(name, lora_config)
    return model


class AdapterView(nn.Module):
    """One adapter of a shared peft model, used as a causal LM of its own.

    ``adapter=None`` is the base model alone: the frozen reference. Calling the view
    activates its adapter first, so views of the same model can be used in turn.
    """

    def __init__(self, peft_model: nn.Module, adapter: str | None):
        super().__init__()
        self.peft_model = peft_model
        self.adapter = adapter

    @property
    def config(self) -> Any:
        return self.peft_model.config

    def forward(self, **kwargs: Any) -> Any:
        if self.adapter is None:
            with self.peft_model.disable_adapter():
                return self.peft_model(**kwargs)
        if self.peft_model.active_adapter != self.adapter:  # switching walks every LoRA layer
            self.peft_model.set_adapter(self.adapter)  # also makes its weights (only) trainable
        return self.peft_model(**kwargs)

    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        """This adapter's LoRA weights (none for the reference view)."""
        if self.adapter is None:
            return []
        marker = f".{self.adapter}."
        params = [p for n, p in self.peft_model.named_parameters() if "lora_" in n and marker in n]
        for p in params:
            p.requires_grad_(True)
        return params
