"""Collective reward: every agent is rewarded for the whole team's answers.

CORY trains both agents on ``r(s0, a1) + r(s0, a2)``, the sum of the pioneer's and
the observer's task rewards, so the pioneer gains from giving the observer a useful
answer to build on.

Example:
    >>> from cory_env import env, CollectiveRewardWrapper
    >>> e = CollectiveRewardWrapper(env(prompts=["The movie"], max_new_tokens=4))
    >>> e.reset(seed=0)
    >>> rewards, task_rewards = {}, {}
    >>> for agent in e.agent_iter():
    ...     obs, reward, term, trunc, info = e.last()
    ...     if term:  # the episode is over: the agent's reward and its own task reward
    ...         rewards[agent], task_rewards[agent] = reward, info["task_reward"]
    ...     e.step(None if term else e.action_space(agent).sample())
    >>> print(rewards["pioneer"] == rewards["observer"] == task_rewards["pioneer"] + task_rewards["observer"])
    True
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from pettingzoo import AECEnv
from pettingzoo.utils.wrappers import BaseWrapper

from cory_env.wrappers.state import forward_state

AGGREGATES = ("sum", "mean")


@forward_state
class CollectiveRewardWrapper(BaseWrapper):
    """At the end of an episode every agent receives the collective reward.

    In an episode of several rounds (``rounds``) each agent's task reward is the sum of its turns'
    scores. With the environment's ``turn_rewards`` the collective reward is per round instead:
    at the end of each round every agent receives the round's collective reward (for its turn of
    that round), and nothing at the other turns' ends.

    Args:
        env: the pioneer/observer environment (possibly already wrapped).
        aggregate: ``"sum"`` (the paper) or ``"mean"`` of the task rewards.
        weights: optional weight per role, e.g. ``{"pioneer": 1.0, "observer": 2.0}``;
            the collective reward is ``sum_i w_i r_i`` (divided by ``sum_i w_i`` for ``"mean"``).

    ``infos[agent]["task_reward"]`` keeps each agent's own task reward;
    ``infos[agent]["reward"]`` and ``last()`` give the collective reward.
    """

    def __init__(
        self,
        env: AECEnv,
        aggregate: str = "sum",
        weights: Mapping[str, float] | None = None,
    ):
        super().__init__(env)
        if aggregate not in AGGREGATES:
            raise ValueError(f"aggregate must be one of {AGGREGATES}, got {aggregate!r}")
        roles = list(self.env.unwrapped.possible_agents)
        weights = dict(weights) if weights is not None else {r: 1.0 for r in roles}
        unknown = set(weights) - set(roles)
        if unknown or set(weights) != set(roles):
            raise ValueError(f"weights must give one weight for each role {roles}, got {sorted(weights)}")
        total = sum(weights.values())
        if aggregate == "mean" and total == 0:
            raise ValueError("weights sum to zero: the mean is undefined")
        self.aggregate = aggregate
        self.weights = {r: float(w) / (total if aggregate == "mean" else 1.0) for r, w in weights.items()}
        self._delivered = False

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> None:
        if options and "answers" in options:  # its rewards or seating would not fit a replay
            raise ValueError(
                "a replay (reset(options={'answers': ...})) is the raw environment's: call it on a copy of "
                "env.unwrapped (copy.copy(env.unwrapped)), which also keeps the played episode"
            )
        self._delivered = False
        self.env.reset(seed=seed, options=options)

    def step(self, action: Any) -> None:
        self.env.step(action)
        base = self.env.unwrapped
        if base.turn_rewards:
            if (ended := base.turn_ended) is not None:
                self._deliver_round(base, ended)
        elif base.episode_over and not self._delivered:
            self._delivered = True
            task_rewards = base.episode_task_rewards()  # each agent's, summed over its turns
            collective = sum(w * np.asarray(task_rewards[r]) for r, w in self.weights.items())
            base.deliver_rewards({r: collective for r in task_rewards})

    def _deliver_round(self, base: Any, ended: str) -> None:
        """Turn rewards: nothing at a turn's end until the round's last; then every agent receives
        the round's collective reward, for its turn of that round."""
        if ended != base.possible_agents[-1]:
            base.deliver_turn_rewards({ended: np.zeros(base.num_conversations)})
            return
        scores = {r: base.played_turns(r)[-1].task_reward for r in self.weights}
        collective = sum(w * np.asarray(scores[r]) for r, w in self.weights.items())
        base.deliver_turn_rewards({r: collective for r in scores})

    def __str__(self) -> str:
        return str(self.env)
