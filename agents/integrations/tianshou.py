"""Tianshou on the pioneer/observer game: the action mask its multi-agent stack needs in the batched form.

Tianshou consumes a PettingZoo AEC environment through ``tianshou.env.PettingZooEnv``. That
class gives each observation the action mask Tianshou's multi-agent policies read (its
random policy samples among the allowed actions; ``MultiAgentOffPolicyAlgorithm`` dispatches
on it) only when the action space is ``Discrete`` or the observation is PettingZoo's
``{"observation": ..., "action_mask": ...}`` layout. The single form (``Discrete``) works as
it is; the batched form's ``MultiDiscrete`` action (one token per conversation) gets no mask,
and collection then fails inside Tianshou (``AttributeError: ... 'obs_next'``).
:class:`ActionMaskWrapper` gives the environment that layout, with an all-ones mask (every
token id is a valid action: a conversation whose turn is over ignores its tokens), so both
forms collect.

Example:
    >>> import cory_env
    >>> from tianshou.env import DummyVectorEnv, PettingZooEnv
    >>> from cory_env.tasks.toy import TOY_PROMPTS, fraction_good, toy_tokenizer
    >>> def make():
    ...     return PettingZooEnv(ActionMaskWrapper(cory_env.env(
    ...         num_conversations=4, tokenizer=toy_tokenizer(), prompts=TOY_PROMPTS,
    ...         reward_fn=fraction_good, max_new_tokens=4, context_length=32)))
    >>> venv = DummyVectorEnv([make, make])
    >>> len(venv)
    2

The mask has one entry per token id (and conversation) and Tianshou stores it with every
transition, as a ``(vocab_size,)`` or ``(B, vocab_size)`` array: cheap for small
vocabularies such as :mod:`cory_env.tasks.toy`, large for a language model's.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces
from pettingzoo import AECEnv
from pettingzoo.utils.wrappers import BaseWrapper


class ActionMaskWrapper(BaseWrapper):
    """Observations in PettingZoo's action-mask layout: ``{"observation": obs, "action_mask": mask}``.

    Args:
        env: a pioneer/observer AEC environment, single or batched form, possibly wrapped
            (:class:`~cory_env.CollectiveRewardWrapper`, :class:`~cory_env.RoleExchangeWrapper`).

    ``observation`` is the wrapped environment's observation, unchanged; ``action_mask`` is
    all ones, in Gymnasium's layout for ``action_space.sample(mask=...)``: an ``int8`` array
    of shape ``(vocab_size,)`` in the single form, a tuple of ``B`` of them (one per
    conversation) in the batched form; read-only, the same objects every step. Actions,
    rewards and infos pass through unchanged.
    """

    def __init__(self, env: AECEnv):
        super().__init__(env)
        self._observation_spaces: dict[str, spaces.Dict] = {}
        self._masks: dict[str, np.ndarray] = {}
        for agent in self.env.possible_agents:
            action_space = self.env.action_space(agent)
            if isinstance(action_space, spaces.Discrete):
                sizes = [int(action_space.n)]
            elif isinstance(action_space, spaces.MultiDiscrete) and action_space.nvec.ndim == 1:
                sizes = [int(n) for n in action_space.nvec]
            else:
                raise TypeError(
                    f"ActionMaskWrapper needs a Discrete or one-dimensional MultiDiscrete action space "
                    f"(the pioneer/observer game's single or batched form); {agent!r} has {action_space}"
                )
            rows = [_ones(n) for n in sizes]
            boxes = [spaces.Box(0, 1, shape=(n,), dtype=np.int8) for n in sizes]
            if isinstance(action_space, spaces.Discrete):
                self._masks[agent], mask_space = rows[0], boxes[0]
            else:  # Gymnasium's mask for MultiDiscrete: a tuple with one mask per dimension
                self._masks[agent], mask_space = tuple(rows), spaces.Tuple(boxes)
            self._observation_spaces[agent] = spaces.Dict(
                {"observation": self.env.observation_space(agent), "action_mask": mask_space}
            )

    def observation_space(self, agent: str) -> spaces.Dict:
        return self._observation_spaces[agent]

    def observe(self, agent: str) -> dict[str, Any]:
        return {"observation": self.env.observe(agent), "action_mask": self._masks[agent]}

    def __str__(self) -> str:
        return str(self.env)


def _ones(n: int) -> np.ndarray:
    mask = np.ones(n, dtype=np.int8)
    mask.flags.writeable = False
    return mask
