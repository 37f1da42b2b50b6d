"""MAGRPO, multi-agent GRPO (CoMLRL): a group of G joint episodes per prompt, the collective reward
normalised within the group, and the same advantage for every agent of a joint episode.

Each agent is a GRPO member (cory_agents.learners.grpo): the team hands it the shared advantage, which it
uses as it is, and the member adds its own KL term (``--kl-coef``, in its loss). With one round this is
``--algo cory --learner grpo`` (each GRPO learner normalises the collective reward within the group itself);
over several rounds (``--rounds R``) the shared advantage is every turn's, where ``grpo`` alone cannot play.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch

from cory_agents.algorithms.advantages import group_advantages
from cory_agents.learners.grpo import GRPOConfig
from cory_agents.learners.lm import flag
from cory_agents.learners.team import TeamEpisode
from cory_agents.training.capabilities import Capabilities
from cory_agents.training.registry import LearnerSpec, TeamFactory


@dataclass(kw_only=True)
class MAGRPOConfig(GRPOConfig):
    """GRPO's settings (``--group-size``, ``--kl-coef``, ...) and MAGRPO's own."""

    _argument_group_name: ClassVar[str] = "Learner magrpo: one group-normalised collective advantage for the team"

    magrpo_baseline: str = flag(
        "grpo",
        "how the collective reward is normalised within a group: grpo (minus the group mean, over the group std) "
        "or rloo (minus the mean of the other joint episodes)",
        choices=["grpo", "rloo"],
    )


class MAGRPOTeam:
    """Members are GRPO learners; ``learn`` gives each the same advantage per joint episode."""

    def __init__(self, members: dict[str, Any], config: MAGRPOConfig):
        self.members, self.config = members, config

    def learn(self, team: TeamEpisode) -> dict[str, dict[str, float]]:
        c = self.config
        collective = torch.tensor(team.collective_rewards, dtype=torch.float32)  # (B,), turns summed
        shared = group_advantages(collective, c.group_size, c.magrpo_baseline, c.std_eps).numpy()
        stats = {}
        for name in team.order:
            episode = team.episodes[name]
            stats[name] = self.members[name].learn(episode, advantages=np.tile(shared, episode.turns))
        stats["team"] = {"shared_advantage_abs_mean": float(np.abs(shared).mean())}
        return stats

    def state_dict(self) -> dict[str, Any]:
        return {}  # nothing beyond the members' own

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


def build_team(config: Any, members: dict[str, Any], *, seed: int) -> MAGRPOTeam:
    return MAGRPOTeam(members, config.learner_config())


#: What the entry point names: the team over GRPO members, its settings and what it supports.
MAGRPO = LearnerSpec(
    TeamFactory("grpo", build_team),
    MAGRPOConfig,
    Capabilities.all(turn_rewards=False),
)
