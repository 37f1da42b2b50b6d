"""The KL penalty to the frozen reference model: estimators, per-token rewards, coefficient.

Per-token KL of the policy ``p`` to the reference ``q`` at a sampled token ``x_t``::

    k1:   log p(x_t) - log q(x_t)                       (unbiased, can be negative)
    abs:  |log p(x_t) - log q(x_t)|
    mse:  0.5 * (log p(x_t) - log q(x_t))^2
    k3:   q(x_t)/p(x_t) - 1 - log(q(x_t)/p(x_t))      (unbiased, never negative: Schulman's k3,
                                                         the GRPO paper's and TRL GRPOTrainer's)
    full: sum_v p(v) * (log p(v) - log q(v))            (exact, needs the logits;
                                                         what the CORY authors' code uses)

Per-token reward for an agent (CORY, as TRL 0.7's ``compute_rewards``)::

    r_t = -kl_coef * KL_t  +  [t == last real token] * task_reward

The coefficient is fixed, or adapted as in Ziegler et al. (2019)::

    e     = clip(KL / target - 1, -0.2, 0.2)
    coef *= 1 + e * n_steps / horizon
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

ESTIMATORS = ("k1", "abs", "mse", "k3", "full")


def kl_per_token(
    logprobs: torch.Tensor,
    ref_logprobs: torch.Tensor,
    estimator: str = "k1",
    logits: torch.Tensor | None = None,
    ref_logits: torch.Tensor | None = None,
) -> torch.Tensor:
    """KL to the reference at each response token, ``(B, T)``.

    ``logprobs``/``ref_logprobs`` are ``(B, T)`` log-probabilities of the sampled tokens;
    ``"full"`` ignores them and uses ``logits``/``ref_logits`` of shape ``(B, T, V)``.
    """
    if estimator not in ESTIMATORS:
        raise ValueError(f"unknown KL estimator {estimator!r}; expected one of {ESTIMATORS}")
    if estimator == "full":
        if logits is None or ref_logits is None:
            raise ValueError('the "full" KL estimator needs both logits and ref_logits of shape (B, T, V)')
        log_p, log_q = F.log_softmax(logits.float(), dim=-1), F.log_softmax(ref_logits.float(), dim=-1)
        return (log_p.exp() * (log_p - log_q)).sum(-1)
    diff = logprobs - ref_logprobs
    if estimator == "k1":
        return diff
    if estimator == "abs":
        return diff.abs()
    if estimator == "k3":
        return torch.expm1(-diff) + diff
    return 0.5 * diff**2


def token_rewards(task_rewards: torch.Tensor, kl: torch.Tensor, mask: torch.Tensor, kl_coef: float) -> torch.Tensor:
    """``-kl_coef * kl`` at real tokens, plus ``task_rewards`` (B,) at each row's last real token."""
    mask = mask.to(kl.dtype)
    if (mask.sum(1) == 0).any():
        raise ValueError("every response needs at least one real token to carry its task reward")
    rewards = -kl_coef * kl * mask
    positions = torch.arange(1, mask.shape[1] + 1, device=mask.device, dtype=mask.dtype)
    last = (mask * positions).argmax(dim=1)
    rewards[torch.arange(len(last), device=last.device), last] += task_rewards.to(rewards.dtype)
    return rewards


class FixedKLController:
    """A constant KL coefficient ``value``."""

    def __init__(self, coef: float) -> None:
        self.value = float(coef)

    def update(self, current_kl: float, n_steps: int) -> None:
        """Does nothing: the coefficient is fixed."""

    def state_dict(self) -> dict[str, Any]:
        """The coefficient; hyperparameters come from the config on resume."""
        return {"value": self.value}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.value = float(state["value"])


class AdaptiveKLController(FixedKLController):
    """Ziegler et al. (2019): move ``value`` so the observed KL tracks ``target``.

    Example:
        >>> ctl = AdaptiveKLController(0.4, target=6.0, horizon=10000)
        >>> ctl.update(current_kl=12.0, n_steps=256)  # error clipped to +0.2
        >>> round(ctl.value, 6)
        0.402048
    """

    def __init__(self, init_coef: float, target: float, horizon: int) -> None:
        super().__init__(init_coef)
        self.target = target
        self.horizon = horizon

    def update(self, current_kl: float, n_steps: int) -> None:
        """Scale ``value`` by ``1 + clip(current_kl / target - 1, ±0.2) * n_steps / horizon``."""
        proportional_error = float(np.clip(current_kl / self.target - 1, -0.2, 0.2))
        self.value *= 1 + proportional_error * n_steps / self.horizon
