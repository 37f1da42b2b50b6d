"""Drawing a token from a distribution: inverse transform sampling, one uniform number per row.

:func:`sample_categorical` is what :class:`~cory_agents.acting.actor.LMActor` samples with; :func:`draw` is its
arithmetic given the uniform numbers, which the compiled decode step (:mod:`cory_agents.acting.static_decode`)
runs inside its graph, and :func:`not_a_distribution` the error of a row that is none.
"""

from __future__ import annotations

import torch


def draw(probs: torch.Tensor, uniform: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(tokens, valid)``: per row of ``probs`` ``(B, V)`` the first id whose cumulative probability (float64,
    divided by the row's total) exceeds ``uniform`` ``(B, 1)``, and ``(B, 1)`` whether the row was a distribution
    (its total finite and above 0). A row that was not one gets a meaningless token: check ``valid``."""
    cdf = probs.double().cumsum(-1)
    total = cdf[:, -1:]
    valid = (total > 0) & torch.isfinite(total)
    return torch.searchsorted(cdf / total, uniform, right=True).squeeze(1), valid


def not_a_distribution(valid: torch.Tensor, hint: str = "") -> ValueError:
    """The error of the first row that :func:`draw` found not a distribution (``hint``: what else may cause it)."""
    bad = int((~valid.reshape(-1)).nonzero()[0, 0])
    return ValueError(
        f"the next-token probabilities of row {bad} are not a distribution (they contain NaN or inf, or "
        f"are all 0): the policy's logits diverged; lower the learning rate (--lr) or resume an earlier checkpoint"
        + (f" ({hint})" if hint else "")
    )


def sample_categorical(probs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """One token id per row of ``probs`` ``(B, V)``, drawn from that row's distribution.

    Inverse transform sampling: the first id whose cumulative probability (float64, divided by
    the row's total, so rows need not sum exactly to 1) exceeds a uniform draw from [0, 1); ids
    of probability 0 (cut by top-k or top-p) are never drawn. The same distribution as
    ``torch.multinomial(probs, 1)``, which on a CPU draws an exponential variate for every id
    (for a 49152-token vocabulary many times slower than this; docs/benchmarks.md times both);
    one uniform draw per row from ``generator`` instead. A row with NaN or inf, or all zeros,
    raises a ``ValueError``.

    Example:
        >>> sample_categorical(torch.tensor([[0.0, 1.0, 0.0], [0.5, 0.0, 0.5]]), torch.Generator().manual_seed(0))
        tensor([1, 2])
    """
    cdf = probs.double().cumsum(-1)
    total = cdf[:, -1:]
    valid = (total > 0) & torch.isfinite(total)
    if not bool(valid.all()):  # a sync, but the tokens go to the host next anyway
        raise not_a_distribution(valid)
    u = torch.rand(probs.shape[0], 1, generator=generator, dtype=torch.float64, device=probs.device)
    return torch.searchsorted(cdf / total, u, right=True).squeeze(1)  # the last entry exactly 1.0 > every draw
