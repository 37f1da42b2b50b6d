"""TorchRL on the pioneer/observer game: policy and value modules for a group of ``PettingZooWrapper``.

TorchRL consumes the AEC environment through its own PettingZoo wrapper, with infos it can
turn into tensors (``numeric_infos=True``, see :mod:`cory_env.pioneer_observer`):

    >>> import cory_env
    >>> from torchrl.envs import PettingZooWrapper
    >>> from cory_env.tasks.toy import TOY_PROMPTS, fraction_good, toy_tokenizer
    >>> env = PettingZooWrapper(env=cory_env.env(
    ...     numeric_infos=True, tokenizer=toy_tokenizer(), prompts=TOY_PROMPTS, reward_fn=fraction_good,
    ...     max_new_tokens=4, context_length=32, observer_template="{query} {response} {query}"),
    ...     use_mask=True, seed=0)
    >>> env.group_map
    {'pioneer': ['pioneer'], 'observer': ['observer']}

Each agent is its own group (TorchRL's default for AEC environments); a group's entries are
``(group, "observation", key)`` for the observation keys, ``(group, "action")``,
``(group, "reward")``, ``(group, "mask")`` (``True`` at the steps where the agent acts) and
``(group, "info", key)``. The modules here read and write those entries, so they compose
with TorchRL's collectors, ``GAE`` and ``ClipPPOLoss`` (examples/train_torchrl.py):

- :func:`token_actor`: a ``ProbabilisticActor`` that samples token ids from a
  :class:`TokenLogits` network;
- :func:`token_critic`: a ``ValueOperator`` with a :class:`TokenValue` network;
- :func:`fixed_token_policy`: a group that always says the same token (the fixed other role);
- :func:`finished_episode_rewards`: the rewards of the episodes a batch of data finished;
- :func:`episode_rewards`: evaluate a policy on prompts drawn from a seed;
- :func:`transcript_history` and :func:`history_prompts`: a game in chat form as TorchRL's chat ``History``
  (each conversation as a role saw it, its answer last), and a ``History`` as prompt rows to play.

The networks embed the tokens as :class:`cory_agents.integrations.sb3.TokenEmbeddingExtractor` does (masked
mean of the context's embeddings, the newest token's, the role): tiny models trained from
scratch for small vocabularies such as :mod:`cory_env.tasks.toy`, not a way to fine-tune a
language model. In the batched form they act on each conversation's row.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModule
from torch import nn
from torchrl.envs import EnvBase
from torchrl.envs.utils import ExplorationType, set_exploration_type
from torchrl.modules import ProbabilisticActor, ValueOperator

from cory_agents.integrations.sb3 import TokenEmbeddingExtractor

OBSERVATION_KEYS = ("input_ids", "attention_mask", "role")
"""The observation entries the networks read (``(group, "observation", key)``)."""


class _TokenFeatures(nn.Module):
    """:class:`~cory_agents.integrations.sb3.TokenEmbeddingExtractor` over any leading dimensions (time, agents, conversations)."""

    def __init__(self, vocab_size: int, context_length: int, embedding_dim: int, features_dim: int):
        super().__init__()
        L = context_length
        space = spaces.Dict(
            {
                "input_ids": spaces.Box(0, vocab_size - 1, shape=(L,), dtype=int),
                "attention_mask": spaces.Box(0, 1, shape=(L,), dtype=int),
                "role": spaces.Box(0, 1, shape=(1,), dtype=int),
            }
        )
        self.extractor = TokenEmbeddingExtractor(space, embedding_dim=embedding_dim, features_dim=features_dim)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, role: torch.Tensor) -> torch.Tensor:
        rows = input_ids.shape[:-1]  # (..., agents) or (..., agents, conversations)
        role = role.squeeze(-1)  # (..., agents)
        role = role.reshape(role.shape + (1,) * (len(rows) - role.dim())).expand(rows)
        features = self.extractor(
            {
                "input_ids": input_ids.reshape(-1, input_ids.shape[-1]),
                "attention_mask": attention_mask.reshape(-1, attention_mask.shape[-1]),
                "role": role.reshape(-1, 1),
            }
        )
        return features.reshape(*rows, -1)


class TokenLogits(nn.Module):
    """Next-token logits from a pioneer/observer observation: token-embedding features, then a linear layer.

    ``forward(input_ids, attention_mask, role)`` takes the observation entries with any
    leading dimensions (``input_ids``: ``(..., L)``; ``role``: ``(..., 1)``, broadcast over
    the conversations of the batched form) and returns ``(..., vocab_size)`` logits.
    """

    def __init__(self, vocab_size: int, context_length: int, embedding_dim: int = 32, features_dim: int = 64):
        super().__init__()
        self.features = _TokenFeatures(vocab_size, context_length, embedding_dim, features_dim)
        self.head = nn.Linear(features_dim, vocab_size)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, role: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(input_ids, attention_mask, role))


class TokenValue(nn.Module):
    """The state value of a pioneer/observer observation: token-embedding features, then a linear layer.

    Same inputs as :class:`TokenLogits`; returns ``(..., 1)`` (one value per agent of the
    single form, the shape of TorchRL's group reward) or, in the batched form, one per conversation.
    """

    def __init__(self, vocab_size: int, context_length: int, embedding_dim: int = 32, features_dim: int = 64):
        super().__init__()
        self.features = _TokenFeatures(vocab_size, context_length, embedding_dim, features_dim)
        self.head = nn.Linear(features_dim, 1)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, role: torch.Tensor) -> torch.Tensor:
        values = self.head(self.features(input_ids, attention_mask, role))
        return values if input_ids.dim() == role.dim() else values.squeeze(-1)  # batched: (..., agents, B)


def _sizes(env: EnvBase, group: str) -> tuple[int, int]:
    """The vocabulary size and context length of ``group`` in a wrapped pioneer/observer environment."""
    if group not in env.group_map:
        raise KeyError(f"{group!r} is not a group of this environment; its groups are {sorted(env.group_map)}")
    observation = env.observation_spec[group, "observation"]
    missing = [k for k in OBSERVATION_KEYS if k not in observation.keys()]
    if missing:
        raise ValueError(
            f"group {group!r} has no observation entries {missing}: wrap a pioneer/observer environment, "
            f"PettingZooWrapper(env=cory_env.env(numeric_infos=True, ...), use_mask=True)"
        )
    action = env.full_action_spec[group, "action"]
    vocab_size = int(action.space.n) if hasattr(action.space, "n") else int(action.space.nvec.max())
    return vocab_size, int(observation["input_ids"].shape[-1])


def _observation_keys(group: str) -> list[tuple[str, str, str]]:
    return [(group, "observation", k) for k in OBSERVATION_KEYS]


def token_actor(env: EnvBase, group: str, embedding_dim: int = 32, features_dim: int = 64) -> ProbabilisticActor:
    """A stochastic policy for ``group``: token ids sampled from :class:`TokenLogits`.

    Writes ``(group, "logits")``, ``(group, "action")`` and its log-probability
    ``(group, "action_log_prob")`` (the ``sample_log_prob`` key of ``ClipPPOLoss``).

    Args:
        env: TorchRL's ``PettingZooWrapper`` over a pioneer/observer environment (any form).
        group: the group that acts, e.g. ``"pioneer"`` (``env.group_map`` lists them).
        embedding_dim: size of the token embeddings.
        features_dim: size of the features the output layer reads.
    """
    vocab_size, context_length = _sizes(env, group)
    logits = TensorDictModule(
        TokenLogits(vocab_size, context_length, embedding_dim, features_dim),
        in_keys=_observation_keys(group),
        out_keys=[(group, "logits")],
    )
    return ProbabilisticActor(
        logits,
        in_keys={"logits": (group, "logits")},
        out_keys=[(group, "action")],
        distribution_class=torch.distributions.Categorical,
        return_log_prob=True,
        log_prob_key=(group, "action_log_prob"),
    )


def token_critic(env: EnvBase, group: str, embedding_dim: int = 32, features_dim: int = 64) -> ValueOperator:
    """A value function for ``group`` (:class:`TokenValue`), written to ``(group, "state_value")``.

    Arguments as for :func:`token_actor`.
    """
    vocab_size, context_length = _sizes(env, group)
    return ValueOperator(
        TokenValue(vocab_size, context_length, embedding_dim, features_dim),
        in_keys=_observation_keys(group),
        out_keys=[(group, "state_value")],
    )


class _ConstantToken(nn.Module):
    def __init__(self, token_id: int):
        super().__init__()
        self.token_id = int(token_id)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return torch.full(input_ids.shape[:-1], self.token_id, dtype=torch.int64, device=input_ids.device)


def fixed_token_policy(env: EnvBase, group: str, token_id: int) -> TensorDictModule:
    """A policy for ``group`` that always says ``token_id`` (in every conversation): a fixed other role.

    TorchRL's policies write an action for every group at every step (the environment uses
    the acting agent's); compose this with a learned policy for the other group in a
    ``TensorDictSequential``.
    """
    vocab_size, _ = _sizes(env, group)
    if not 0 <= int(token_id) < vocab_size:
        raise ValueError(f"token_id {token_id} is outside the vocabulary [0, {vocab_size})")
    return TensorDictModule(
        _ConstantToken(token_id), in_keys=[(group, "observation", "input_ids")], out_keys=[(group, "action")]
    )


def finished_episode_rewards(data: TensorDictBase, group: str, key: Any = "reward") -> torch.Tensor:
    """What ``group`` received in each episode that ended in ``data`` (a rollout or a collector's batch).

    The environment pays its rewards at the end of the episode, so these are the rewards at
    the steps where ``("next", "done")`` is set, flattened. ``key="reward"`` gives TorchRL's
    reward (a mean over conversations in the batched form); ``key=("info", "reward")`` the
    per-conversation rewards, ``key=("info", "task_reward")`` the group's own task rewards
    (with ``numeric_infos=True``).
    """
    key = key if isinstance(key, tuple) else (key,)
    done = data["next", "done"].squeeze(-1)
    return data["next", group, *key][done].reshape(-1)


def episode_rewards(
    env: EnvBase, policy: Any, group: str, episodes: int = 200, seed: int = 0, key: Any = "reward"
) -> np.ndarray:
    """What ``group`` received in ``episodes`` episodes of ``policy`` on ``env``, whose prompts are drawn from ``seed``.

    The same ``seed`` gives the same prompts, so a policy before and after training is
    compared on the same queries. Tokens are sampled (``ExplorationType.RANDOM``), as in
    training. ``key`` as for :func:`finished_episode_rewards`.
    """
    game = env.unwrapped  # the pioneer/observer environment, through TorchRL's and PettingZoo's wrappers
    longest = game.max_new_tokens_range[1] * len(game.possible_agents)  # steps of the longest episode
    env.set_seed(seed)
    with torch.no_grad(), set_exploration_type(ExplorationType.RANDOM):
        rollout = env.rollout(episodes * longest, policy, break_when_any_done=False)
    return finished_episode_rewards(rollout, group, key)[:episodes].numpy().astype(np.float64)


def transcript_history(transcript: Any, role: str) -> Any:
    """The last finished episode in chat form as TorchRL's ``torchrl.data.llm.History``: each conversation as
    ``role`` saw it at its latest turn, its answer last (``last_transcript[role]["messages"]``). ``transcript`` is
    :attr:`~cory_env.PioneerObserverEnv.last_transcript` (or an environment that has it). Its batch size is
    ``(B, -1)``, conversations of different lengths allowed, as ``History.from_chats`` makes it.

        >>> import cory_env
        >>> game = cory_env.env(prompts=[[{"role": "user", "content": "Name a colour."}]], max_new_tokens=2)
        >>> game.reset(seed=0)
        >>> for agent in game.agent_iter():
        ...     game.step(None if game.last()[2] else 2)  # every answer ends at once: the end of turn
        >>> [m["role"] for m in transcript_history(game, "observer").tolist()[0]]
        ['user', 'user', 'assistant']
        >>> history_prompts(transcript_history(game, "pioneer"))[0].messages[0]["content"]
        'Name a colour.'
    """
    from torchrl.data.llm import History

    transcript = getattr(transcript, "last_transcript", transcript)
    if transcript is None or role not in transcript:
        raise ValueError(f"no finished episode of {role!r} to read: play one first (last_transcript is empty)")
    messages = transcript[role].get("messages")
    if messages is None:
        raise ValueError("the episode was not played in chat form (chat=True, or prompt rows of messages): no messages")
    chats = [messages] if messages and isinstance(messages[0], dict) else messages  # the single form: one
    return History.from_chats([[dict(m) for m in chat] for chat in chats])


def history_prompts(history: Any) -> list[Any]:
    """TorchRL's chat ``History`` (batched, ``(B, -1)``) as prompt rows of messages
    (:meth:`~cory_env.prompts.Prompt.from_messages`), to play in chat form."""
    from cory_env.prompts import Prompt

    chats = history.tolist()
    chats = [chats] if chats and isinstance(chats[0], dict) else chats
    return [Prompt.from_messages([{"role": m["role"], "content": m["content"]} for m in chat]) for chat in chats]
