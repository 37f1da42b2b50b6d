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

**Over several rounds** (``--rounds R``) agent ``i`` says nothing at every one of its turns in the
counterfactual, and the chain is played again from its first turn::

    D^i_b = sum_r r^{i,r}_b + sum_{(j, r) after i's first turn, j != i} (r^{j,r}_b - r'^{j,r}_b)

(the turns before its first are kept, and cancel); ``D^i`` is the agent's reward at its last turn, 0
at the others (its KL penalty stays at every token). With one round this is the formula above.

Each member then learns from its episode with ``D^i`` as the reward (any per-agent learner:
PPO by default, the KL penalty its own). The cost is the counterfactual rollout: in a chain of
``N`` agents, agent ``i``'s replay plays the ``N - 1 - i`` agents after it, ``N (N - 1) / 2``
turns an iteration beside the ``N`` of the episode (one more turn, for two agents: half the
episode again, plus a reward call); over ``R`` rounds each agent's replay plays the others' turns after
its first again, ``R`` turns for the first of two agents and ``R - 1`` for the second (its own blank turns
are fed, not generated). The environment replays an episode with given answers
through ``reset(options={"answers": ...})`` on a copy of itself.

Beside a centralised critic (:mod:`cory_agents.learners.mappo`): in this chain every agent sees the
whole transcript up to its turn, so a critic adds what the agent cannot see (private fields); what
independent PPO on the collective reward lacks even then is credit, which the counterfactual gives.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import numpy as np

from cory_agents.learners.base import Episode, Learner
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
        order = team.order  # chain positions this iteration
        rounds = getattr(team.env, "rounds", 1)
        turn_rewards = {name: _turn_task_rewards(team.episodes[name]) for name in order}  # each (rounds, B)
        with team.acting():  # every replay first, by the policies that played the episode
            replays = {i: self.replay_without(team, i) for i in range(len(order)) if i < len(order) - 1 or rounds > 1}
        stats: dict[str, dict[str, float]] = {}
        for i, name in enumerate(order):
            later = _later_rewards(turn_rewards, order, i)  # the others' task rewards in the turns after i's first
            replayed = replays.get(i, later)
            difference = turn_rewards[name].sum(axis=0) + later - replayed
            episode = team.episodes[name]
            scores = np.zeros((episode.turns, len(difference)))
            scores[-1] = difference  # over several rounds, at the agent's last turn
            episode = dataclasses.replace(episode, scores=scores.reshape(-1))
            means = {"difference_reward_mean": float(difference.mean())}
            if i in replays:  # the later turns' summed task rewards without this agent's answers
                means["counterfactual_reward_mean"] = float(replayed.mean())
            # Over every process's conversations (as many on each).
            stats[name] = self.members[name].learn(episode) | team.data_parallel.mean(means)
        return stats

    def replay_without(self, team: TeamEpisode, position: int) -> np.ndarray:
        """``(B,)`` the other agents' summed task rewards in the turns after ``position``'s first, when the
        chain is played again from there with every answer of ``position`` blank (the earlier turns kept),
        averaged over ``replays``. The members act: call it inside ``team.acting()``."""
        env, N = team.env, len(team.env.possible_agents)
        blank = [BLANK] * env.num_conversations
        given = {k: KEEP for k in range(position)} | {r * N + position: blank for r in range(env.rounds)}
        silent = team.order[position]
        total = np.zeros(env.num_conversations)
        for k in range(self.replays):  # the first with the episode's random numbers (unless turned off)
            out = replay(team, self.members, given, common_random_numbers=self.common_random_numbers and k == 0)
            total += out.task_rewards([n for n in out.episodes if n != silent])
        return total / self.replays

    def state_dict(self) -> dict[str, Any]:
        return {}  # the replays draw from the members' generators, saved with them

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


def _turn_task_rewards(episode: Episode) -> np.ndarray:
    """``(turns, B)`` the agent's task reward of each of its turns."""
    return np.atleast_2d(episode.extra.get("turn_task_rewards", episode.task_rewards))


def _later_rewards(turn_rewards: dict[str, np.ndarray], order: list[str], position: int) -> np.ndarray:
    """``(B,)`` the other agents' task rewards summed over the turns played after ``position``'s first turn (the
    later agents' in one round)."""
    N = len(order)
    later = np.zeros(turn_rewards[order[0]].shape[1])
    for j, name in enumerate(order):
        for r, rewards in enumerate(turn_rewards[name]):
            if j != position and r * N + j > position:
                later = later + rewards
    return later
