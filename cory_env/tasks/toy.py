"""A toy task with an 18-token vocabulary: learning you can watch in seconds, no language model.

The tokenizer knows 15 words (plus ``<pad>``, ``<eos>``, ``<unk>``), so an agent's
action space is ``Discrete(18)``. Two rewards:

- :func:`fraction_good` (:func:`target_word_reward` for another word): the fraction of
  the response's words that are the target word. A uniformly random policy scores about
  0.06, the best one 1.0 (say only the target word), whatever the context.
- :func:`echo_last_word`: the fraction of the response's words equal to the query's last
  word. On :data:`TOY_PROMPTS` any answer that ignores the context scores at most 1/3,
  so a policy that gets near 1.0 reads its observation.

It is what the tests and the Stable-Baselines3 example learn on.

Example:
    >>> from cory_env import env
    >>> from cory_env.tasks.toy import TOY_PROMPTS, fraction_good, toy_tokenizer
    >>> e = env(tokenizer=toy_tokenizer(), prompts=TOY_PROMPTS, reward_fn=fraction_good,
    ...         max_new_tokens=4, context_length=32)
    >>> e.action_space("pioneer")
    Discrete(18)
    >>> fraction_good(["the movie"], ["good good bad"])
    [0.6666666666666666]
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Sequence
from typing import Any

TOY_WORDS = "the movie was good bad great fine awful ok plot acting film is not very".split()
"""The 15 words of :func:`toy_tokenizer`, in id order after ``<pad>`` (0), ``<eos>`` (1), ``<unk>`` (2)."""

TOY_PROMPTS = ["the movie was", "the plot is", "acting is very"]
"""Queries written in the toy vocabulary."""


def toy_tokenizer() -> Any:
    """A word-level tokenizer over :data:`TOY_WORDS` (plus ``<pad>``, ``<eos>``, ``<unk>``): a tiny action space.

    Words outside the vocabulary (such as those of the default observer template)
    become ``<unk>``, which decoding drops with the other special tokens.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {w: i for i, w in enumerate(["<pad>", "<eos>", "<unk>", *TOY_WORDS])}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    backend.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
    return PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>")


def fraction_of_word(queries: list[str], responses: list[str], word: str = "good", **_: Any) -> list[float]:
    """The fraction of each response's words that are ``word`` (0 for an empty response)."""
    return [r.split().count(word) / max(len(r.split()), 1) for r in responses]


def target_word_reward(word: str) -> Any:
    """A reward function for the fraction of ``word`` in the response (picklable, for subprocess vector envs)."""
    if word not in TOY_WORDS:
        raise ValueError(f"target word {word!r} is not in the toy vocabulary; choose one of {TOY_WORDS}")
    return functools.partial(fraction_of_word, word=word)


def echo_last_word(queries: list[str], responses: list[str], **_: Any) -> list[float]:
    """The fraction of each response's words equal to its query's last word (0 for an empty response)."""
    return [r.split().count(q.split()[-1]) / max(len(r.split()), 1) for q, r in zip(queries, responses)]


def fraction_good(queries: list[str], responses: list[str], **_: Any) -> list[float]:
    """The fraction of response words that are "good" (the toy task reward)."""
    return fraction_of_word(queries, responses, "good")


def add_task_arguments(parser: argparse.ArgumentParser, roles: Sequence[str] | None = ("pioneer", "observer")) -> None:
    """The toy task's flags, shared by the examples that train one role with another library
    (examples/train_sb3.py, examples/train_torchrl.py); :func:`reward_from_arguments` reads them.
    ``roles`` are ``--role``'s choices; ``None`` leaves the check to the environment (any
    position of a chain)."""
    if roles is None:
        help = (
            "the position PPO trains: pioneer or observer, or with --num-agents N one of observer_1 ... observer_{N-1}"
        )
        parser.add_argument("--role", default="pioneer", help=help)
    else:
        parser.add_argument("--role", choices=list(roles), default="pioneer", help="the role PPO trains")
    parser.add_argument("--with-observer", action="store_true", help="role pioneer: a fixed observer answers after it")
    parser.add_argument("--collective-reward", action="store_true", help="reward the sum of every agent's task reward")
    parser.add_argument("--target-word", default="good", choices=TOY_WORDS, help="the word the reward counts")
    parser.add_argument(
        "--echo",
        action="store_true",
        help="reward repeating the query's last word instead (the policy must read its context)",
    )
    parser.add_argument("--other-word", default="bad", choices=TOY_WORDS, help="what the fixed other roles say")


def reward_from_arguments(args: argparse.Namespace) -> Any:
    """The reward function :func:`add_task_arguments`' flags choose."""
    return echo_last_word if args.echo else target_word_reward(args.target_word)
