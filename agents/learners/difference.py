"""Difference rewards (Wolpert and Tumer, 2002): each agent learns from its own part in the collective reward.

Under CORY every agent receives the collective reward ``R_b = sum_i r^i_b`` of conversation ``b``
(``r^i`` agent ``i``'s task reward): the pioneer is paid for the observer's answer whether its own
answer helped it or not. The difference reward of agent ``i`` is the collective reward minus the
collective reward of the same conversation had agent ``i`` given no answer::

    D^i_b = R_b - R^{-i}_b
    R^{-i}_b = sum_{j < i} r^j_b + sum_{j > i} r'^j_b          (agent i answered nothing: no reward of its own)
    D^i_b = r^i_b + sum_{j > i} (r^j_b - r'^j_b)

``r'^j`` is agent ``j``'s task reward when the chain is played again from position ``i + 1`` with
agent ``i``'s answer blank in the later prompts (the earlier answers kept): a counterfactual
rollout by the same policies (:func:`~cory_agents.learners.replay.replay`). Its samples reuse the
episode's random numbers (**common random numbers**, the default): each later agent samples from
its generator as it stood at the start of its turn in the episode, so a conversation its prompt
change does not reach is replayed token for token and its ``r^j - r'^j`` is exactly 0, and
elsewhere the difference holds the effect of agent ``i``'s answer without the noise of a second,
independent sample (``--no-common-random-numbers`` draws fresh ones: the variance of ``D`` with and
without is in docs/multi-agent-algorithms.md). ``--difference-replays K`` averages ``r'`` over ``K``
replays (the first with the episode's random numbers, the others fresh), each one costing the turns
after agent ``i`` again. So the pioneer of a chain of
two learns from ``r^p + (r^o - r'^o)``: its own reward plus how much its answer raised the
observer's over the observer answering alone; the last agent, whose answer no one reads,
learns from its own task reward ``r^last``. Terms that do not depend on agent ``i``'s answer
(the earlier agents' rewards) cancel: the signal is the agent's own contribution, with less
variance from the others' answers than ``R``.

Each member then learns from its episode with ``D^i`` as the reward (any per-agent learner:
PPO by default, the KL penalty its own). The cost is the counterfactual rollout: in a chain of
``N`` agents, agent ``i``'s replay plays the ``N - 1 - i`` agents after it, ``N (N - 1) / 2``
turns an iteration beside the ``N`` of the episode (one more turn, for two agents: half the
episode again, plus a reward call). The environment replays an episode with given answers
through ``reset(options={"answers": ...})`` on a copy of itself.

Why difference rewards and not a centralised critic (MAPPO): in this chain every agent sees the
whole transcript up to its turn (the query and the earlier answers are in its prompt), so a
critic over the whole transcript knows nothing a member's own value head does not; what
independent PPO on the collective reward lacks is credit, which the counterfactual gives.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import numpy as np

from cory_agents.learners.base import Learner
from cory_agents.learners.lm import flag
from cory_agents.learners.ppo import PPOConfig
from cory_agents.learners.replay import KEEP, replay
from cory_agents.learners.team import TeamEpisode
from cory_env.errors import UsageError

#: What an agent "without an answer" leaves in the later agents' prompts.
BLANK = ""


@dataclasses.dataclass(kw_only=True)
class DifferenceConfig(PPOConfig):
    """``--learner difference``: PPO's settings, for each member, learning from its difference reward."""

    _argument_group_name: ClassVar[str] = "Learner difference: each agent's reward is its own contribution"

    difference_replays: int = flag(
        1, "difference: counterfactual replays averaged per agent (K; each costs the later agents' turns again)"
    )
    common_random_numbers: bool = flag(
        True, "difference: replay with the episode's random numbers (the first replay; fresh ones with --no-...)"
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        replays = self.difference_replays
        if not (isinstance(replays, int) and not isinstance(replays, bool) and replays >= 1):
            raise UsageError(
                f"--difference-replays must be a whole number of at least 1 (e.g. 1 or 4), got {replays!r}"
            )


class DifferenceRewards:
    """A team of per-agent learners, each learning from its difference reward (module docstring).

    Args:
        members: ``{learner name: Learner}``, one per agent: they act in the counterfactual
            rollouts (with their own sampling generators) and learn from their episodes with
            ``scores`` replaced by their difference rewards.
    """

    def __init__(self, members: dict[str, Learner], replays: int = 1, common_random_numbers: bool = True):
        self.members = members
        self.replays = replays
        self.common_random_numbers = common_random_numbers

    def learn(self, team: TeamEpisode) -> dict[str, dict[str, float]]:
        if getattr(team.env, "rounds", 1) > 1:
            raise ValueError("difference rewards replay one round of the chain: the environment must play rounds=1")
        order = team.order  # chain positions this iteration
        task = np.array([team.episodes[name].task_rewards for name in order])  # (N, B)
        with team.acting():  # every replay first, by the policies that played the episode
            replays = [self.replay_without(team, i) for i in range(len(order) - 1)]
        stats: dict[str, dict[str, float]] = {}
        for i, name in enumerate(order):
            later = task[i + 1 :].sum(axis=0)
            replayed = replays[i] if i < len(replays) else later
            difference = task[i] + later - replayed
            episode = dataclasses.replace(team.episodes[name], scores=difference)
            means = {"difference_reward_mean": float(difference.mean())}
            if i < len(replays):  # the later agents' summed task rewards without this answer
                means["counterfactual_reward_mean"] = float(replayed.mean())
            # Over every process's conversations (as many on each).
            stats[name] = self.members[name].learn(episode) | team.data_parallel.mean(means)
        return stats

    def replay_without(self, team: TeamEpisode, position: int) -> np.ndarray:
        """``(B,)`` the later agents' summed task rewards when the chain is played again from
        ``position + 1`` with the answer at ``position`` blank (the earlier answers kept), averaged over
        ``replays``. The members act: call it inside ``team.acting()``."""
        given = {k: KEEP for k in range(position)} | {position: [BLANK] * team.env.num_conversations}
        total = np.zeros(team.env.num_conversations)
        for k in range(self.replays):  # the first with the episode's random numbers (unless turned off)
            common = self.common_random_numbers and k == 0
            total += replay(team, self.members, given, common_random_numbers=common).task_rewards()
        return total / self.replays

    def state_dict(self) -> dict[str, Any]:
        return {}  # the replays draw from the members' generators, saved with them

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass
