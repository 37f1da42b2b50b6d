"""Tasks: what the agents are asked, how they are prompted, and how they are scored.

A :class:`Task` bundles a prompt source factory, the pioneer's and observer's
templates, the name of its default reward (see :func:`cory_env.rewards.get_reward`)
and suggested generation settings. Tasks are found by name:

========== ========================================= ================= ==============
name       prompts                                   default reward    new tokens
========== ========================================= ================= ==============
sentiment  first 2-7 tokens of a movie review        ``vader``         12
gsm8k      grade-school math questions (+ answers)   ``gsm8k``         128-256
signal     a secret word the receiver must name      ``signal``        4
taboo      a secret word, described without taboos   ``taboo``         16 (chat form)
========== ========================================= ================= ==============

Each has a chat form (:attr:`Task.chat`): ``--chat`` plays it as a conversation through the models' chat
templates (:mod:`cory_env.chat_prompts`); Taboo, a game for chat models, is played so without the flag.

Example:
    >>> import cory_env
    >>> from cory_env.models import load_tokenizer
    >>> from cory_env.rewards import get_reward
    >>> from cory_env.tasks import get_task
    >>> tokenizer, task = load_tokenizer(), get_task("gsm8k")
    >>> prompts = task.prompts(tokenizer, split="test")
    >>> game = cory_env.env(tokenizer=tokenizer, prompts=prompts,
    ...     reward_fn=get_reward(task.default_reward), pioneer_template=task.pioneer_template,
    ...     observer_template=task.observer_template, context_length=task.context_length,
    ...     max_new_tokens=(task.min_new_tokens, task.max_new_tokens))

Your own data becomes a task with :func:`~cory_env.tasks.custom.custom_task`; any
task can be added with :func:`register_task`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from cory_env.chat_prompts import ChatForm
from cory_env.errors import UsageError
from cory_env.hub import DatasetUnavailableError
from cory_env.prompts import Prompt, PromptSource
from cory_env.tasks.custom import custom_prompts, custom_task
from cory_env.tasks.gsm8k import gsm8k_prompts, load_gsm8k
from cory_env.tasks.sentiment import (
    ReviewPrefixes,
    load_reviews,
    sentiment_prompts,
)
from cory_env.tasks.signal import (
    CHAT_FORM as SIGNAL_CHAT,
)
from cory_env.tasks.signal import (
    LATER_SENDER_TEMPLATE,
    PRIVATE_FIELDS,
    RECEIVER_TEMPLATE,
    SENDER_TEMPLATE,
    signal_prompts,
)
from cory_env.tasks.signal import check_row as check_signal_row
from cory_env.tasks.taboo import CHAT_FORM as TABOO_CHAT
from cory_env.tasks.taboo import DESCRIBER_TEMPLATE as TABOO_DESCRIBER
from cory_env.tasks.taboo import GUESSER_TEMPLATE as TABOO_GUESSER
from cory_env.tasks.taboo import PRIVATE_FIELDS as TABOO_PRIVATE
from cory_env.tasks.taboo import taboo_prompts
from cory_env.templates import (
    GSM8K_OBSERVER,
    GSM8K_PIONEER,
    SENTIMENT_OBSERVER,
    SENTIMENT_PIONEER,
    Template,
    check_template,
)


class PromptFactory(Protocol):
    """Builds a task's prompt source: ``(tokenizer, *, split, seed, source) -> PromptSource``."""

    def __call__(
        self, tokenizer: Any, *, split: str = "train", seed: int = 0, source: str = "auto"
    ) -> PromptSource: ...


@dataclass(frozen=True)
class Task:
    """Everything that defines a task, apart from the model.

    Attributes:
        name: what :func:`get_task` and ``--task`` know it as.
        prompts: ``prompts(tokenizer, *, split="train", seed=0, source="auto")`` returns the
            prompt source of a split (``"train"`` or ``"test"``) from one of ``sources``.
        pioneer_template, observer_template: see :mod:`cory_env.templates`.
        default_reward: a reward name for :func:`cory_env.rewards.get_reward`.
        min_new_tokens, max_new_tokens: suggested response length range (the environment
            samples each episode's limit from it).
        context_length: suggested observation width: room for the longest prompt, the
            pioneer's response inside the observer's prompt, and a response.
        sources: the values ``prompts`` accepts for ``source``; ``"auto"`` first.
        description: one line for listings and ``--help``.
        prompt_fields: the prompt rows' fields its templates name (``{secret}``).
        private_fields: those only some chain positions may see: ``{field: positions}``.
        later_templates: one template per position for the rounds after the first (``--rounds``);
            ``None``: the observer template at every position (each revises the turn before).
        min_agents, max_agents: the chains that can play it (a game of two needs ``--algo cory``;
            ``max_agents`` ``None``: any longer chain).
        prompt_options: settings of ``cory-train`` (field names) passed to ``prompts`` as keywords.
        chat: the :class:`~cory_env.chat_prompts.ChatForm` the task plays in chat form (``--chat``): each
            position's system message, the opening, the speakers' names; ``None``: no chat form.
        chat_by_default: the task is played in chat form without ``--chat`` (a game made for chat models).
        chat_defaults: the settings the chat form changes (``context_length``, ``max_new_tokens``, ...,
            ``default_reward``): a conversation is longer than a raw prompt, a reply is not a continuation.
        check_row: ``check_row(prompt)`` raises a :class:`~cory_env.errors.UsageError` (what is wrong, the fix)
            for a row of your data the task can never score; :func:`~cory_env.tasks.custom.custom_task`
            (``--task-file``) runs it over every row when it reads them, naming the row's line.
    """

    name: str
    prompts: PromptFactory
    pioneer_template: Template
    observer_template: Template
    default_reward: str
    min_new_tokens: int = 4
    max_new_tokens: int = 15
    context_length: int = 128
    sources: tuple[str, ...] = ("auto",)
    description: str = ""
    prompt_fields: tuple[str, ...] = ()
    private_fields: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    later_templates: tuple[Template, ...] | None = None
    min_agents: int = 1
    max_agents: int | None = None
    prompt_options: tuple[str, ...] = ()
    check_row: Callable[[Prompt], None] | None = None
    chat: ChatForm | None = None
    chat_by_default: bool = False
    chat_defaults: Mapping[str, Any] = field(default_factory=dict)

    def in_chat_form(self) -> Task:
        """The task as ``--chat`` plays it: its :attr:`chat_defaults` applied (its :attr:`chat` form is what the
        environment gets); a task without a chat form is refused, naming the ones that have one."""
        if self.chat is None:
            have = ", ".join(sorted(n for n, t in TASKS.items() if t.chat is not None))
            raise UsageError(
                f"task {self.name!r} has no chat form (--chat): the tasks with one are {have}; or give your prompts as "
                f"messages (a --task-file whose rows are conversations), which are played in chat form"
            )
        return dataclasses.replace(self, **self.chat_defaults)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise ValueError(f"a task name must be a non-empty string, got {self.name!r}")
        if not callable(self.prompts):
            raise TypeError(f"task {self.name!r}: prompts must be a callable (tokenizer, *, split, seed, source)")
        fields = dict(prompt_fields=(*self.prompt_fields, *self.private_fields), private_fields=self.private_fields)
        check_template(self.pioneer_template, position=0, name=f"task {self.name!r} pioneer_template", **fields)
        check_template(self.observer_template, position=1, name=f"task {self.name!r} observer_template", **fields)
        for k, template in enumerate(self.later_templates or ()):
            check_template(template, position=k, round=1, name=f"task {self.name!r} later_templates[{k}]", **fields)
        if not 1 <= self.min_new_tokens <= self.max_new_tokens:
            raise ValueError(
                f"task {self.name!r}: need 1 <= min_new_tokens <= max_new_tokens, "
                f"got {self.min_new_tokens} and {self.max_new_tokens}"
            )
        if self.context_length <= self.max_new_tokens:
            raise ValueError(
                f"task {self.name!r}: context_length ({self.context_length}) must exceed "
                f"max_new_tokens ({self.max_new_tokens})"
            )


#: The registered tasks, by name.
TASKS: dict[str, Task] = {}


def register_task(task: Task, *, replace: bool = False) -> Task:
    """Make ``task`` available to :func:`get_task` (and ``--task``) under ``task.name``."""
    if not isinstance(task, Task):
        raise TypeError(f"register_task needs a Task, got {type(task).__name__}")
    if task.name in TASKS and TASKS[task.name] is not task and not replace:
        raise ValueError(f"a task named {task.name!r} is already registered; pass replace=True to replace it")
    TASKS[task.name] = task
    return task


def get_task(name: str) -> Task:
    """The registered task called ``name``; an unknown name's error lists the known ones."""
    try:
        return TASKS[name]
    except (KeyError, TypeError):
        raise UsageError(
            f"unknown task {name!r}: the registered tasks are {', '.join(sorted(TASKS))}. "
            "For your own prompts use custom_task(data) (command line: --task-file)."
        ) from None


def _sentiment(tokenizer: Any, *, split: str = "train", seed: int = 0, source: str = "auto") -> PromptSource:
    return sentiment_prompts(tokenizer, source=source, split=split)


register_task(
    Task(
        name="sentiment",
        prompts=_sentiment,
        pioneer_template=SENTIMENT_PIONEER,
        observer_template=SENTIMENT_OBSERVER,
        default_reward="vader",
        min_new_tokens=12,  # fixed: a length limit drawn per batch moves the batch's VADER score with it
        max_new_tokens=12,  # (the paper's 4-15: --preset paper-imdb; docs/why-it-learns.md)
        context_length=128,
        sources=("auto", "imdb", "rotten_tomatoes"),
        description="continue the first 2-7 tokens of a movie review positively (the paper's IMDB task)",
        chat=ChatForm(
            system=(
                "Continue the movie review the user begins. Reply with the next words of the review only.",
                "Continue the movie review the user begins, more positively than your partner did. Reply with the "
                "next words of the review only.",
            ),
            names=("partner", "reviser"),
        ),
        chat_defaults=dict(context_length=192, default_reward="vader-joined"),
    )
)
register_task(
    Task(
        name="gsm8k",
        prompts=gsm8k_prompts,
        pioneer_template=GSM8K_PIONEER,
        observer_template=GSM8K_OBSERVER,
        default_reward="gsm8k",
        min_new_tokens=128,
        max_new_tokens=256,
        context_length=1024,
        sources=("auto", "gsm8k", "gsm_symbolic"),
        description="solve grade-school math word problems, one-shot prompt (the paper's GSM8K task)",
        chat=ChatForm(
            system=(
                "Solve the math problem step by step, then end with the final answer as a number.",
                "Solve the math problem step by step, then end with the final answer as a number. Your partner's "
                "answer may help; check it.",
            ),
            names=("partner", "checker"),
        ),
        chat_defaults=dict(context_length=1280),
    )
)

register_task(
    Task(
        name="signal",
        prompts=signal_prompts,
        pioneer_template=SENDER_TEMPLATE,
        observer_template=RECEIVER_TEMPLATE,
        default_reward="signal",
        min_new_tokens=4,
        max_new_tokens=4,
        context_length=96,
        sources=("auto",),
        description="a signalling game: the sender sees a secret word, the receiver must name it (collective reward 1)",
        prompt_fields=("words",),
        private_fields=PRIVATE_FIELDS,
        later_templates=(LATER_SENDER_TEMPLATE, RECEIVER_TEMPLATE),
        min_agents=2,
        max_agents=2,
        prompt_options=("num_secrets", "secret_words"),
        check_row=check_signal_row,
        chat=SIGNAL_CHAT,
        chat_defaults=dict(min_new_tokens=8, max_new_tokens=8, context_length=256),
    )
)

register_task(
    Task(
        name="taboo",
        prompts=taboo_prompts,
        pioneer_template=TABOO_DESCRIBER,
        observer_template=TABOO_GUESSER,
        default_reward="taboo",
        min_new_tokens=16,
        max_new_tokens=16,
        context_length=256,
        sources=("auto",),
        description="Taboo, for chat models: the describer makes the guesser name a secret word without its taboo words",
        prompt_fields=("choices",),
        private_fields=TABOO_PRIVATE,
        prompt_options=("taboo_choices",),
        min_agents=2,
        max_agents=2,
        chat=TABOO_CHAT,
        chat_by_default=True,
    )
)

__all__ = [
    "TASKS",
    "DatasetUnavailableError",
    "PromptFactory",
    "ReviewPrefixes",
    "Task",
    "custom_prompts",
    "custom_task",
    "get_task",
    "gsm8k_prompts",
    "load_gsm8k",
    "load_reviews",
    "register_task",
    "sentiment_prompts",
    "signal_prompts",
    "taboo_prompts",
]
