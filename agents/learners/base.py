"""The learner interface: what the training loop needs from a learning algorithm.

A *learner* is one trainable agent of the environment: CORY has two (``llm_0``,
``llm_1``, which exchange the pioneer and observer roles), single-agent training has
one (``pioneer``). :class:`~cory_agents.training.trainer.Trainer` drives every learner through four
methods and nothing else:

1. ``act(agent, observation)`` at each of the agent's token steps: the next token ids
   (``(B,)`` array in the batched form). The learner keeps whatever it needs between
   steps (a KV cache: :class:`~cory_agents.acting.actor.LMActor`).
2. ``learn(episode)`` once per iteration with the :class:`Episode` built from the
   agent's final ``last()``: update the weights, return the iteration's statistics.
3. ``state_dict()`` / ``load_state_dict(state)`` for checkpoints: everything needed to
   continue *exactly* (trainable weights, optimizer, controllers, random generators).

Optionally a learner sets ``group_size`` (an int, default 1): the trainer then presents
each prompt that many times in a row in the batch (:func:`cory_env.prompts.repeat_each`),
so conversations ``[k*G, (k+1)*G)`` share a query: the groups of GRPO and RLOO.

**What ``learn`` returns.** A flat ``{name: float}`` dict; the trainer logs it as
``<learner>/<name>`` in ``metrics.csv`` and TensorBoard and adds ``<learner>/role``.
The plots and the progress bar read these names when present (:data:`PLOTTED_METRICS`):
``task_reward_mean`` (+ ``task_reward_std`` for the band), ``kl`` (KL to the reference
summed over the response, batch mean) and ``combined_reward`` (``task_reward_mean -
kl_coef * kl``, the paper's metric). :func:`reward_metrics` computes these from an
episode. Anything else (``policy_loss``, ``entropy``, ...) is logged as it is.

**Checkpoints.** The trainer saves ``{learner name: learner.state_dict()}`` with the
iteration, the role schedule and the environment/torch random states in one
``torch.save`` file, and on ``--resume`` calls ``load_state_dict`` on a freshly built
learner (same config, same models). The state may hold tensors, numpy arrays and plain
Python values; keep shared frozen weights (the reference, a LoRA base) out of it.

Example: see ``docs/plug-in-your-algorithm.md`` (a REINFORCE learner in about 40 lines).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch

from cory_env.context import PlayedTurn

#: Metrics the run plots (``cory_agents.training.plots.RUN_PLOTS``) and progress bar read, when a learner returns them.
PLOTTED_METRICS = ("task_reward_mean", "task_reward_std", "kl", "combined_reward")


@dataclass
class Episode:
    """What a learner takes from one batched episode (its final observation and info).

    Conversation ``b`` is row ``b`` everywhere. ``input_ids[b, -response_width:]`` is the
    learner's response, right-padded (``attention_mask`` 0 after it ended); the columns
    before it are its prompt, left-padded: the observer's prompt contains the pioneer's
    response to the same query. Positions for a forward pass count real tokens only
    (:func:`cory_agents.acting.actor.generate_positions`).
    """

    input_ids: torch.Tensor  # (B, W) prompt (left-padded) then response
    attention_mask: torch.Tensor  # (B, W)
    response_width: int  # T: the response occupies the last T columns
    scores: np.ndarray  # (B,) reward received (the collective reward under CORY)
    task_rewards: np.ndarray  # (B,) the learner's own task reward
    extra: dict[str, Any] = field(default_factory=dict)
    queries: list[str] = field(default_factory=list)  # (B,) the query of each conversation (groups share one)
    #: The agent's turns in the episode (``--rounds``): rows are then turn-major, row ``r * B + b`` being
    #: conversation ``b``'s turn ``r``, and ``scores`` ``(turns * B,)`` what each turn received.
    turns: int = 1

    @property
    def num_conversations(self) -> int:
        """``B``: the conversations (rows divided by turns)."""
        return self.input_ids.shape[0] // self.turns

    def conversation_scores(self) -> np.ndarray:
        """``(B,)`` what each conversation gave the learner: its turns' scores summed."""
        if self.turns == 1:
            return self.scores
        return self.scores.reshape(self.turns, -1).sum(axis=0)

    @classmethod
    def from_turns(cls, turns: Sequence[PlayedTurn], info: dict[str, Any]) -> Episode:
        """Build from the agent's finished turns (:meth:`~cory_env.PioneerObserverEnv.played_turns`), turn-major:
        each turn's prompt left-padded to the longest, its response right-padded to the longest."""
        P = max(t.input_ids.shape[1] - t.response_width for t in turns)
        T = max(t.response_width for t in turns)
        B = turns[0].input_ids.shape[0]
        ids = np.zeros((len(turns) * B, P + T), dtype=np.int64)
        mask = np.zeros_like(ids)
        for r, t in enumerate(turns):
            p, rows = t.input_ids.shape[1] - t.response_width, slice(r * B, (r + 1) * B)
            ids[rows, P - p : P + t.response_width] = t.input_ids
            mask[rows, P - p : P + t.response_width] = t.attention_mask
        queries = info.get("query", [])
        return cls(
            input_ids=torch.tensor(ids),
            attention_mask=torch.tensor(mask),
            response_width=T,
            scores=np.concatenate([np.asarray(t.reward, dtype=np.float64) for t in turns]),
            task_rewards=np.sum([t.task_reward for t in turns], axis=0).astype(np.float64),
            queries=[queries] if isinstance(queries, str) else list(queries),
            turns=len(turns),
            extra={"turn_task_rewards": np.stack([np.asarray(t.task_reward, dtype=np.float64) for t in turns])},
        )

    @classmethod
    def from_final_step(cls, observation: dict[str, np.ndarray], info: dict[str, Any]) -> Episode:
        """Build from ``last()`` at the learner's final (terminated) step."""
        lengths = np.atleast_1d(info["response_length"])
        T = int(lengths.max())
        W = int(observation["past_length"][0] + observation["num_new_tokens"][0])
        ids = np.atleast_2d(observation["input_ids"])[:, -W:]
        mask = np.atleast_2d(observation["attention_mask"])[:, -W:]
        queries = info.get("query", [])
        return cls(
            input_ids=torch.tensor(ids),
            attention_mask=torch.tensor(mask),
            response_width=T,
            scores=np.atleast_1d(np.asarray(info["reward"], dtype=np.float64)),
            task_rewards=np.atleast_1d(np.asarray(info["task_reward"], dtype=np.float64)),
            queries=[queries] if isinstance(queries, str) else list(queries),
        )


@runtime_checkable
class Learner(Protocol):
    """A learning agent the trainer can drive (see the module docstring for the contract)."""

    def act(self, agent: str, observation: dict[str, np.ndarray]) -> np.ndarray | int:
        """The next token id(s) for ``agent`` (the name it plays under) at this step."""
        ...

    def learn(self, episode: Episode) -> dict[str, float]:
        """Update from one batched episode; return the iteration's statistics."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """Everything an exact resume needs (not the shared frozen weights)."""
        ...

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""
        ...


def reward_metrics(episode: Episode, kl: float, kl_coef: float) -> dict[str, float]:
    """The plotted metrics of an episode, given its KL (summed over the response, batch mean).

    ``reward_mean`` is what the learner received (the collective reward under CORY); over several
    turns (``--rounds``) both rewards are per conversation, its turns summed, and two more compare
    with a game of one round: ``final_turn_task_reward_mean`` (the last turn's own score) and
    ``kl_per_turn``.

    Example:
        >>> ep = Episode(torch.zeros(2, 3), torch.ones(2, 3), 1, np.array([1.0, 3.0]), np.array([0.0, 1.0]))
        >>> reward_metrics(ep, kl=2.0, kl_coef=0.1)["combined_reward"]
        0.3
    """
    task = episode.task_rewards
    metrics = {
        "task_reward_mean": float(task.mean()),
        "task_reward_std": float(task.std()),
        "reward_mean": float(episode.conversation_scores().mean()),
        "kl": float(kl),
        "combined_reward": float(task.mean()) - kl_coef * float(kl),
        "kl_coef": float(kl_coef),
    }
    if episode.turns > 1:
        if "turn_task_rewards" in episode.extra:  # Episode.from_turns records them
            metrics["final_turn_task_reward_mean"] = float(episode.extra["turn_task_rewards"][-1].mean())
        metrics["kl_per_turn"] = float(kl) / episode.turns
    return metrics


def load_weights(model: torch.nn.Module, state: dict[str, torch.Tensor], expected: Iterable[str], steps: Any) -> None:
    """Copy a checkpoint's weights into ``model``'s parameters of the same names, then tell its optimizer steps
    (:mod:`cory_agents.distributed.optimizer_step`: sharded or fused copies) that they changed. A checkpoint
    lacking any of the ``expected`` names, or holding a name the model lacks, is refused before anything is copied."""
    missing = set(expected) - set(state)
    if missing:
        raise KeyError(f"checkpoint lacks {len(missing)} trainable weights, e.g. {sorted(missing)[:3]}")
    params = dict(model.named_parameters())
    unknown = set(state) - set(params)
    if unknown:
        raise KeyError(f"checkpoint holds {len(unknown)} weights this model lacks, e.g. {sorted(unknown)[:3]}")
    with torch.no_grad():
        for name, value in state.items():
            params[name].copy_(value)
    steps.weights_loaded([params[name] for name in state])
