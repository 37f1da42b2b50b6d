"""A run's chat form: ``--chat`` plays the task as conversations through each model's chat template
(:mod:`cory_env.chat_prompts`), ``--no-carried-context`` renders every turn afresh (an ablation).

The raw form's string-prompt settings (``--pioneer-template``, ``--observer-template``, ``--templates``,
``--no-knowledge-transfer``) mean nothing in chat form, where every agent sees the conversation, and are
refused with it. A game made for chat models (Taboo) is played in chat form without ``--chat``; a task file whose rows are messages is played in chat form without ``--chat``, as TRL
applies a chat template to a conversational dataset only.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from cory_env.chat_prompts import ChatForm
from cory_env.errors import UsageError
from cory_env.tasks import Task, get_task


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


def task_chat_form(config: Any, task: Task) -> ChatForm | None:
    """The chat form the run plays (:func:`in_chat_form`): the task's (``--no-carried-context``: without its carried
    context); ``None`` otherwise: the raw form, or the chat form where the prompt rows are messages (the
    environment's choice)."""
    if not in_chat_form(config):
        return None
    return dataclasses.replace(task.chat, carry=False) if config.no_carried_context else task.chat


def solo_chat_form(config: Any) -> ChatForm | None:
    """The chat form of ``config``'s task where the run plays its task in chat form (a model evaluated by itself,
    cory-eval, plays its first position: :class:`~cory_env.chat_prompts.ChatPrompts` takes a chain of one from
    it); ``None`` for the raw form."""
    return get_task(config.task).chat if in_chat_form(config) else None
