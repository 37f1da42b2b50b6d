"""# The signalling game (`--task signal`)

A Lewis signalling game (Lewis, 1969; Lazaridou et al., ICLR 2017) played in words by a chain
of two language models. Agent 0, the **sender**, sees a secret: one of `K` words (colours by
default, or animals). Agent 1, the **receiver**, does not: it sees only the sender's message
and must name the secret. Both receive 1 when the receiver names it and 0 otherwise: the
collective reward of CORY's wrapper, since the sender's own score is always 0. A receiver that
ignores the message names the secret with probability `1/K` at best (chance).

What makes it a multi-agent problem: the secret is a **private field** of the prompt row
(`private_fields={"secret": [0]}`), so no template of the receiver can name it and nothing
of it reaches the receiver but the sender's message. Neither agent can succeed alone, and the
sender is rewarded only through its partner's answer: credit for a partner's success.

| | |
|---|---|
| prompts | one row per secret: `query` (the word list's kind), `secret`, `words` (the `K` words) |
| sender (position 0) | `The secret {kind} is {secret}. Tell your partner which {kind} it is:` |
| receiver (position 1) | `Your partner knows a secret {kind}: one of {words}. Your partner says: "{response}" The secret {kind} is` |
| reward | :func:`signal_reward`: position 1 scores 1 if the first of the `K` words its answer names is the secret, else 0; position 0 scores 0 |
| chance | `1/K` for a receiver that ignores the message (naming every word scores only when the secret comes first) |
| flags | `--num-secrets K` (2 to 8, default 4), `--secret-words colours\\|animals` |
| needs | `--algo cory` (two agents); `--rounds R` plays the exchange `R` times (the receiver's guesses are read by the sender in later rounds) |

In later rounds (`--rounds 2` or more) the sender reads the receiver's last guess
(`{response}`) and may correct it; the receiver then guesses again, and every round's guess
is scored (with `--turn-rewards` each round's guess is rewarded at the end of its round; by
default the rounds' scores are summed at the episode's end).

Example:
    >>> signal_reward(["colour"] * 2, [" red, I think", " blue or red"], secret=["red", "red"],
    ...               words=[SECRET_WORDS["colours"][:4]] * 2, round=0, position=1)
    [1.0, 0.0]
    >>> prompts = signal_prompts(None, num_secrets=3)
    >>> [p.metadata["secret"] for p in prompts.prompts]
    ['red', 'blue', 'green']

What the runs show, and the command that reruns them: docs/games.md.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from cory_env.errors import UsageError
from cory_env.prompts import Prompt, PromptList

#: The word lists a secret is drawn from, by kind (``--secret-words``); ``K`` first words of one.
SECRET_WORDS: dict[str, tuple[str, ...]] = {
    "colours": ("red", "blue", "green", "yellow", "black", "white", "purple", "orange"),
    "animals": ("cat", "dog", "horse", "bird", "fish", "cow", "lion", "mouse"),
}
#: The singular noun of each kind, for the prompts.
KIND = {"colours": "colour", "animals": "animal"}
#: The default number of secrets ``K``: chance is 1/4.
NUM_SECRETS = 4

SENDER_TEMPLATE = "The secret {query} is {secret}. Tell your partner which {query} it is:"
RECEIVER_TEMPLATE = (
    'Your partner knows a secret {query}: one of {words}. Your partner says: "{response}" The secret {query} is'
)
#: The sender in later rounds: it reads the receiver's last guess.
LATER_SENDER_TEMPLATE = (
    'The secret {query} is {secret}. Your partner guessed: "{response}" Tell your partner which {query} it is:'
)
#: Only the sender (position 0) sees the secret.
PRIVATE_FIELDS = {"secret": (0,)}


def check_secrets(num_secrets: int, words: str) -> tuple[str, ...]:
    """The ``K`` secret words of ``--num-secrets`` and ``--secret-words``, checked."""
    if words not in SECRET_WORDS:
        raise UsageError(f"--secret-words must be one of {', '.join(SECRET_WORDS)}, got {words!r}")
    most = len(SECRET_WORDS[words])
    if isinstance(num_secrets, bool) or not isinstance(num_secrets, int) or not 2 <= num_secrets <= most:
        raise UsageError(f"--num-secrets must be between 2 and {most} (the {words} known), got {num_secrets!r}")
    return SECRET_WORDS[words][:num_secrets]


def signal_prompts(
    tokenizer: Any = None,
    *,
    split: str = "train",
    seed: int = 0,
    source: str = "auto",
    num_secrets: int = NUM_SECRETS,
    secret_words: str = "colours",
) -> PromptList:
    """One prompt row per secret word (the environment draws them uniformly): ``query`` the kind
    (``colour``), metadata ``secret`` and ``words`` (the ``K`` words, comma-separated). ``split``
    and ``seed`` change nothing: the game has no held-out data, only the ``K`` secrets."""
    if source not in ("auto", "words"):
        raise UsageError(f"the signal task's prompts come from its word lists: --prompt-source auto, got {source!r}")
    secrets = check_secrets(num_secrets, secret_words)
    listed = ", ".join(secrets)
    return PromptList([Prompt(KIND[secret_words], {"secret": s, "words": listed}) for s in secrets])


_WORD = re.compile(r"[a-z]+")


def named_word(answer: str, words: Sequence[str]) -> str | None:
    """The first of ``words`` that ``answer`` names (as a whole word, any case), or ``None``.

    >>> named_word("I'd say Blue, not red", ["red", "blue"])
    'blue'
    """
    candidates = set(words)
    return next((w for w in _WORD.findall(answer.lower()) if w in candidates), None)


def signal_reward(
    queries: list[str],
    responses: list[str],
    *,
    secret: Sequence[str],
    words: Sequence[str | Sequence[str]],
    round: int = 0,
    position: int = 1,
    **_: Any,
) -> list[float]:
    """1.0 where the receiver (``position`` 1) names the secret first among the ``K`` words, else
    0.0; the sender's (position 0) turns score 0. ``words`` holds each row's ``K`` words (a
    comma-separated string or a list)."""
    if position != 1:
        return [0.0] * len(responses)
    scores = []
    for answer, target, listed in zip(responses, secret, words):
        candidates = [w.strip() for w in listed.split(",")] if isinstance(listed, str) else list(listed)
        scores.append(1.0 if named_word(answer, candidates) == target else 0.0)
    return scores
