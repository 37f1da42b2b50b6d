"""Replays: the team's episode played again with some answers given, for counterfactual credit.

A team learner asks "what would the others have scored had agent ``i`` answered otherwise?" by
playing the iteration's episode again on a copy of the environment (the same queries, private
fields and turn limit; the played environment is left as it was). Each turn ``k`` of the chain
(``k = round * N + position``) is, in the replay:

- **given** a text: ``answers[k]``, ``B`` strings (``""``: the agent said nothing);
- **held**: ``answers[k] = KEEP``, the answer that turn played, token for token;
- **played again** by the member sitting there (every turn not in ``answers``).

The leading given turns are passed to the environment as a replay's first answers
(``reset(options={"answers": ...})``: :class:`~cory_env.PioneerObserverEnv`, "Replays"); a turn given or
held after a turn played again is fed to the environment token by token, so it is scored, and read by
the later turns, in the new conversation.

**Common random numbers.** A member that plays a turn again samples from its generator as it stood
at the start of the same turn in the episode (``common_random_numbers=True``, the default, from the
states the trainer's rollout recorded in :attr:`~cory_agents.learners.team.TeamEpisode.sampling_states`).
The sampler draws one uniform number per conversation per token (:func:`~cory_agents.acting.actor.sample_categorical`),
so a conversation whose prompt the changed answer does not reach is played as before, token for token
(up to float rounding where other rows' lengths change the batch's padding, as bf16 or some kernels may), and
elsewhere the replay's answer differs from the episode's only through the change: the noise of a
fresh sample cancels in the difference (Glasserman and Yao, 1992; the counterfactuals of
:mod:`cory_agents.learners.difference`). Each member's generator is then set back where the episode left
it: the next episode's samples do not depend on the replays made. ``False`` draws fresh samples, as
independent rollouts would: the members' generators advance, so two fresh replays differ.

The replay returns each learner's :class:`~cory_agents.learners.base.Episode` of the turns it played or was fed
in the replay (its final step's, as the trainer builds them) with its final info; a learner whose every turn
was among the leading given turns is absent (a turn given after a played one is fed, so its learner appears).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from cory_agents.learners.base import Episode
from cory_agents.learners.team import TeamEpisode
from cory_env.context import encode, starts_turn


class _Keep:
    def __repr__(self) -> str:
        return "KEEP"


#: In :func:`replay`'s ``answers``: the turn's answer as played, held fixed.
KEEP = _Keep()


@dataclass
class Replay:
    """What :func:`replay` returns: for each learner that played (or was held at) a turn of the replay, its
    episode and final info (``info["task_reward"]`` its score in the replayed conversations)."""

    episodes: dict[str, Episode]
    infos: dict[str, dict[str, Any]]

    def task_rewards(self, names: Sequence[str] | None = None) -> np.ndarray:
        """``(B,)`` the task rewards of ``names`` (default: every learner in the replay) summed per conversation."""
        names = list(self.episodes) if names is None else names
        B = len(next(iter(self.episodes.values())).task_rewards) if self.episodes else 0
        return np.sum([self.episodes[n].task_rewards for n in names], axis=0) if names else np.zeros(B)


def replay(
    team: TeamEpisode,
    members: Mapping[str, Any],
    answers: Mapping[int, Sequence[str] | _Keep],
    *,
    common_random_numbers: bool = True,
) -> Replay:
    """Play ``team``'s episode again with the turns of ``answers`` given or held (module docstring), the other
    turns by ``members`` (``{learner name: Learner}``, the team's): call it inside ``team.acting()``."""
    played = team.env
    roles, B = played.possible_agents, played.num_conversations
    N, turns = len(roles), len(roles) * played.rounds
    history = played.history
    if len(history) != turns:
        raise RuntimeError(
            f"replay needs a finished episode: {len(history)} of its {turns} turns were played; call it from a team "
            f"learner's learn(), after the rollout"
        )
    for k, given in answers.items():
        if not (isinstance(k, int) and 0 <= k < turns):
            raise ValueError(f"answers are keyed by turn, 0 to {turns - 1} (round * {N} + position), got {k!r}")
        if given is not KEEP and (isinstance(given, str) or len(given) != B):
            raise ValueError(f"turn {k}'s answers must be {B} strings (one per conversation) or KEEP")
    if len(answers) == turns:
        raise ValueError("every turn is given: nothing to play again (leave out the turns the members should play)")
    learner_at = {role: name for name, role in team.roles.items()}
    leading = 0
    while leading in answers:
        leading += 1
    texts = [history[k][2] if answers[k] is KEEP else list(answers[k]) for k in range(leading)]
    fed = {k: _tokens(played, k, answers[k]) for k in answers if k > leading}

    # With common random numbers the generators are set back afterwards; fresh samples advance them.
    after_episode = {n: m.sampling_generator.get_state() for n, m in members.items() if _samples(m)}
    if not common_random_numbers:
        after_episode = {}
    env = copy.copy(played)
    env.reset(options={"answers": texts})
    episodes, infos = {}, {}
    step = 0
    try:
        for role in env.agent_iter():
            observation, _, terminated, truncated, info = env.last()
            name = learner_at[role]
            if terminated or truncated:
                episodes[name] = (
                    Episode.from_final_step(observation, info)
                    if env.rounds == 1
                    else Episode.from_turns(env.played_turns(role), info)
                )
                infos[name] = info
                env.step(None)
                continue
            k = env.round * N + roles.index(role)
            if starts_turn(observation):
                step = 0
                if k not in fed and common_random_numbers and _samples(members[name]):
                    members[name].sampling_generator.set_state(_state_at(team, name, env.round))
            if k in fed:
                env.step(fed[k][:, min(step, fed[k].shape[1] - 1)])
                step += 1
            else:
                env.step(members[name].act(name, observation))
    finally:
        for n, state in after_episode.items():
            members[n].sampling_generator.set_state(state)
    return Replay(episodes, infos)


def _samples(member: Any) -> bool:
    return hasattr(member, "sampling_generator")


def _state_at(team: TeamEpisode, name: str, round: int) -> Any:
    states = team.sampling_states.get(name, [])
    if round >= len(states):
        raise ValueError(
            f"common random numbers need {name}'s sampling state at the start of its turn in round {round + 1}, "
            "which the trainer's rollout records (TeamEpisode.sampling_states); pass common_random_numbers=False "
            "for fresh samples"
        )
    return states[round]


def _tokens(env: Any, k: int, given: Sequence[str] | _Keep) -> np.ndarray:
    """``(B, T)`` the tokens to feed for turn ``k``: its played answer's (``KEEP``), or the texts' in the speaker's
    tokens ending with its stop token; padding after each answer's end (the environment ignores it)."""
    N = len(env.possible_agents)
    role = env.possible_agents[k % N]
    speaker = env.speaker(role)
    if given is KEEP:
        turn = env.played_turns(role)[k // N]
        return np.asarray(turn.input_ids[:, -turn.response_width :])
    stop = [int(speaker.stop_token_ids[0])] if len(speaker.stop_token_ids) else []
    rows = [ids + stop for ids in encode(speaker.tokenizer, list(given), add_special_tokens=False)]
    out = np.full((len(rows), max(1, *map(len, rows))), speaker.pad_token_id, dtype=np.int64)
    for b, row in enumerate(rows):
        out[b, : len(row)] = row
    return out
