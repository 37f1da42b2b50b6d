"""The chain through PettingZoo's parallel API: its turn-based conversion, with a numeric
``active_agent`` for tensor-based clients and the AEC environment's attributes (``last_transcript``)."""

from __future__ import annotations

from typing import Any

import numpy as np
from pettingzoo import AECEnv, ParallelEnv
from pettingzoo.utils import conversions


def to_parallel(aec_env: AECEnv) -> ParallelEnv:
    """A (possibly wrapped) AEC pioneer/observer environment through PettingZoo's parallel API.

    PettingZoo's ``turn_based_aec_to_parallel(aec_env)``, with two additions:

    - Public attributes the parallel view lacks are read from the AEC environment, as
      PettingZoo's AEC wrappers forward them: ``par.last_transcript`` is the texts of the last
      finished episode (:attr:`~cory_env.PioneerObserverEnv.last_transcript`), through
      :class:`~cory_env.CollectiveRewardWrapper` and :class:`~cory_env.RoleExchangeWrapper` too
      (``par.roles`` is the latter's). Reading only: setting an attribute sets it on the parallel
      view. PettingZoo's own conversion forwards nothing; ``par.unwrapped.last_transcript``
      works on both.
    - If the environment was made with ``numeric_infos=True``, ``infos[agent]["active_agent"]``
      is numeric and there from ``reset`` on, as tensor-based clients need (PettingZoo's
      conversion adds the acting agent's name, and only after the first step): the index in
      ``possible_agents`` of the agent that acts next, ``-1`` after the episode's last step, in
      copies of the AEC environment's infos (which get PettingZoo's agent name, as without
      ``numeric_infos``).
    """
    return _TurnBasedParallel(aec_env)


class _TurnBasedParallel(conversions.turn_based_aec_to_parallel_wrapper):
    """``turn_based_aec_to_parallel_wrapper`` with a numeric ``active_agent`` under ``numeric_infos``,
    forwarding public attributes to the AEC environment."""

    def __getattr__(self, name: str) -> Any:
        # Only for names not found on the wrapper. Private names, and any name before ``aec_env`` is
        # set (copy and pickle build the object without __init__), are missing as usual: no recursion.
        if name.startswith("_") or "aec_env" not in self.__dict__:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        return getattr(self.aec_env, name)

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        observations, infos = super().reset(seed=seed, options=options)
        return observations, self._numeric_active_agent(infos)

    def step(self, actions: dict) -> tuple:
        out = super().step(actions)
        if len(out) != 5:  # stepped after the episode: PettingZoo's ({}, {}, {}, {})
            return out
        observations, rewards, terminations, truncations, infos = out
        return observations, rewards, terminations, truncations, self._numeric_active_agent(infos)

    def _numeric_active_agent(self, infos: dict[str, Any]) -> dict[str, Any]:
        if not getattr(self.aec_env.unwrapped, "numeric_infos", False):
            return infos
        acting = self.aec_env.agent_selection if self.aec_env.agents else None
        index = np.int64(self.possible_agents.index(acting) if acting is not None else -1)
        return {agent: {**info, "active_agent": index} for agent, info in infos.items()}
