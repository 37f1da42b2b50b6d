"""Value normalisation: MAPPO's running statistics of the value targets (Yu et al., NeurIPS 2022, section 4.1).

A critic whose targets change scale as the policy learns fits them badly (a collective reward going from 0.2
to 1.6 over training). MAPPO trains its critic on **normalised** targets instead: it keeps running
estimates of the returns' first two moments with a decay ``beta``, debiased as Adam debiases its moments::

    m_k = beta m_{k-1} + (1 - beta) mean(G)        s_k = beta s_{k-1} + (1 - beta) mean(G^2)
    d_k = beta d_{k-1} + (1 - beta)                (m_0 = s_0 = d_0 = 0)
    mu  = m_k / max(d_k, eps)                       sigma^2 = max(s_k / max(d_k, eps) - mu^2, 1e-2)

The critic predicts ``v = (V - mu) / sigma``: its targets are ``(G - mu) / sigma``, its clip range holds in
that space, and what GAE reads is ``V = sigma v + mu`` (:meth:`ValueNorm.denormalize`). As in the reference
code (on-policy's and HARL's ``ValueNorm``: ``beta = 0.99999``, one update per batch of targets, the
variance floor ``1e-2``), the statistics are updated before each fit and nothing rescales the critic's head
when they move (PopArt's output preservation is not part of MAPPO's default).
"""

from __future__ import annotations

import torch

#: The reference's decay: nearly the mean over every batch seen so far.
BETA = 0.99999
#: The debiasing term's floor and the variance's.
EPSILON, MIN_VAR = 1e-5, 1e-2


class ValueNorm:
    """Running, debiased mean and variance of value targets (module docstring), in float64.

    Example:
        >>> norm = ValueNorm()
        >>> norm.update(torch.tensor([1.0, 3.0]), torch.ones(2))
        >>> [round(x, 6) for x in norm.mean_var()]
        [2.0, 1.0]
        >>> norm.denormalize(norm.normalize(torch.tensor([5.0])))
        tensor([5.])
    """

    def __init__(self, beta: float = BETA) -> None:
        self.beta = beta
        self.running_mean = self.running_mean_sq = self.debiasing = 0.0

    def update(self, targets: torch.Tensor, mask: torch.Tensor) -> None:
        """One batch of targets: the masked positions of ``targets``."""
        values = targets.detach().double()[mask.bool()]
        if values.numel():
            self.update_moments(float(values.mean()), float((values**2).mean()))

    def update_moments(self, mean: float, mean_sq: float) -> None:
        """One batch of targets given by its mean and mean square (a batch gathered from several processes)."""
        b = self.beta
        self.running_mean = b * self.running_mean + (1 - b) * mean
        self.running_mean_sq = b * self.running_mean_sq + (1 - b) * mean_sq
        self.debiasing = b * self.debiasing + (1 - b)

    def mean_var(self) -> tuple[float, float]:
        """``(mu, sigma^2)``, debiased; ``(0, 1e-2)`` before any update, as the reference's."""
        d = max(self.debiasing, EPSILON)
        mean = self.running_mean / d
        return mean, max(self.running_mean_sq / d - mean**2, MIN_VAR)

    def normalize(self, values: torch.Tensor) -> torch.Tensor:
        mean, var = self.mean_var()
        return ((values.double() - mean) / var**0.5).to(values.dtype)

    def denormalize(self, values: torch.Tensor) -> torch.Tensor:
        mean, var = self.mean_var()
        return (values.double() * var**0.5 + mean).to(values.dtype)

    def state_dict(self) -> dict[str, float]:
        return {"running_mean": self.running_mean, "running_mean_sq": self.running_mean_sq, "debiasing": self.debiasing}

    def load_state_dict(self, state: dict[str, float]) -> None:
        self.running_mean, self.running_mean_sq, self.debiasing = (
            float(state["running_mean"]),
            float(state["running_mean_sq"]),
            float(state["debiasing"]),
        )
