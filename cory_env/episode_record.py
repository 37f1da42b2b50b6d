"""What an episode has played so far: every turn, its scores, the rewards each agent received, the transcript.

The environment (:class:`~cory_env.PioneerObserverEnv`) keeps one :class:`EpisodeRecord` per
episode. At each turn's end it adds the turn (:meth:`EpisodeRecord.add`): the answers join the
``history`` later prompts are rendered from, the agent's :class:`~cory_env.context.PlayedTurn`
(its tokens and score) joins its ``turns``, and the turn's texts join the agent's entry of the
transcript, which becomes :attr:`~cory_env.PioneerObserverEnv.last_transcript` when the episode
ends. What an agent receives is credited to its latest turn (:meth:`EpisodeRecord.credit`): a
turn's reward, or the episode's at its last turn.

Example:
    >>> import numpy as np
    >>> record = EpisodeRecord(["pioneer"], rounds=1, batched=False)
    >>> turn = PlayedTurn(0, 0, np.zeros((1, 3), dtype=int), np.ones((1, 3), dtype=int), 1, np.array([1]),
    ...                   np.array([0.5]), np.zeros(1))
    >>> ended = record.add("pioneer", turn, ["a good film"], query=["The"], context=["The"])
    >>> record.credit("pioneer", np.array([2.0]))
    >>> record.transcript["pioneer"]["response"], float(record.transcript["pioneer"]["reward"])
    ('a good film', 2.0)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from cory_env.context import PlayedTurn
from cory_env.templates import rounds_text


class EpisodeRecord:
    """The turns of one episode, by agent and in the order played, and its transcript by role.

    Args:
        agents: the agents with a turn to play (a replay's given turns are in ``history`` only).
        rounds: rounds the chain plays; with more than one each agent's transcript entry also
            lists its ``turns``.
        batched: the environment's form: transcript values are lists and arrays over
            conversations, or (unbatched) the one conversation's.
    """

    def __init__(self, agents: Sequence[str], rounds: int, batched: bool):
        self.rounds, self.batched = rounds, batched
        #: The turns played, in order: ``(position, round, answers)`` (0-based; answers per conversation).
        self.history: list[tuple[int, int, list[str]]] = []
        #: Each agent's finished turns, in order.
        self.turns: dict[str, list[PlayedTurn]] = {a: [] for a in agents}
        #: By role: what the default infos hold when the agent's latest turn has ended.
        self.transcript: dict[str, dict[str, Any]] = {a: {"role": a} for a in agents}

    def unbatch(self, values: Any) -> Any:
        """``values`` over conversations, or the one conversation's in the single form."""
        return values if self.batched else values[0]

    def add(self, agent: str, turn: PlayedTurn, answers: list[str], **texts: Any) -> dict[str, Any]:
        """Record ``agent``'s turn that just ended, its ``answers`` (one per conversation) and ``texts``
        (``query``, ``context``: lists over conversations); return the info entries it ends with."""
        self.history.append((turn.position, turn.round, answers))
        self.turns[agent].append(turn)
        ended = {k: self.unbatch(v) for k, v in texts.items()}
        ended.update(
            response=self.unbatch(answers),
            response_length=self.unbatch(turn.response_length.copy()),
            task_reward=self.unbatch(turn.task_reward),
        )
        if self.rounds > 1:
            ended["round"] = turn.round
            entry = self.transcript[agent].setdefault("turns", [])
            entry.append(dict(ended, reward=self.unbatch(np.zeros_like(turn.task_reward))))
        self.transcript[agent].update(ended)
        return ended

    def credit(self, agent: str, values: np.ndarray) -> None:
        """What ``agent`` receives for its latest turn (per conversation; it replaces what that turn had):
        the transcript's ``reward`` becomes the agent's rewards of every turn summed."""
        turns = self.turns.get(agent)
        if not turns:
            raise RuntimeError(f"{agent!r} has no finished turn in this episode to credit a reward to")
        turns[-1].reward = values
        if self.rounds > 1:
            self.transcript[agent]["turns"][-1]["reward"] = self.unbatch(values.copy())
        total = values.copy() if len(turns) == 1 else np.sum([t.reward for t in turns], axis=0)
        self.transcript[agent]["reward"] = self.unbatch(total)

    def task_totals(self) -> dict[str, np.ndarray]:
        """Each agent's task rewards of the episode, per conversation: its turns' scores summed (in one
        round, its only turn's)."""
        return {
            a: turns[0].task_reward if len(turns) == 1 else np.sum([t.task_reward for t in turns], axis=0)
            for a, turns in self.turns.items()
            if turns
        }

    def text(self, queries: Sequence[str], roles: Sequence[str]) -> str:
        """The episode as text, turn by turn (:func:`~cory_env.templates.rounds_text`)."""
        return rounds_text(queries, roles, self.history, self.turns)
