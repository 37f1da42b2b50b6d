"""Role exchange: stable learners take turns at the chain's positions.

CORY swaps the pioneer and observer models every ``T_REx`` iterations so that each
learns both prompt formats and either can answer alone at test time. This wrapper
renames the agents to learners, ``llm_0``, ``llm_1``, ... (one per chain position), and
rotates them through the positions every ``period`` played episodes: in a chain of two a
swap, in a chain of ``N`` a rotation, position ``k`` played by ``llm_{(k + r) % N}`` in
the ``r``-th period (in the batched form one episode is one training iteration). An
episode counts once it is played: when its last turn ends. A ``reset`` with no episode
played since the previous one (TorchRL, Tianshou and the PettingZoo API tests reset while
they check an environment) does not move the schedule.

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
(its chain position: 0 pioneer, 1 the first observer, ...). In a team of different models
(the environment's ``heterogeneous``) each learner keeps its own model's tokens and spaces
wherever it sits: the wrapper seats its speaker there (``reset(options={"seating": ...})``).
To resume a run, set :attr:`episodes` (episodes played so far) before the next ``reset``.
"""

from __future__ import annotations

import copy
from typing import Any

from pettingzoo import AECEnv
from pettingzoo.utils.wrappers import BaseWrapper


def learner_names(n: int) -> tuple[str, ...]:
    """The learners of a chain of ``n``: ``llm_0`` ... ``llm_{n-1}``."""
    return tuple(f"llm_{i}" for i in range(n))


#: The learners of a chain of two (``learner_names(n)`` for any length).
LEARNER_NAMES = learner_names(2)


class RoleExchangeWrapper(BaseWrapper):
    """Present the chain's positions as learners that rotate through them every ``period`` episodes.

    Args:
        env: the chain environment (possibly already wrapped), of two or more agents.
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
        if len(roles) < 2:
            raise ValueError(f"role exchange needs two or more roles, the environment has {roles}")
        self._roles = roles
        self.period = period
        self.possible_agents = list(learner_names(len(roles)))
        #: Episodes played so far (their last turn ended); the roles of the episode started by
        #: the next reset follow from it.
        self.episodes = 0
        self._counted = True  # no episode under way: nothing to count until a reset starts one
        self._to_role = dict(zip(self.possible_agents, roles))
        self._to_learner = dict(zip(roles, self.possible_agents))
        base = self.env.unwrapped
        # A team of different models: learner i speaks agent i's tokens wherever it sits, so the
        # environment seats its speaker at its position. Otherwise every role has the same spaces.
        self._seat_speakers = bool(getattr(base, "heterogeneous", False))
        if self._seat_speakers:
            spaces = list(base.agent_spaces)
        else:
            for space in (env.observation_space, env.action_space):
                if any(space(r) != space(roles[0]) for r in roles[1:]):
                    raise ValueError("role exchange needs every role to have the same observation and action spaces")
            spaces = [(env.observation_space(roles[0]), env.action_space(roles[0]))] * len(roles)
        self._observation_spaces = {a: copy.deepcopy(s[0]) for a, s in zip(self.possible_agents, spaces)}
        self._action_spaces = {a: copy.deepcopy(s[1]) for a, s in zip(self.possible_agents, spaces)}

    def rotation(self, episode: int) -> int:
        """How many places the learners have moved along the chain in (0-based) ``episode``."""
        return 0 if self.period is None else (episode // self.period) % len(self._roles)

    def seating(self, episode: int) -> list[int]:
        """The learner (its index) at each chain position in (0-based) ``episode``."""
        n, r = len(self._roles), self.rotation(episode)
        return [(k + r) % n for k in range(n)]

    def exchanged(self, episode: int) -> bool:
        """Whether ``llm_0`` plays another role than the pioneer in (0-based) ``episode``."""
        return self.rotation(episode) != 0

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> None:
        if options and "answers" in options:  # its rewards or seating would not fit a replay
            raise ValueError(
                "a replay (reset(options={'answers': ...})) is the raw environment's: call it on a copy of "
                "env.unwrapped (copy.copy(env.unwrapped)), which also keeps the played episode"
            )
        seating = self.seating(self.episodes)
        self._to_role = {self.possible_agents[i]: role for i, role in zip(seating, self._roles)}
        self._to_learner = {r: learner for learner, r in self._to_role.items()}
        self._counted = False
        if self._seat_speakers:
            options = {**(options or {}), "seating": seating}
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
