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
| your rows | `--task-file` rows with `query`, `secret`, `words` (comma-separated, or a JSON list); :func:`check_row` refuses, when the file is read, a row that can never score: an empty secret, a secret that is not one word of `a-z` or not among the row's words, a word listed twice |
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

from cory_env.chat_prompts import ChatForm
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
#: The game in chat form (``--chat``): a system message each, the candidate words in the opening, and the
#: message and guesses as the conversation (in later rounds the sender reads the guess and may correct it).
CHAT_FORM = ChatForm(
    system=(
        "You play a word game with a partner. The secret {query} is {secret}. Your partner does not know it: tell "
        "them which {query} it is, in a few words.",
        "You play a word game with a partner, who knows a secret {query} and tells you which it is. Name the secret "
        "{query}.",
    ),
    opening="The secret {query} is one of: {words}.",
    names=("sender", "receiver"),
)


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


def row_words(listed: str | Sequence[str]) -> list[str]:
    """A row's ``words``: a comma-separated string (a CSV cell) or a list (JSON), as a list.

    >>> row_words("red, blue,green")
    ['red', 'blue', 'green']
    """
    return [w.strip() for w in listed.split(",")] if isinstance(listed, str) else list(listed)


def check_row(prompt: Prompt) -> None:
    """Refuse a prompt row (of your ``--task-file``) whose receiver can never score, with the value and the fix.

    The receiver scores by naming the secret first among the row's words, and the reward reads an answer's words
    as lower-case runs of ``a-z``. So a secret that is empty, that is not one such word (``Red``, ``light blue``),
    or that is not among the words can never be named; and a word listed twice is a list of fewer than ``K``.
    A row without ``secret`` or ``words`` is left to the environment, which names the field it lacks.
    """
    if "secret" not in prompt.metadata or "words" not in prompt.metadata:
        return
    secret, given = prompt.metadata["secret"], prompt.metadata["words"]
    if not isinstance(given, (str, list, tuple)):  # a CSV row short of its words cell reads None
        raise UsageError(f"the words are {given!r}: give the K words the receiver chooses from, comma-separated")
    words = row_words(given)
    listed = ", ".join(map(str, words))
    if not isinstance(secret, str) or not secret.strip():
        raise UsageError(
            f"the secret is empty ({secret!r}), so the receiver can never name it and the row can never score: "
            f"give the row's secret, one of its words ({listed})"
        )
    if not _WORD.fullmatch(secret):
        raise UsageError(
            f"the secret {secret!r} is not one word of the letters a-z in lower case, the only words the reward reads "
            f"in an answer, so the row can never score: write it so (here and among the words: {listed})"
        )
    if secret not in words:
        raise UsageError(
            f"the secret {secret!r} is not among the row's words ({listed}), of which the receiver names one, so the "
            f"row can never score: add it to the words, or correct the secret"
        )
    repeated = next((w for i, w in enumerate(words) if w in words[:i]), None)
    if repeated is not None:
        raise UsageError(
            f"the words name {repeated!r} more than once ({listed}): list each of the K words the receiver chooses "
            f"from once"
        )


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
        scores.append(1.0 if named_word(answer, row_words(listed)) == target else 0.0)
    return scores
