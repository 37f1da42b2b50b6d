"""Is there communication? Measures of the signalling game (``--task signal``) beyond its success rate.

A receiver that names the secret more often than chance (``1/K``) may read the sender's message, or may
exploit something else (the order of the listed words, a bias both share). Lowe et al. (2019, "On the
pitfalls of measuring emergent communication") ask for measures of the message's *use*, not only of the
team's reward; these are theirs and EGG's, for one batched episode of a trained team:

- :func:`communication_table`: secret x message x answer counts, the table a protocol is read from;
- :func:`mutual_information`: ``I(secret; message)`` in bits (plug-in estimate): how much the messages say
  about the secrets (``log2 K`` at most; 0 if the sender says the same whatever the secret);
- :func:`message_interventions`: the episode played again with the messages shuffled among conversations
  of other secrets (a replay with common random numbers, :mod:`cory_agents.learners.replay`): the receiver's
  success with another episode's message (about chance without communication, since the message then says
  nothing of this secret) and the **causal influence** of the message, the fraction of receivers whose named
  word changes when only the message changes (0 for a receiver that ignores it).

:func:`communication_measures` plays a trained team's episode (a :class:`~cory_agents.training.trainer.Trainer`)
and returns them all.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from cory_agents.evaluation.policies import policy_from_checkpoint, run_folder
from cory_agents.evaluation.report import write_json
from cory_agents.evaluation.rl_statistics import binomial_ci, binomial_test_against_chance
from cory_agents.learners.replay import replay
from cory_env.errors import UsageError
from cory_env.prompts import metadata_lists
from cory_env.tasks.signal import named_word, row_words

#: In :func:`communication_table`: a receiver's answer that names none of the words.
NO_ANSWER = "(none)"


def mutual_information(xs: Sequence[Hashable], ys: Sequence[Hashable]) -> float:
    """``I(X; Y) = sum_{x,y} p(x,y) log2(p(x,y) / (p(x) p(y)))`` in bits, from the empirical joint distribution
    of the pairs ``(xs[i], ys[i])`` (the plug-in estimate: biased upwards on few samples).

    >>> mutual_information(["red", "blue", "red", "blue"], ["r", "b", "r", "b"])  # one message per secret
    1.0
    >>> mutual_information(["red", "blue", "red", "blue"], ["x", "x", "x", "x"])  # the same message always
    0.0
    """
    if len(xs) != len(ys) or not xs:
        raise ValueError(f"mutual_information needs pairs: got {len(xs)} and {len(ys)} values")
    n = len(xs)
    joint, px, py = Counter(zip(xs, ys, strict=True)), Counter(xs), Counter(ys)
    mi = sum(c / n * math.log2(c * n / (px[x] * py[y])) for (x, y), c in joint.items())
    return max(0.0, mi) + 0.0  # -0.0 and rounding below 0 as 0


def communication_table(secrets: Sequence[str], messages: Sequence[str], answers: Sequence[str | None]) -> pd.DataFrame:
    """The counts of each (secret, message, answer) of an episode, most frequent first: ``answer`` is the word
    the receiver named (:data:`NO_ANSWER` for ``None``: none of the words).

    >>> communication_table(["red", "red", "blue"], ["r", "r", "b"], ["red", "red", None]).values.tolist()
    [['red', 'r', 'red', 2], ['blue', 'b', '(none)', 1]]
    """
    named = [NO_ANSWER if a is None else a for a in answers]
    frame = pd.DataFrame({"secret": list(secrets), "message": list(messages), "answer": named})
    counts = frame.groupby(["secret", "message", "answer"], sort=False).size()
    return (
        counts.rename("count").reset_index().sort_values("count", ascending=False, kind="stable").reset_index(drop=True)
    )


def derangement_by_secret(secrets: Sequence[str], rng: np.random.Generator) -> np.ndarray:
    """For each conversation ``b`` another conversation ``perm[b]`` whose secret differs (a message that says
    nothing of ``b``'s secret); ``b`` itself where every other conversation shares its secret."""
    secrets = list(secrets)
    perm = np.arange(len(secrets))
    for b in range(len(secrets)):
        others = [c for c in range(len(secrets)) if secrets[c] != secrets[b]]
        if others:
            perm[b] = rng.choice(others)
    return perm


@dataclass
class Interventions:
    """What the receivers did with the episode's messages and with shuffled ones (:func:`message_interventions`)."""

    success: float  #: the receivers' success with their own messages
    shuffled_success: float  #: with a message of a conversation of another secret
    causal_influence: float  #: the fraction of receivers whose named word changed with the message
    chance: float  #: 1/K


def interventions(
    secrets: Sequence[str], answers: Sequence[str | None], shuffled_answers: Sequence[str | None], chance: float
) -> Interventions:
    """The :class:`Interventions` of receivers' ``answers`` with their own messages and ``shuffled_answers``
    with another secret's, per conversation."""
    return Interventions(
        success=float(np.mean([a == s for a, s in zip(answers, secrets, strict=True)])),
        shuffled_success=float(np.mean([a == s for a, s in zip(shuffled_answers, secrets, strict=True)])),
        causal_influence=float(np.mean([a != b for a, b in zip(answers, shuffled_answers, strict=True)])),
        chance=chance,
    )


def message_interventions(
    trainer: Any, team: Any, seed: int = 0, messages_from: Sequence[int] | None = None
) -> tuple[Interventions, dict[str, list]]:
    """Play ``team`` (a :class:`~cory_agents.learners.team.TeamEpisode` of a one-round signalling game) again with
    each sender's message replaced by that of a conversation with another secret (``messages_from[b]``, default
    :func:`derangement_by_secret`), the receiver playing again with the episode's random numbers; returns the
    :class:`Interventions` and the episode's ``secrets``, ``messages``, ``answers`` (the receivers' named words),
    the ``messages_from`` used and the receivers' ``shuffled_contexts`` and ``shuffled_answers``."""
    env = team.env
    if env.rounds != 1 or len(env.possible_agents) != 2:
        raise ValueError("message_interventions measures the one-round game of two agents (--task signal)")
    metadata = metadata_lists(env.prompts)
    secrets, words = metadata["secret"], [row_words(w) for w in metadata["words"]]
    turns = {position: answers for position, _, answers in env.history}
    messages, answers = list(turns[0]), [named_word(a, w) for a, w in zip(turns[1], words, strict=True)]
    perm = derangement_by_secret(secrets, np.random.default_rng(seed)) if messages_from is None else messages_from
    with team.acting():
        again = replay(team, trainer.learners, {0: [messages[c] for c in perm]})
    receiver = team.order[1]
    shuffled_answers = [named_word(a, w) for a, w in zip(again.infos[receiver]["response"], words, strict=True)]
    result = interventions(secrets, answers, shuffled_answers, chance=1.0 / len(words[0]))
    played = {"secrets": list(secrets), "messages": messages, "answers": answers, "messages_from": list(perm)}
    return result, played | {
        "shuffled_contexts": list(again.infos[receiver]["context"]),
        "shuffled_answers": shuffled_answers,
    }


def communication_measures(trainer: Any, seed: int = 0, episodes: int = 1) -> dict[str, Any]:
    """``episodes`` batched episodes of ``trainer``'s team on the signalling game, pooled, and their measures:
    success (with its exact interval and its one-sided exact p-value against chance), shuffled success, causal
    influence, chance, ``mutual_information`` (secret; message) and the ``table`` (records)."""
    pooled: dict[str, list] = {"secrets": [], "messages": [], "answers": [], "shuffled_answers": []}
    for episode in range(episodes):
        team = trainer.team_episode(trainer.rollout())
        _, played = message_interventions(trainer, team, seed + episode)
        for key in pooled:
            pooled[key] += played[key]
    secrets, answers = pooled["secrets"], pooled["answers"]
    chance = 1.0 / len(row_words(metadata_lists(team.env.prompts)["words"][0]))
    rates = interventions(secrets, answers, pooled["shuffled_answers"], chance)
    hits = sum(a == s for a, s in zip(answers, secrets, strict=True))
    _, low, high = binomial_ci(hits, len(secrets))
    table = communication_table(secrets, pooled["messages"], answers)
    return {
        "conversations": len(secrets),
        **vars(rates),
        "success_ci": [low, high],
        "p_value_against_chance": binomial_test_against_chance(hits, len(secrets), chance),
        "mutual_information": mutual_information(secrets, pooled["messages"]),
        "table": table.to_dict("records"),
    }


def format_measures(measures: dict[str, Any], what: str) -> str:
    """:func:`communication_measures` as lines of text, the table's most frequent rows last."""
    m = measures
    lines = [
        f"{what}: the signalling game, {m['conversations']} conversations",
        f"success {m['success']:.3f} [{m['success_ci'][0]:.3f}, {m['success_ci'][1]:.3f}] (chance {m['chance']:.3f}, "
        f"exact p {m['p_value_against_chance']:.2g}); with another secret's message {m['shuffled_success']:.3f}; "
        f"the message changes the answer in {m['causal_influence']:.1%} of conversations; "
        f"I(secret; message) {m['mutual_information']:.3f} bits",
        "",
        "secret | message | answer | count",
        *(f"{r['secret']} | {r['message']!r} | {r['answer']} | {r['count']}" for r in m["table"][:12]),
    ]
    return "\n".join(lines)


def evaluate_team(state: dict[str, Any], checkpoint: Path, config: Any, *, write: bool = True) -> dict[str, Any]:
    """``cory-eval`` of a team trained on the signalling game (``state``: its loaded checkpoint; ``config``: the
    :class:`~cory_agents.evaluation.held_out.EvalConfig`): :func:`communication_measures` over about
    ``--num-prompts`` conversations in episodes of ``--batch-size``, written to ``--out`` (default: the run's
    ``evaluation.json``)."""
    batch = config.batch_size
    trainer = policy_from_checkpoint(
        state, reward_fn=None, device=config.device, play=True, batch_size=batch, mini_batch_size=batch
    )
    if trainer.config.task != "signal":
        raise UsageError(
            f"cory-eval measures a team on the signalling game; --task {trainer.config.task} is a game of "
            f"{len(trainer.learners)} agents without a held-out evaluation: its training run's metrics.csv has the "
            f"team's success (reward_mean)"
        )
    episodes = max(1, math.ceil(config.num_prompts / batch))
    measures = communication_measures(trainer, seed=config.seed, episodes=episodes)
    result = {
        "policy": {"checkpoint": str(checkpoint), "iterations_trained": int(state["iteration"])},
        "task": trainer.config.task,
        "communication": measures,
        "settings": dataclasses.asdict(config),
    }
    if write:
        out = Path(config.out) if config.out else run_folder(checkpoint) / "evaluation.json"
        result["path"] = str(write_json(out, result))
    return result
