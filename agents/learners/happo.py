"""HAPPO: heterogeneous-agent PPO (Kuba et al., ICLR 2022), a team learner over PPO members.

Independent PPO updates every agent against the others' *old* policies, as if they stood still.
HAPPO updates the agents one after another, in a random order drawn each iteration, and each
later agent learns from the advantage weighted by how much the agents updated before it changed
their own answers on the same conversations. For the order ``i_1, ..., i_n``, agent ``i_m``
minimises PPO's clipped loss with the advantage ``M^{i_{1:m}} A`` in place of ``A``::

    M^{i_{1:m}}_b = prod_{j < m} pi_new^{i_j}(y^{i_j}_b | x^{i_j}_b) / pi_old^{i_j}(y^{i_j}_b | x^{i_j}_b)
                  = exp( sum_{j < m} [log pi_new^{i_j}(y^{i_j}_b | x^{i_j}_b) - log pi_old^{i_j}(y^{i_j}_b | x^{i_j}_b)] )

    L^{i_m} = mean_t max(-M_b A_bt rho_bt, -M_b A_bt clip(rho_bt, 1 - eps, 1 + eps))

where ``y^{i}_b`` is agent ``i``'s whole response in conversation ``b`` (an action is an answer:
its probability is the product of its tokens'; over several rounds, ``--rounds``, everything the agent
said: the product over its turns, each given its prompt), ``x^{i}_b`` its prompt, ``pi_old`` the policy
that acted and ``pi_new`` the policy after its update; ``M^{i_1} = 1``. As ``M >= 0``,
``min(rho M A, clip(rho) M A) = M min(rho A, clip(rho) A)``: the weight multiplies the advantage
(:meth:`~cory_agents.learners.ppo.PPOLearner.learn`'s ``advantage_weights``, applied after whitening, as
HARL's implementation weights the normalised advantage) and PPO's update does the rest. ``M`` is
detached: it weights, it is not learned through.

Each member keeps its own value head: its advantage ``A`` is GAE of the collective reward minus its
KL penalty from its own context, which holds the whole transcript up to its turn (the query, and
the earlier agents' answers), so each critic sees the state at its turn; HAPPO's paper uses one
centralised critic for the same quantity. The cost over independent PPO is two no-grad passes per
member but the last in the order (its log-probabilities before and after its update).

By default ``M`` is not clipped (nor is it in HARL's implementation), but here an action is a whole
answer, so ``log M`` sums the log-ratios of every token of every earlier answer: with long answers
or a large learning rate it can grow far from 1. ``happo_factor_mean`` and ``happo_factor_max`` are
logged for each member (the weights it learned with) to watch it. ``--happo-factor-clip c`` bounds
the weight each member learns with to ``[1/c, c]`` (``|log M| <= log c``, symmetric as the ratio's
log is; ``c = 1`` leaves sequential independent PPO). The product itself runs unclipped: a member's
weight is the clip of the true ``M``, not a product of clipped factors. With the clip,
``happo_factor_clipped`` is the fraction of conversations whose weight it changed.

**In log space.** ``M`` is kept as its logarithm, the running sum of the earlier agents' log-ratios
``log pi_new - log pi_old`` (each a finite float32 sum of log-probabilities, summed here in
float64), and a member's weight is one exponential of it::

    log M^{i_{1:m}}_b = sum_{j < m} [log pi_new^{i_j}(y_b | x_b) - log pi_old^{i_j}(y_b | x_b)]
    weight_b          = exp(log M_b)                                  (unclipped)
                      = clip(exp(clip(log M_b, -log c, log c)), 1/c, c)   (--happo-factor-clip c)

the outer clip only absorbing the rounding of ``exp(log c)``. A product of float32 ratios fails
where this does not: one ratio past ``e^88.7`` overflows to ``inf``, and ``inf`` times a ratio that
underflowed to 0 (three agents or more), or times 0, is NaN, which no clip afterwards can mend.
Here the clip acts on ``log M``, always finite, so a clipped weight is always finite and exact
(``log M = 100`` with ``c = 2`` gives 2, not ``inf`` clipped). Unclipped, a weight past float32's
range (``log M > 88.7``) becomes ``inf`` where the member weights its float32 advantages: no float32
number is that weight, so the member's advantages are not finite and its update stops before its
first optimizer step (:class:`~cory_env.errors.NonFiniteUpdateError`, to which HAPPO adds the largest
``|log M|`` and ``--happo-factor-clip``), rather than learning from a weight made up. The logged
``happo_factor_mean``/``_max`` are those of the weights used, ``happo_factor_clipped`` the fraction
of conversations with ``|log M| > log c``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch

from cory_agents.learners.base import Episode
from cory_agents.learners.lm import flag
from cory_agents.learners.ppo import PPOConfig, PPOLearner
from cory_agents.learners.team import TeamEpisode
from cory_env.errors import NonFiniteUpdateError, UsageError

#: The update order's random stream, apart from the members' (seeded with the run's seed too).
ORDER_STREAM = 1


@dataclass(kw_only=True)
class HAPPOConfig(PPOConfig):
    """HAPPO's settings (``--learner happo``): PPO's, for each member; the order is drawn from ``--seed``."""

    _argument_group_name: ClassVar[str] = (
        "Learner happo: sequential PPO updates, weighted by the earlier agents' change"
    )

    happo_factor_clip: float | None = flag(
        None,
        "happo: clip each agent's weight M (the earlier agents' probability ratios of their answers) to [1/c, c], c >= 1 (default: unclipped, as HARL)",
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        check_factor_clip(self.happo_factor_clip)


def check_factor_clip(clip: float | None) -> None:
    """``--happo-factor-clip``: ``None`` or a finite number of at least 1, else a UsageError."""
    if clip is not None and not (isinstance(clip, int | float) and 1 <= clip < float("inf")):
        raise UsageError(
            f"--happo-factor-clip bounds HAPPO's weight M to [1/c, c], so c must be a finite number of at least 1 "
            f"(1: no weighting), got {clip!r}; leave it out for no clip"
        )


class HAPPO:
    """A team of :class:`~cory_agents.learners.ppo.PPOLearner` members updated one after another (module docstring).

    Args:
        members: ``{learner name: PPOLearner}``, one per agent.
        seed: seeds the update order (the run's ``--seed``: the same on every process of a
            data-parallel run; a stream of its own, apart from the members' generators).
        factor_clip: ``c`` of ``--happo-factor-clip``: each weight clipped to ``[1/c, c]``; ``None``:
            unclipped.
    """

    def __init__(self, members: dict[str, PPOLearner], seed: int = 0, factor_clip: float | None = None):
        not_ppo = [name for name, member in members.items() if not isinstance(member, PPOLearner)]
        if not_ppo:
            raise TypeError(f"HAPPO's members are PPO learners (advantage weights); {not_ppo} are not")
        check_factor_clip(factor_clip)
        self.members = members
        self.factor_clip = factor_clip
        self.generator = torch.Generator().manual_seed(
            int(np.random.SeedSequence([seed, ORDER_STREAM]).generate_state(1)[0])
        )

    def learn(self, team: TeamEpisode) -> dict[str, dict[str, float]]:
        names = list(team.episodes)
        order = [names[i] for i in torch.randperm(len(names), generator=self.generator).tolist()]
        log_factor: torch.Tensor | None = None  # log M per conversation, float64 on the CPU; 0 for the first agent
        stats: dict[str, dict[str, float]] = {}
        for position, name in enumerate(order):
            member, episode = self.members[name], team.episodes[name]
            last = position == len(order) - 1
            before = None if last else conversation_logprobs(member, episode)
            weight = None if log_factor is None else self.weights(log_factor)
            try:  # a conversation's weight on each of its rows (one per turn, turn-major)
                rows = None if weight is None else weight.repeat(episode.turns)
                stats[name] = member.learn(episode, advantage_weights=rows)
            except NonFiniteUpdateError as error:
                raise self.explained(error, log_factor) from error
            weights = np.ones(episode.num_conversations) if weight is None else weight.numpy()
            stats[name] |= {"update_position": float(position)} | self.factor_stats(weights, log_factor, team)
            if not last:  # this agent's change on each conversation weights the later ones
                change = (conversation_logprobs(member, episode) - before).cpu().double()
                log_factor = change if log_factor is None else log_factor + change
        return stats

    def weights(self, log_factor: torch.Tensor) -> torch.Tensor:
        """The weights a member learns with, from ``log M`` (module docstring): ``exp(log M)``, or with the clip
        ``c`` ``exp`` of ``log M`` clipped to ``[-log c, log c]`` (exactly ``c`` or ``1/c`` at the bounds)."""
        if self.factor_clip is None:
            return torch.exp(log_factor)
        c = self.factor_clip
        return torch.exp(log_factor.clamp(-math.log(c), math.log(c))).clamp(1 / c, c)

    def factor_stats(self, weights: np.ndarray, log_factor: torch.Tensor | None, team: TeamEpisode) -> dict[str, float]:
        """The weights a member learned with, over every process's conversations: their mean and
        maximum, and with the clip the fraction it changed (``|log M| > log c``)."""
        stats = {}
        if self.factor_clip is not None:
            outside = (
                np.zeros(len(weights)) if log_factor is None else log_factor.abs().numpy() > math.log(self.factor_clip)
            )
            stats["happo_factor_clipped"] = float(team.data_parallel.gather(outside.astype(np.float64)).mean())
        weights = team.data_parallel.gather(weights)
        return {"happo_factor_mean": float(weights.mean()), "happo_factor_max": float(weights.max())} | stats

    def explained(self, error: NonFiniteUpdateError, log_factor: torch.Tensor | None) -> NonFiniteUpdateError:
        """A member's :class:`~cory_env.errors.NonFiniteUpdateError` with what HAPPO's weight adds: how large
        ``log M`` grew on its conversations, and ``--happo-factor-clip``."""
        if log_factor is None:  # the first in the order learns with weight 1: nothing of HAPPO's to add
            return error
        largest = float(log_factor.abs().max())
        clip = (
            f"a lower --happo-factor-clip (now {self.factor_clip:g})"
            if self.factor_clip is not None
            else "--happo-factor-clip (e.g. 10) to bound it"
        )
        return NonFiniteUpdateError(
            f"{error}; HAPPO weighted its advantages by M, the earlier agents' probability ratios, "
            f"with |log M| up to {largest:.4g} (float32 overflows past 88.7): try {clip}",
            learner=error.learner,
            iteration=error.iteration,
            quantity=error.quantity,
        )

    def state_dict(self) -> dict[str, Any]:
        return {"generator": self.generator.get_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.generator.set_state(state["generator"])


def conversation_logprobs(member: PPOLearner, episode: Episode) -> torch.Tensor:
    """``(B,)`` the log-probability of each conversation's answers by ``member`` (over several rounds its turns'
    summed: the agent's action is everything it said)."""
    return member.response_logprobs(episode).reshape(episode.turns, -1).sum(0)
