"""A single-agent Gymnasium view of one role: train it while a fixed policy plays the other.

Single-agent libraries (Stable-Baselines3, CleanRL, RLlib's single-agent API...) see
the pioneer/observer game as an ordinary :class:`gymnasium.Env`: one ``step`` is one
token of the trained role's response; the other role's turn is played inside
``reset``/``step`` by ``other_policy``.

| Role         | `other_policy`                 | What the learner sees                                          |
|--------------|--------------------------------|----------------------------------------------------------------|
| `"pioneer"`  | `None`                         | the pioneer alone (`with_observer=False`): the paper's PPO baseline |
| `"pioneer"`  | plays the observer             | the pioneer; the observer answers after it, before the reward  |
| `"observer"` | plays the pioneer (required)   | the observer, prompted with the fixed pioneer's answer         |
| any agent of a chain (`num_agents=N`) | plays the others: one callable, or `{agent: callable}` | that position; the earlier agents answer before its turn, the later ones after it |

* Observation: the role's AEC observation, a ``Dict`` of ``input_ids``,
  ``attention_mask``, ``past_length``, ``num_new_tokens``, ``role`` (see
  :mod:`cory_env.pioneer_observer`). Action: ``Discrete(vocab_size)``, one token id.
* Reward: 0 until the role's response ends, then its task reward, or with
  ``collective_reward=True`` the sum of every agent's task reward (CORY's reward).
* ``terminated`` is ``True`` at the end of the role's response (a stop token or
  ``max_new_tokens``); ``truncated`` is always ``False``. The final ``info`` has
  ``query``, ``context``, ``response``, ``response_length``, ``task_reward`` and
  ``reward``, and ``other_response``/``other_task_reward`` when another role played (in a chain
  of more than two, ``other_responses``/``other_task_rewards``: one per other agent, by name).
* Only the single form: for many conversations use a vector environment
  (``gymnasium.make_vec`` or SB3's ``make_vec_env``).

``other_policy(observation) -> token id`` receives the other role's AEC observation (a mapping
``{agent: policy}`` gives each other agent of a chain its own).
Resets are reproducible under ``reset(seed=...)`` when ``other_policy`` is
deterministic (or seeded by you).

Registered as ``"cory/PioneerObserverRole-v0"``:

    >>> import gymnasium, cory_env
    >>> from cory_env.tasks.toy import TOY_PROMPTS, fraction_good, toy_tokenizer
    >>> e = gymnasium.make("cory/PioneerObserverRole-v0", role="pioneer", tokenizer=toy_tokenizer(),
    ...                    prompts=TOY_PROMPTS, reward_fn=fraction_good, max_new_tokens=4, context_length=32)
    >>> obs, info = e.reset(seed=0)
    >>> e.action_space
    Discrete(18)
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

import gymnasium
import numpy as np
from pettingzoo import AECEnv

from cory_env.pioneer_observer import OBSERVER, PIONEER, ROLES, PioneerObserverEnv, chain_roles
from cory_env.pioneer_observer import env as make_aec_env
from cory_env.wrappers import CollectiveRewardWrapper

ROLE_ENV_ID = "cory/PioneerObserverRole-v0"

Policy = Callable[[dict[str, np.ndarray]], Any]


def _needs_policy(role: str) -> str:
    if role == OBSERVER:
        return (
            "role='observer' needs other_policy, a callable(observation) -> token id that plays the pioneer "
            "(the observer answers after the pioneer's response)"
        )
    return (
        f"role={role!r} needs other_policy, a callable(observation) -> token id that plays the chain's other "
        f"agents (or a mapping {{agent: policy}} with one for each)"
    )


class RoleEnv(gymnasium.Env):
    """One role of the pioneer/observer game as a single-agent Gymnasium environment.

    Args:
        role: the trained role, ``"pioneer"`` or ``"observer"``; in a chain of ``num_agents=N``
            (or an ``env`` of N agents) any of its agents, e.g. ``"observer_1"``.
        other_policy: ``callable(observation) -> token id`` that plays the other role (in a
            chain: every other agent, or a mapping ``{agent: callable}`` with one for each);
            required for ``"observer"``; ``None`` for ``"pioneer"`` trains it alone.
        env: an AEC pioneer/observer environment (single form, possibly wrapped, e.g. in
            :class:`~cory_env.CollectiveRewardWrapper`) instead of ``env_kwargs``.
        collective_reward: reward the sum of every agent's task reward instead of the role's own.
        render_mode: ``"human"`` or ``"ansi"`` (passed to the AEC environment).
        **env_kwargs: arguments of :class:`~cory_env.PioneerObserverEnv` (tokenizer,
            prompts, reward_fn, max_new_tokens, context_length, num_agents, ...). Without
            ``num_agents`` the chain follows from ``role`` and ``other_policy``: the pioneer alone
            (``other_policy=None``) or a chain of two; ``with_observer`` is not taken.
    """

    metadata = {"render_modes": ["human", "ansi"], "render_fps": 1}  # text, printed once per episode

    def __init__(
        self,
        role: str = PIONEER,
        other_policy: Policy | None = None,
        *,
        env: AECEnv | None = None,
        collective_reward: bool = False,
        render_mode: str | None = None,
        **env_kwargs: Any,
    ):
        if env is None:
            given = env_kwargs.get("num_agents") is not None
            if not given:  # the pioneer alone, or a chain of two
                env_kwargs["num_agents"] = 1 if role == PIONEER and other_policy is None else 2
            roles = chain_roles(env_kwargs["num_agents"])
            if role not in roles:
                longer = not given and isinstance(role, str) and role.startswith(f"{OBSERVER}_")
                hint = " (a position of a longer chain: give num_agents=N)" if longer else ""
                raise ValueError(f"role must be one of {list(roles if given else ROLES)}, got {role!r}{hint}")
        for name, policy in other_policy.items() if isinstance(other_policy, Mapping) else [("", other_policy)]:
            if policy is not None and not callable(policy):
                hint = (
                    "; for a Stable-Baselines3 model pass `lambda obs: model.predict(obs, deterministic=True)[0]`"
                    if hasattr(policy, "predict")
                    else ""
                )
                what = f"other_policy[{name!r}]" if name else "other_policy"
                raise TypeError(f"{what} must be a callable(observation) -> token id, got {policy!r:.80}{hint}")
        if env is None and role != PIONEER and other_policy is None:
            raise ValueError(_needs_policy(role))
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(
                f"render_mode must be one of {self.metadata['render_modes']} or None, got {render_mode!r} "
                f"(Stable-Baselines3's make_vec_env asks for 'rgb_array' unless env_kwargs has render_mode=None)"
            )
        if env is None:
            if "with_observer" in env_kwargs:
                raise TypeError(
                    "RoleEnv sets with_observer itself: role='pioneer' with other_policy=None trains the pioneer "
                    "alone, with an other_policy the observer plays after it"
                )
            env = make_aec_env(render_mode=render_mode, **env_kwargs)
        else:
            if env_kwargs:
                raise TypeError(
                    f"pass either an AEC environment (env=...) or its arguments, not both; "
                    f"got env and {sorted(env_kwargs)}"
                )
            if not isinstance(env.unwrapped, PioneerObserverEnv):
                raise TypeError(f"env must be a (wrapped) PioneerObserverEnv, got {type(env.unwrapped).__name__}")
            if render_mode is not None and render_mode != env.unwrapped.render_mode:
                raise ValueError(
                    f"render_mode={render_mode!r} differs from the environment's {env.unwrapped.render_mode!r}; "
                    f"set it when creating the AEC environment"
                )
            if list(env.possible_agents) != list(env.unwrapped.possible_agents):
                raise ValueError(
                    f"the environment's agents are {env.possible_agents}, not its chain's {env.unwrapped.possible_agents}: "
                    f"RoleEnv trains one fixed position, so do not wrap the environment in RoleExchangeWrapper"
                )
            if role not in env.possible_agents:
                raise ValueError(
                    f"role must be one of the environment's agents {list(env.possible_agents)}, got {role!r}"
                )
        base = env.unwrapped
        if base.rounds > 1 or base.turn_rewards:  # one turn a role, its reward at the episode's end
            raise ValueError(
                "RoleEnv plays one turn of its role and reads its reward at the episode's end: rounds > 1 and "
                "turn_rewards need the AEC environment (cory_env.env) and a learner of several turns"
            )
        if base.batched:
            raise ValueError(
                f"RoleEnv is the single form (num_conversations=None), got num_conversations={base.num_conversations}; "
                f"for many conversations use a vector environment: gymnasium.make_vec(...) or SB3's make_vec_env(...)"
            )
        others = tuple(a for a in env.possible_agents if a != role)
        if others and other_policy is None:
            if role != env.possible_agents[0]:
                raise ValueError(_needs_policy(role))
            raise ValueError(
                f"the environment has {' and '.join(others)} besides the {role}, so other_policy must play "
                f"{'it' if len(others) == 1 else 'them'}; or pass an environment with with_observer=False "
                f"to train the pioneer alone"
            )
        if not others and other_policy is not None:
            raise ValueError(
                "other_policy was given but the environment has no observer (a chain of one): the pioneer plays alone"
            )
        if isinstance(other_policy, Mapping) and set(other_policy) != set(others):
            raise ValueError(
                f"other_policy must map each other agent to its policy: {list(others)}, got {list(other_policy)}"
            )
        if collective_reward:
            env = CollectiveRewardWrapper(env)

        #: The trained agent, and the agents that ``other_policy`` plays, in chain order.
        self.role, self.others = role, others
        #: The other agent of a chain of two (``None`` alone or in a longer chain).
        self.other = others[0] if len(others) == 1 else None
        self.other_policy = other_policy if others else None
        self.aec = env
        self.render_mode = base.render_mode
        # Copies: seeding these spaces must not change the AEC environment's ones.
        self.observation_space = copy.deepcopy(env.observation_space(role))
        self.action_space = copy.deepcopy(env.action_space(role))
        self._done = True

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        if options and "seating" in options:  # it would give the role another model's spaces
            raise ValueError("RoleEnv trains one fixed position with its own spaces: reset takes no 'seating' option")
        super().reset(seed=seed)
        self.aec.reset(seed=seed, options=options)
        self._done = False
        self._play_other()  # the pioneer's turn, when the observer is trained
        return self._observe(), self._info()

    def step(self, action: Any):
        if self._done:
            raise RuntimeError("the episode is over (or not started): call reset() before step()")
        self.aec.step(action)
        base = self.aec.unwrapped
        terminated = self.role in base.responses  # the role's response has ended
        reward = 0.0
        if terminated:
            self._play_other()  # the observer's turn, when the pioneer is trained
            if not base.episode_over:
                raise RuntimeError(f"the episode did not end after the {self.role}'s turn and other_policy's")
            reward = float(self.aec.rewards[self.role])
            self._done = True
        return self._observe(), reward, terminated, False, self._info()

    def _play_other(self) -> None:
        """Let other_policy act until it is the trained role's turn or the episode is over."""
        base = self.aec.unwrapped
        while not base.episode_over and self.aec.agent_selection != self.role:
            agent = self.aec.agent_selection
            policy = self.other_policy[agent] if isinstance(self.other_policy, Mapping) else self.other_policy
            self.aec.step(policy(self.aec.observe(agent)))

    def _observe(self) -> dict[str, np.ndarray]:
        # Gymnasium's users keep what they are given: copies, not the AEC environment's
        # zero-copy views into its buffers (which the next turn or reset replaces).
        return {k: np.array(v) for k, v in self.aec.observe(self.role).items()}

    def _info(self) -> dict[str, Any]:
        info = dict(self.aec.infos[self.role])
        answered = [a for a in self.others if "response" in self.aec.infos[a]]
        if self.other is not None and answered:
            info["other_response"] = self.aec.infos[self.other]["response"]
            info["other_task_reward"] = self.aec.infos[self.other]["task_reward"]
        elif self.other is None and answered:  # a longer chain
            info["other_responses"] = {a: self.aec.infos[a]["response"] for a in answered}
            info["other_task_rewards"] = {a: self.aec.infos[a]["task_reward"] for a in answered}
        return info

    def render(self) -> str | None:
        return self.aec.render()

    def close(self) -> None:
        self.aec.close()
