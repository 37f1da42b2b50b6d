"""PPO's clipped policy and value losses, token-level, as in TRL 0.7's PPOTrainer.

All tensors are ``(B, T)`` over response tokens; means are over tokens where ``mask`` is 1.

Policy (clipped surrogate, Schulman et al., 2017), with ``rho_t = exp(logp_t - old_logp_t)``::

    L_pi = mean_t max(-A_t * rho_t, -A_t * clip(rho_t, 1 - eps, 1 + eps))

Value (clipped around the rollout's values ``V_old``)::

    L_V = 0.5 * mean_t max((V_t - R_t)^2, (clip(V_t, V_old_t - c, V_old_t + c) - R_t)^2)

Stats are detached scalar tensors (call ``.item()`` when logging):
``clipfrac``/``vf_clipfrac`` are the fractions of tokens where the clipped branch is
the larger loss; ``approx_kl = 0.5 * mean_t (logp_t - old_logp_t)^2``.
"""

from __future__ import annotations

import torch

from cory_agents.algorithms.advantages import masked_mean


def policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_range: float = 0.2,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Clipped surrogate loss (to minimise) and its stats ``clipfrac``, ``approx_kl``, ``ratio_mean``."""
    log_ratio = logprobs - old_logprobs
    ratio = torch.exp(log_ratio)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - clip_range, 1.0 + clip_range)
    loss = masked_mean(torch.max(unclipped, clipped), mask)
    with torch.no_grad():
        stats = {
            "clipfrac": masked_mean((clipped > unclipped).to(ratio.dtype), mask),
            "approx_kl": 0.5 * masked_mean(log_ratio**2, mask),
            "ratio_mean": masked_mean(ratio, mask),
        }
    return loss, stats


def value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor,
    clip_range_value: float = 0.2,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Clipped value loss and its stat ``vf_clipfrac``."""
    values_clipped = torch.clamp(values, old_values - clip_range_value, old_values + clip_range_value)
    unclipped = (values - returns) ** 2
    clipped = (values_clipped - returns) ** 2
    loss = 0.5 * masked_mean(torch.max(unclipped, clipped), mask)
    with torch.no_grad():
        stats = {"vf_clipfrac": masked_mean((clipped > unclipped).to(values.dtype), mask)}
    return loss, stats
