"""Stable-Baselines3 on the pioneer/observer game: a token-embedding features extractor.

SB3's PPO trains one role through the single-agent view :class:`cory_env.RoleEnv`
(``gymnasium.make("cory/PioneerObserverRole-v0", ...)``). Its observation is a
``Dict`` of token ids and masks, which SB3's default ``CombinedExtractor`` would
flatten as raw numbers; :class:`TokenEmbeddingExtractor` embeds the tokens instead.
The policy is SB3's own ``MultiInputPolicy``, so this is PPO as SB3 ships it, with a
tiny learned "language model" instead of a pretrained one: it suits small vocabularies
(such as :mod:`cory_env.tasks.toy`), not fine-tuning an LLM.

Example:
    >>> from stable_baselines3 import PPO
    >>> from stable_baselines3.common.env_util import make_vec_env
    >>> from cory_env.tasks.toy import TOY_PROMPTS, fraction_good, toy_tokenizer
    >>> venv = make_vec_env("cory/PioneerObserverRole-v0", n_envs=4, seed=0, env_kwargs=dict(
    ...     role="pioneer", tokenizer=toy_tokenizer(), prompts=TOY_PROMPTS, reward_fn=fraction_good,
    ...     max_new_tokens=4, context_length=32, render_mode=None))
    >>> model = PPO("MultiInputPolicy", venv, policy_kwargs=token_policy_kwargs())
    >>> model.learn(4096)  # doctest: +SKIP
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from stable_baselines3.common.vec_env import VecEnv
from torch import nn

from cory_agents.training.metrics import MetricsLogger


class TokenEmbeddingExtractor(BaseFeaturesExtractor):
    """Features of a pioneer/observer observation: embedded context tokens, pooled.

    The features are ``ReLU(W [mean_pool ; last ; role] + b)``: the mean of the token
    embeddings over ``attention_mask`` (what the context says), the embedding of the
    newest token (the last column, where the observation puts it), and the role
    (the chain position: 0 pioneer, 1 observer, ...). Order beyond the newest token is ignored: enough for
    tasks that reward what is said, not long-range structure.

    Args:
        observation_space: the ``Dict`` observation space of one role (single form:
            ``input_ids`` of shape ``(L,)``); the vocabulary size is read from it.
        embedding_dim: size of the token embeddings.
        features_dim: size of the output features (the input of SB3's policy and value heads).
    """

    def __init__(self, observation_space: spaces.Dict, embedding_dim: int = 32, features_dim: int = 64):
        ids = observation_space.spaces.get("input_ids") if isinstance(observation_space, spaces.Dict) else None
        if not isinstance(ids, spaces.Box) or len(ids.shape) != 1 or "attention_mask" not in observation_space.spaces:
            raise ValueError(
                "TokenEmbeddingExtractor needs the single-form pioneer/observer observation: a Dict with "
                f"'input_ids' and 'attention_mask' of shape (L,); got {observation_space}. "
                "Use cory_env.RoleEnv (num_conversations=None) and a vector env for several conversations."
            )
        super().__init__(observation_space, features_dim)
        self.vocab_size = int(ids.high.max()) + 1
        self.embedding = nn.Embedding(self.vocab_size, embedding_dim)
        self.project = nn.Sequential(nn.Linear(2 * embedding_dim + 1, features_dim), nn.ReLU())

    def forward(self, observations: dict[str, torch.Tensor]) -> torch.Tensor:
        # SB3 hands Box observations over as float tensors.
        ids = observations["input_ids"].long().clamp(0, self.vocab_size - 1)  # not in place: the input may be shared
        mask = observations["attention_mask"].float().unsqueeze(-1)
        emb = self.embedding(ids)  # (N, L, E)
        mean = (emb * mask).sum(1) / mask.sum(1).clamp_min(1.0)
        last = emb[:, -1] * mask[:, -1]
        role = observations["role"].float().reshape(-1, 1)
        return self.project(torch.cat([mean, last, role], dim=-1))


def token_policy_kwargs(embedding_dim: int = 32, features_dim: int = 64, **kwargs: Any) -> dict[str, Any]:
    """``policy_kwargs`` for SB3's ``"MultiInputPolicy"`` with :class:`TokenEmbeddingExtractor`.

    Extra keyword arguments (``net_arch=...``, ``activation_fn=...``) go to the policy.
    """
    return dict(
        features_extractor_class=TokenEmbeddingExtractor,
        features_extractor_kwargs=dict(embedding_dim=embedding_dim, features_dim=features_dim),
        **kwargs,
    )


def episode_rewards(
    model: BaseAlgorithm, venv: VecEnv, episodes: int = 200, seed: int = 0, deterministic: bool = False
) -> np.ndarray:
    """The rewards of ``episodes`` episodes of ``model`` on ``venv``, whose prompts are drawn from ``seed``.

    The same ``seed`` gives the same prompts, so a policy before and after training is
    compared on the same queries (SB3's ``evaluate_policy``; ``venv`` wrapped in
    ``Monitor``, as ``make_vec_env`` does). ``deterministic=False`` samples tokens, as in training.
    """
    venv.seed(seed)
    rewards, _ = evaluate_policy(
        model, venv, n_eval_episodes=episodes, deterministic=deterministic, return_episode_rewards=True
    )
    return np.asarray(rewards, dtype=np.float64)


class RolloutMetricsCallback(BaseCallback):
    """Log each PPO rollout's finished episodes to ``metrics.csv``, like the project's own trainer.

    One row per rollout (``iteration``): ``<learner>/task_reward_mean`` and ``_std`` (the
    role's own task reward, from :class:`~cory_env.RoleEnv`'s final ``info``),
    ``<learner>/reward_mean`` (what PPO was trained on: differs under
    ``collective_reward=True``), ``<learner>/response_length_mean``, ``episodes`` and
    ``timesteps``. :func:`cory_agents.training.plots.plot_run` draws ``task_reward.png`` from it, and one
    sample response per rollout goes to ``samples.jsonl``.

    Args:
        out_dir: run folder for ``metrics.csv``, ``samples.jsonl`` (and TensorBoard files).
        learner: the column prefix, e.g. the trained role.
        tensorboard: also write TensorBoard scalars.
    """

    def __init__(self, out_dir: str | Path, learner: str = "pioneer", tensorboard: bool = False):
        super().__init__()
        self.out_dir, self.learner, self.tensorboard = Path(out_dir), learner, tensorboard
        self.metrics: MetricsLogger | None = None
        self.iteration = 0
        self._episodes: list[dict[str, Any]] = []

    def _on_training_start(self) -> None:
        # A second learn() call continues the same files.
        self.metrics = MetricsLogger(
            self.out_dir, resume=self.iteration > 0, report_to="tensorboard" if self.tensorboard else "none"
        )

    def _on_step(self) -> bool:
        for done, info in zip(self.locals["dones"], self.locals["infos"]):
            if done and "task_reward" in info:
                self._episodes.append(info)
        return True

    def _on_rollout_end(self) -> None:
        episodes, self._episodes = self._episodes, []
        if not episodes or self.metrics is None:
            return
        task = np.array([float(e["task_reward"]) for e in episodes])
        p = self.learner
        self.metrics.log(
            self.iteration,
            {
                f"{p}/task_reward_mean": task.mean(),
                f"{p}/task_reward_std": task.std(),
                f"{p}/reward_mean": np.mean([float(e["reward"]) for e in episodes]),
                f"{p}/response_length_mean": np.mean([float(e["response_length"]) for e in episodes]),
                "episodes": len(episodes),
                "timesteps": self.num_timesteps,
            },
        )
        last = episodes[-1]
        self.metrics.log_samples(
            self.iteration,
            [{"learner": p, "query": last["query"], "response": last["response"], "reward": float(last["reward"])}],
        )
        self.iteration += 1

    def _on_training_end(self) -> None:
        if self.metrics is not None:
            self.metrics.close()
            self.metrics = None
