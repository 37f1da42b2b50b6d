"""# Taboo (`--task taboo`): a game for chat models

The word game Taboo played by two chat models. Agent 0, the **describer**, sees a secret word and a
list of taboo words and must make its partner name the secret without saying any of them; agent 1,
the **guesser**, sees only the describer's message and names a word. Both receive 1 when the guess is
the secret and the message was clean, else 0 (the collective reward: the describer's own turn scores
0). Unlike the signalling game, the describer may not name the secret, nor the words closest to it:
it has to say what the word means, or agree on another word with its partner. The guesser chooses
among a few words (`--taboo-choices`): the open game, any word, leaves the embedded model (135M
parameters) at no success at all, so nothing to learn from (docs/games.md).

The rule, declared before any run of the game:

| | |
|---|---|
| clean message | no word of the describer's message (lower-case runs of `a-z`) begins with the secret or a taboo word: `fruity` breaks the taboo on `fruit` |
| the choices | `--taboo-choices K` (default 4): both see `K` words, the secret and `K-1` others of the list, in the opening ("The secret word is one of: ..."); `0`: no list, any word |
| the guess | the first word of the guesser's answer that is one of the choices (with no list: of the game's 30 secret words, :data:`WORDS`) |
| reward | position 1 scores 1 if every describer message so far was clean and its guess is the secret, else 0; position 0 scores 0 |
| chance | a guesser that ignores the message names the secret with probability `1/K` at best (`1/30` with no list) |

The word list is small and curated, in the package (offline): 30 common nouns, each with the four
words a board-game card would forbid. Both the secret and the taboo words are **private fields** of
the describer (`private_fields={"secret": [0], "taboo": [0]}`). The game is played in chat form
(each agent's system message, the opening "Let's play Taboo. The secret word is one of: ..."), as
the chat models it is made for expect; `--rounds R` lets the describer read the guess and try again.

Example:
    >>> taboo_reward(["word"] * 3, ["An apple.", "Apple!", "A pear"], secret=["apple"] * 3,
    ...     taboo=["fruit, red, tree, pie"] * 3, position=1,
    ...     earlier=[["A red fruit."], ["It grows on a branch."], ["It grows on a branch."]])
    [0.0, 1.0, 0.0]
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from cory_env.chat_prompts import ChatForm
from cory_env.errors import UsageError
from cory_env.prompts import Prompt, PromptList

#: The secret words and their taboo words.
WORDS: dict[str, tuple[str, ...]] = {
    "apple": ("fruit", "red", "tree", "pie"),
    "banana": ("yellow", "fruit", "monkey", "peel"),
    "dog": ("bark", "pet", "puppy", "cat"),
    "cat": ("meow", "pet", "kitten", "dog"),
    "sun": ("sky", "hot", "light", "day"),
    "moon": ("night", "sky", "star", "space"),
    "rain": ("water", "wet", "cloud", "umbrella"),
    "snow": ("cold", "white", "winter", "ice"),
    "car": ("drive", "road", "wheel", "engine"),
    "train": ("rail", "track", "station", "travel"),
    "book": ("read", "page", "story", "library"),
    "school": ("teacher", "student", "class", "learn"),
    "doctor": ("hospital", "sick", "nurse", "medicine"),
    "fire": ("hot", "burn", "smoke", "flame"),
    "water": ("drink", "wet", "sea", "river"),
    "bread": ("bake", "flour", "toast", "sandwich"),
    "milk": ("cow", "white", "drink", "cheese"),
    "fish": ("swim", "sea", "water", "ocean"),
    "bird": ("fly", "wing", "feather", "nest"),
    "tree": ("leaf", "wood", "forest", "green"),
    "flower": ("rose", "garden", "petal", "bloom"),
    "house": ("home", "live", "door", "roof"),
    "phone": ("call", "talk", "mobile", "ring"),
    "music": ("song", "sing", "sound", "band"),
    "chair": ("sit", "seat", "table", "furniture"),
    "clock": ("time", "hour", "watch", "minute"),
    "money": ("cash", "bank", "pay", "dollar"),
    "king": ("queen", "crown", "royal", "throne"),
    "ball": ("round", "throw", "play", "kick"),
    "baby": ("child", "young", "cry", "infant"),
}
#: Only the describer (position 0) sees the secret and the taboo words.
PRIVATE_FIELDS = {"secret": (0,), "taboo": (0,)}

CHAT_FORM = ChatForm(
    system=(
        "You play Taboo with a partner. The secret word is {secret}. Describe it in one short sentence so that your "
        "partner can guess it, without saying the secret word or any of these words: {taboo}.",
        "You play Taboo with a partner, who describes a secret word without saying it. Which word is the secret? "
        "Answer with that word only.",
    ),
    opening="Let's play Taboo. The secret word is one of: {choices}.",
    names=("describer", "guesser"),
)
#: The raw form's prompts (the game is made for chat models: ``--task taboo`` plays its chat form).
DESCRIBER_TEMPLATE = "Describe the {query} {secret} without saying {taboo}:"
GUESSER_TEMPLATE = 'Guess the {query}: "{response}" The {query} is'

_WORD = re.compile(r"[a-z]+")


def taboo_prompts(
    tokenizer: Any = None, *, split: str = "train", seed: int = 0, source: str = "auto", taboo_choices: int = 4
) -> PromptList:
    """One prompt row per secret word (the environment draws them uniformly): ``query`` ``"word"``, metadata
    ``secret``, ``taboo`` (its taboo words, comma-separated) and ``choices`` (the ``taboo_choices`` words the
    guesser chooses from, the secret among them, comma-separated; all 30 with ``0``). The others are drawn once
    per secret with a fixed generator, so every run plays the same cards. ``split`` and ``seed`` change nothing:
    the game has no held-out data, only its words."""
    if source not in ("auto", "words"):
        raise UsageError(f"the taboo task's prompts come from its word list: --prompt-source auto, got {source!r}")
    K = taboo_choices
    if isinstance(K, bool) or not isinstance(K, int) or not (K == 0 or 2 <= K <= len(WORDS)):
        raise UsageError(f"--taboo-choices must be 0 (any word) or between 2 and {len(WORDS)}, got {K!r}")
    rng, rows = np.random.default_rng(0), []
    for secret, taboo in WORDS.items():
        others = [w for w in WORDS if w != secret]
        choices = list(WORDS) if K == 0 else [secret, *rng.choice(others, size=K - 1, replace=False)]
        order = rng.permutation(len(choices))
        rows.append(
            Prompt(
                "word", {"secret": secret, "taboo": ", ".join(taboo), "choices": ", ".join(choices[i] for i in order)}
            )
        )
    return PromptList(rows)


def forbidden(message: str, secret: str, taboo: str | Sequence[str]) -> bool:
    """Whether ``message`` breaks the taboo: one of its words begins with the secret or a taboo word.

    >>> forbidden("Something fruity and round", "apple", "fruit, red, tree, pie")
    True
    """
    words = [w.strip() for w in taboo.split(",")] if isinstance(taboo, str) else list(taboo)
    stems = [w.lower() for w in (secret, *words) if w]
    return any(word.startswith(stem) for word in _WORD.findall(message.lower()) for stem in stems)


def guessed(answer: str, choices: str | Sequence[str] = tuple(WORDS)) -> str | None:
    """The first word of ``answer`` that is one of ``choices`` (comma-separated, or a list), or ``None``.

    >>> guessed("Maybe a cat? or a dog", "dog, cat, sun")
    'cat'
    """
    listed = {w.strip() for w in choices.split(",")} if isinstance(choices, str) else set(choices)
    return next((w for w in _WORD.findall(answer.lower()) if w in listed), None)


def taboo_reward(
    queries: list[str],
    responses: list[str],
    *,
    secret: Sequence[str],
    taboo: Sequence[str],
    choices: Sequence[str] | None = None,
    position: int = 1,
    earlier: Sequence[Sequence[str]] = (),
    **_: Any,
) -> list[float]:
    """1.0 where the guesser (``position`` 1) names the secret first among the row's ``choices`` (:func:`guessed`;
    without them, among the game's words) and no describer message so far (``earlier``'s turns at even places,
    the describer's in a chain of two) broke the taboo (:func:`forbidden`); else 0.0. The describer's turns
    score 0."""
    if position != 1:
        return [0.0] * len(responses)
    scores = []
    for b, (answer, word, words) in enumerate(zip(responses, secret, taboo)):
        messages = list(earlier[b])[::2] if len(earlier) > b else []
        clean = not any(forbidden(m, word, words) for m in messages)
        listed = choices[b] if choices is not None else tuple(WORDS)
        scores.append(1.0 if clean and guessed(answer, listed) == word else 0.0)
    return scores
