"""A causal LM with a scalar value head: the PPO agent's policy and critic in one network.

The value head reads the last hidden state at every position, as in TRL 0.7's
``AutoModelForCausalLMWithValueHead``: ``V(s_t)`` is the value of the context up to
and including token ``t``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from cory_agents.acting.actor import generate_positions


class CausalLMWithValueHead(nn.Module):
    """Wraps a Hugging Face causal LM (``lm``) and adds ``v_head``.

    ``forward`` returns ``(logits, values)`` at the positions ``keep`` names (the last ``keep``
    if an int, else these column indices).
    """

    def __init__(self, lm: nn.Module):
        super().__init__()
        self.lm = lm
        hidden = lm.config.get_text_config().hidden_size
        self.v_head = nn.Linear(hidden, 1)
        # Zero: the critic starts predicting 0, so the first advantages are the reward-to-go itself.
        # A random head (std 1/sqrt(hidden+1)) on this model's final hidden states (norm about 44 for
        # SmolLM2-135M) predicted values of std 1.2 against task rewards of std 0.34: 95% of the
        # advantages' variance was the critic's noise, and PPO followed it (docs/why-it-learns.md).
        nn.init.zeros_(self.v_head.weight)
        nn.init.zeros_(self.v_head.bias)

    def trainable_parameters(self) -> list[nn.Parameter]:
        """What this learner's optimizer updates: the value head and the LM's trainable weights
        (all of them, or only its LoRA adapter when ``lm`` is an :class:`~cory_agents.training.adapters.AdapterView`)."""
        lm_params = (
            self.lm.trainable_parameters()
            if hasattr(self.lm, "trainable_parameters")
            else [p for p in self.lm.parameters() if p.requires_grad]
        )
        return [*lm_params, *self.v_head.parameters()]

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None,
        logits_to_keep: int | torch.Tensor,
        position_ids: torch.Tensor | None = None,
        **kwargs: Any,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits ``(B, K, V)`` and values ``(B, K)`` of the last ``K = logits_to_keep`` positions,
        or of the ``K`` columns a 1-D tensor lists (Hugging Face's ``logits_to_keep`` semantics).

        Without ``position_ids``, left padding is handled as in ``generate``: positions count real
        tokens only. Other keyword arguments go to the LM (for example a padding-free batch,
        :mod:`cory_agents.speed.padding_free`).
        """
        if position_ids is None:
            position_ids = generate_positions(attention_mask)
        out = self.lm(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            output_hidden_states=True,
            use_cache=False,
            logits_to_keep=logits_to_keep,
            **kwargs,
        )
        # as Hugging Face reads logits_to_keep
        columns = slice(-logits_to_keep, None) if isinstance(logits_to_keep, int) else logits_to_keep
        hidden = out.hidden_states[-1][:, columns]
        values = self.v_head(hidden.to(self.v_head.weight.dtype)).squeeze(-1)
        return out.logits, values
