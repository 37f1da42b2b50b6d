"""Role exchange: two stable learners take turns at being the pioneer.

CORY swaps the pioneer and observer models every ``T_REx`` iterations so that each
learns both prompt formats and either can answer alone at test time. This wrapper
renames the agents to two learners, ``llm_0`` and ``llm_1``, and swaps which one plays
the pioneer every ``period`` played episodes (in the batched form one episode is one
training iteration). An episode counts once it is played: when its last turn ends. A
``reset`` with no episode played since the previous one (TorchRL, Tianshou and the
PettingZoo API tests reset while they check an environment) does not move the schedule.

Example:
    >>> from cory_env import env, RoleExchangeWrapper
    >>> e = RoleExchangeWrapper(env(prompts=["Hi"], max_new_tokens=2), period=2)
    >>> for episode in range(4):
    ...     e.reset()
    ...     print(e.roles)
    ...     for learner in e.agent_iter():  # play the episode
    ...         obs, reward, term, trunc, info = e.last()
    ...         e.step(None if term or trunc else e.action_space(learner).sample())
    {'llm_0': 'pioneer', 'llm_1': 'observer'}
    {'llm_0': 'pioneer', 'llm_1': 'observer'}
    {'llm_1': 'pioneer', 'llm_0': 'observer'}
    {'llm_1': 'pioneer', 'llm_0': 'observer'}

A learner's current role is ``infos[learner]["role"]`` and ``observation["role"]``
(0 pioneer, 1 observer). To resume a run, set :attr:`episodes` (episodes played so far)
before the next ``reset``.
"""

from __future__ import annotations

import copy
from typing import Any

from pettingzoo import AECEnv
from pettingzoo.utils.wrappers import BaseWrapper

LEARNERS = ("llm_0", "llm_1")


class RoleExchangeWrapper(BaseWrapper):
    """Present the two roles as two learners whose roles swap every ``period`` episodes.

    Args:
        env: the pioneer/observer environment (possibly already wrapped).
        period: episodes between exchanges (the paper: 5 iterations); ``None`` never
            exchanges (the paper's "no role exchange" ablation, with the same names).

    The dictionaries ``rewards``, ``terminations``, ``truncations``, ``infos`` are
    read-only views keyed by learner, rebuilt from the wrapped environment on access.
    """

    def __init__(self, env: AECEnv, period: int | None = 5):
        super().__init__(env)
        if period is not None and (isinstance(period, bool) or not isinstance(period, int) or period < 1):
            raise ValueError(f"period must be a positive number of episodes or None, got {period!r}")
        roles = list(self.env.possible_agents)
        if len(roles) != 2:
            raise ValueError(f"role exchange needs exactly two roles, the environment has {roles}")
        self._roles = roles
        self.period = period
        self.possible_agents = list(LEARNERS)
        #: Episodes played so far (their last turn ended); the roles of the episode started by
        #: the next reset follow from it.
        self.episodes = 0
        self._counted = True  # no episode under way: nothing to count until a reset starts one
        self._to_role = dict(zip(LEARNERS, roles))
        self._to_learner = dict(zip(roles, LEARNERS))
        # A learner keeps its spaces whatever its role, so both roles must share them.
        for space in (env.observation_space, env.action_space):
            if space(roles[0]) != space(roles[1]):
                raise ValueError("role exchange needs both roles to have the same observation and action spaces")
        self._observation_spaces = {a: copy.deepcopy(env.observation_space(roles[0])) for a in LEARNERS}
        self._action_spaces = {a: copy.deepcopy(env.action_space(roles[0])) for a in LEARNERS}

    def exchanged(self, episode: int) -> bool:
        """Whether ``llm_0`` plays the second role in (0-based) ``episode``."""
        return self.period is not None and (episode // self.period) % 2 == 1

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> None:
        first, second = LEARNERS[::-1] if self.exchanged(self.episodes) else LEARNERS
        self._to_role = {first: self._roles[0], second: self._roles[1]}
        self._to_learner = {r: learner for learner, r in self._to_role.items()}
        self._counted = False
        self.env.reset(seed=seed, options=options)

    def step(self, action: Any) -> None:
        self.env.step(action)
        if not self._counted and self._played():
            self._counted = True
            self.episodes += 1

    def _played(self) -> bool:
        """Whether every role's last turn has ended (the dead steps may still follow)."""
        ended = self.env.terminations, self.env.truncations
        return all(any(d.get(role, False) for d in ended) for role in self._roles)

    @property
    def roles(self) -> dict[str, str]:
        """The current role of each learner, e.g. ``{"llm_0": "pioneer", "llm_1": "observer"}``."""
        return dict(self._to_role)

    # Views keyed by learner --------------------------------------------------
    def _by_learner(self, d: dict[str, Any]) -> dict[str, Any]:
        return {self._to_learner[r]: v for r, v in d.items()}

    @property
    def agents(self) -> list[str]:
        return [self._to_learner[r] for r in self.env.agents]

    @property
    def agent_selection(self) -> str:
        return self._to_learner[self.env.agent_selection]

    @property
    def rewards(self) -> dict[str, float]:
        return self._by_learner(self.env.rewards)

    @property
    def _cumulative_rewards(self) -> dict[str, float]:
        return self._by_learner(self.env._cumulative_rewards)

    @property
    def terminations(self) -> dict[str, bool]:
        return self._by_learner(self.env.terminations)

    @property
    def truncations(self) -> dict[str, bool]:
        return self._by_learner(self.env.truncations)

    @property
    def infos(self) -> dict[str, dict[str, Any]]:
        return self._by_learner(self.env.infos)

    def observe(self, agent: str) -> Any:
        return self.env.observe(self._to_role[agent])

    def observation_space(self, agent: str) -> Any:
        return self._observation_spaces[agent]

    def action_space(self, agent: str) -> Any:
        return self._action_spaces[agent]

    def __str__(self) -> str:
        return str(self.env)
