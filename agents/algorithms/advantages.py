"""Advantage estimators: GAE with masked whitening (PPO), group-relative baselines (GRPO, RLOO).

All tensors are ``(B, T)`` over the response tokens of a batch, right-padded: ``mask``
is 1 at real tokens and 0 at the padding after a response ended.

GAE (Schulman et al., 2016), episodic, with ``V_T = 0`` after the last real token::

    delta_t = r_t + gamma * V_{t+1} - V_t
    A_t     = delta_t + gamma * lam * A_{t+1}
    R_t     = A_t + V_t                      (the value-function target)

Rewards and values at padding are zeroed first, so padding never leaks into real
positions and gets ``A_t = R_t = 0``.

Whitening (TRL 0.7's ``masked_whiten``; TRL 1.x no longer ships it)::

    whiten(x) = (x - mean) / sqrt(var + 1e-8)      mean, var over masked tokens only,
                                                   var unbiased (Bessel-corrected)

With ``shift_mean=False`` the mean is added back (scale only).

Group-relative advantages (critic-free): the batch holds groups of ``G`` consecutive
responses to the same prompt and each response's sequence-level reward ``r_i`` is
compared with its group's::

    grpo: A_i = (r_i - mean_j r_j) / (std_j r_j + eps)      std Bessel-corrected, eps 1e-4
                                                            (Shao et al. 2024; TRL GRPOTrainer)
    rloo: A_i = r_i - mean_{j != i} r_j                     leave-one-out baseline
          = G / (G - 1) * (r_i - mean_j r_j)                (Ahmadian et al. 2024; TRL RLOOTrainer)

A group whose rewards are all equal gets ``A_i = 0`` in both: it says nothing about
which response is better.
"""

from __future__ import annotations

import torch


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``x`` over the positions where ``mask`` is 1 (a scalar tensor)."""
    mask = mask.to(x.dtype)
    return (x * mask).sum() / mask.sum()


def masked_var(x: torch.Tensor, mask: torch.Tensor, unbiased: bool = True) -> torch.Tensor:
    """Variance of ``x`` over masked positions; Bessel-corrected by default, as TRL 0.7."""
    n = mask.sum()
    if n < 2:
        raise ValueError(f"masked_var needs at least 2 masked elements, got {int(n)}")
    var = masked_mean((x - masked_mean(x, mask)) ** 2, mask)
    return var * n / (n - 1) if unbiased else var


def whiten(x: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True) -> torch.Tensor:
    """Normalise ``x`` to mean 0, std 1 over masked positions; padding is set to 0.

    Example:
        >>> x, m = torch.tensor([[1.0, 2.0, 3.0, 99.0]]), torch.tensor([[1, 1, 1, 0]])
        >>> whiten(x, m)
        tensor([[-1.,  0.,  1.,  0.]])
    """
    mean, var = masked_mean(x, mask), masked_var(x, mask)
    whitened = (x - mean) * torch.rsqrt(var + 1e-8)
    if not shift_mean:
        whitened = whitened + mean
    return whitened * mask.to(x.dtype)


def explained_variance(values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``1 - Var(returns - values) / Var(returns)`` over masked positions: how much of the returns'
    variance the value predictions account for (1: all; 0: no better than their mean; negative:
    worse), the critic diagnostic of SB3 and TRL (``val/var_explained``).

    Example:
        >>> m = torch.ones(1, 4)
        >>> explained_variance(torch.tensor([[1.0, 2.0, 3.0, 4.0]]), torch.tensor([[1.0, 2.0, 3.0, 5.0]]), m)
        tensor(0.9143)
    """
    return 1 - masked_var(returns - values, mask) / masked_var(returns, mask)


@torch.no_grad()
def gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor,
    gamma: float = 1.0,
    lam: float = 0.95,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token advantages and returns, both ``(B, T)`` and 0 at padding.

    Example:
        >>> r, v = torch.tensor([[0.0, 1.0]]), torch.tensor([[0.5, 0.5]])
        >>> gae(r, v, torch.ones(1, 2), gamma=1.0, lam=1.0)[0]
        tensor([[0.5000, 0.5000]])
    """
    mask = mask.to(values.dtype)
    rewards, values = rewards * mask, values * mask
    advantages = torch.zeros_like(values)
    next_advantage = torch.zeros_like(values[:, 0])
    next_value = torch.zeros_like(values[:, 0])
    for t in reversed(range(values.shape[1])):
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        next_advantage = (delta + gamma * lam * next_advantage) * mask[:, t]
        advantages[:, t] = next_advantage
        next_value = values[:, t]
    return advantages, advantages + values


@torch.no_grad()
def gae_over_turns(
    rewards: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor,
    turns: int,
    gamma: float = 1.0,
    lam: float = 0.95,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE across an agent's turns: rows ``(turns * B, T)`` in turn-major order (row ``r * B + b`` is
    conversation ``b``'s turn ``r``); each conversation's tokens of all its turns form one
    trajectory, so the last token of turn ``r`` bootstraps from the first of turn ``r + 1``
    (``V_{t+1}``, ``A_{t+1}``: the next real token of the agent, whatever lies between: the other
    agents' turns are observations). Padding gets ``A_t = R_t = 0``. With ``turns=1`` the same
    numbers as :func:`gae`.

    Example:
        >>> r = torch.tensor([[0.0, 0.0], [1.0, 0.0]])  # turn 0, then turn 1 (its second column padding)
        >>> m = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
        >>> gae_over_turns(r, torch.zeros(2, 2), m, turns=2, gamma=1.0, lam=1.0)[0]
        tensor([[1., 1.],
                [1., 0.]])
    """
    rows, T = values.shape
    if rows % turns:
        raise ValueError(f"{rows} rows do not split into {turns} turns of the same conversations")
    B = rows // turns

    def trajectory(x: torch.Tensor) -> torch.Tensor:  # (turns * B, T) -> (B, turns * T), turns in order
        return x.reshape(turns, B, T).permute(1, 0, 2).reshape(B, turns * T)

    mask_t = trajectory(mask.to(values.dtype))
    rewards_t, values_t = trajectory(rewards) * mask_t, trajectory(values) * mask_t
    advantages = torch.zeros_like(values_t)
    next_advantage = torch.zeros_like(values_t[:, 0])
    next_value = torch.zeros_like(values_t[:, 0])
    for t in reversed(range(turns * T)):
        real = mask_t[:, t].bool()
        delta = rewards_t[:, t] + gamma * next_value - values_t[:, t]
        advantage = delta + gamma * lam * next_advantage
        advantages[:, t] = advantage * mask_t[:, t]
        next_advantage = torch.where(real, advantage, next_advantage)  # padding passes the next token's on
        next_value = torch.where(real, values_t[:, t], next_value)
    advantages = advantages.reshape(B, turns, T).permute(1, 0, 2).reshape(rows, T)
    return advantages, advantages + values * mask.to(values.dtype)


GROUP_BASELINES = ("grpo", "rloo")


def group_advantages(rewards: torch.Tensor, group_size: int, baseline: str = "grpo", eps: float = 1e-4) -> torch.Tensor:
    """Sequence-level advantages ``(B,)`` of rewards ``(B,)`` in consecutive groups of ``group_size``.

    Example:
        >>> group_advantages(torch.tensor([1.0, 3.0, 5.0, 5.0]), 2, "rloo")
        tensor([-2.,  2.,  0.,  0.])
    """
    if baseline not in GROUP_BASELINES:
        raise ValueError(f"baseline must be one of {GROUP_BASELINES}, got {baseline!r}")
    if group_size < 2:
        raise ValueError(f"group-relative advantages need groups of at least 2 responses, got group_size={group_size}")
    if rewards.ndim != 1 or len(rewards) % group_size:
        raise ValueError(
            f"rewards of shape {tuple(rewards.shape)} do not split into groups of {group_size}: "
            f"give one reward per response, a multiple of group_size in all"
        )
    groups = rewards.view(-1, group_size)
    centred = groups - groups.mean(dim=1, keepdim=True)
    # Exactly 0 for a group of equal rewards (a float mean may be off by an ulp).
    centred = centred.masked_fill(groups.amax(dim=1, keepdim=True) == groups.amin(dim=1, keepdim=True), 0.0)
    if baseline == "rloo":
        return (centred * group_size / (group_size - 1)).view(-1)
    return (centred / (groups.std(dim=1, keepdim=True) + eps)).view(-1)
