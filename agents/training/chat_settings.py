"""A run's chat form: ``--chat`` plays the task as conversations through each model's chat template
(:mod:`cory_env.chat_prompts`), ``--no-carried-context`` renders every turn afresh (an ablation).

A carried context keeps the masked columns of its earlier turns (their padding, the answer's stop token), which
a sliding window would count as tokens where the cache's window layers and a padded pass see columns: a run
whose models have a sliding window narrower than ``--context-length`` (Gemma 3, Mistral, Phi-3 at long
contexts) renders every turn afresh instead, with one logged line (:func:`task_chat_form`).

The raw form's string-prompt settings (``--pioneer-template``, ``--observer-template``, ``--templates``,
``--no-knowledge-transfer``) mean nothing in chat form, where every agent sees the conversation, and are
refused with it. A game made for chat models (Taboo) is played in chat form without ``--chat``; a task file whose rows are messages is played in chat form without ``--chat``, as TRL
applies a chat template to a conversational dataset only.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable
from typing import Any

from cory_env.chat_prompts import ChatForm
from cory_env.errors import UsageError
from cory_env.tasks import Task, get_task

logger = logging.getLogger(__name__)


def check_chat_settings(config: Any) -> None:
    """Refuse the chat settings that cannot work together (a :class:`~cory_env.errors.UsageError` naming the fix)."""
    if config.no_carried_context and not in_chat_form(config):
        raise UsageError(
            "--no-carried-context is an ablation of the chat form's carried context (--chat): add --chat, or drop it"
        )
    raw = {"--pioneer-template": config.pioneer_template, "--observer-template": config.observer_template}
    raw |= {"--templates": config.templates, "--no-knowledge-transfer": config.no_knowledge_transfer}
    if in_chat_form(config) and (given := [name for name, value in raw.items() if value]):
        raise UsageError(
            f"{', '.join(given)} set the raw form's string prompts, but --task {config.task} is played in chat form "
            f"(--chat: every agent sees the conversation through its chat template): drop {given[0]}"
            + ("" if get_task(config.task).chat_by_default else ", or drop --chat")
        )


def in_chat_form(config: Any) -> bool:
    """Whether the run plays its task in chat form: ``--chat``, or a task made for chat models (Taboo)."""
    return bool(config.chat or get_task(config.task).chat_by_default)


def task_chat_form(config: Any, task: Task, windows: Iterable[int | None] = ()) -> ChatForm | None:
    """The chat form the run plays (:func:`in_chat_form`): the task's, without its carried context under
    ``--no-carried-context`` or where one of the models' sliding ``windows`` (their layers',
    :func:`~cory_agents.speed.attention_kinds.sliding_windows`) is narrower than ``config.context_length``;
    ``None`` otherwise: the raw form, or the chat form where the prompt rows are messages (the environment's
    choice).

    >>> from types import SimpleNamespace
    >>> config = SimpleNamespace(chat=True, task="signal", no_carried_context=False, context_length=256, rounds=1)
    >>> task_chat_form(config, get_task("signal"), [None, 4096]).carry, task_chat_form(config, get_task("signal"), [128]).carry
    (True, False)
    """
    if not in_chat_form(config):
        return None
    narrow = min((w for w in windows if w is not None), default=None)
    windowed = narrow is not None and narrow < config.context_length
    if windowed and task.chat.carry and not config.no_carried_context:
        logger.info(
            "every turn is rendered afresh: a sliding window of %d tokens, narrower than --context-length %d, would "
            "count a carried context's masked columns",
            narrow,
            config.context_length,
        )
    carry = task.chat.carry and not (windowed or config.no_carried_context)
    if carry and config.rounds > 1 and config.mini_batch_size % config.rounds:
        logger.info(
            "--mini-batch-size %d is not a multiple of --rounds %d: each epoch shuffles an agent's turns one by one, "
            "so a pass runs a carried turn again for each of its later turns in other minibatches (a multiple of "
            "%d keeps each conversation in one minibatch)",
            config.mini_batch_size,
            config.rounds,
            config.rounds,
        )
    return task.chat if carry else dataclasses.replace(task.chat, carry=False)


def solo_chat_form(config: Any) -> ChatForm | None:
    """The chat form of ``config``'s task where the run plays its task in chat form (a model evaluated by itself,
    cory-eval, plays its first position: :class:`~cory_env.chat_prompts.ChatPrompts` takes a chain of one from
    it); ``None`` for the raw form."""
    return get_task(config.task).chat if in_chat_form(config) else None
