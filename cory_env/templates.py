"""Prompt templates: how a query (and the earlier agents' responses) become an agent's context.

A template is a ``str.format`` string, or any callable ``(query, response) -> str``. Its fields:

- ``{query}``: the query (every template must use it);
- ``{response}``: the previous agent's decoded response (for the observer of CORY, the pioneer's);
- ``{response_1}``, ``{response_2}``, ...: the response of the agent at that chain position
  (1 is the pioneer), in a chain of more than two agents;
- ``{responses}``: all earlier responses, in chain order, one per line.

The pioneer's template may only use ``{query}``: it has not seen a response. The template of
the agent at position ``k`` (1-based) may name the responses ``1 .. k-1``. A callable that takes
a ``responses`` keyword gets the list of all earlier responses too.

A context is rendered as text and tokenized as a whole, as in the CORY authors' code, so it
reads like natural text to the model, and in a team of different models each agent's context is
tokenized by its own tokenizer.

Example:
    >>> render(SENTIMENT_OBSERVER, query="The film", response=" was dull")
    'I can make this sentence "The film was dull" more positive: The film'
    >>> render("{query} | {response_1} | {response}", "Q", responses=["a", "b"])
    'Q | a | b'
"""

from __future__ import annotations

import inspect
import re
import string
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from cory_env.errors import UsageError

Template = str | Callable[[str, str], str]

#: The pioneer simply continues the review prefix (the paper's IMDB setting).
SENTIMENT_PIONEER = "{query}"
#: The observer prompt of the CORY authors' IMDB code. In a longer chain every later agent
#: uses it too, with the previous agent's response: each one improves the answer before it.
SENTIMENT_OBSERVER = 'I can make this sentence "{query}{response}" more positive: {query}'

#: The paper's one-shot exemplar for GSM8K.
GSM8K_EXEMPLAR = (
    "Question: Shawn has five toys. For Christmas, he got two toys each from his mom "
    "and dad. How many toys does he have now? Answer: Shawn started with 5 toys. If he "
    "got 2 toys each from his mom and dad, then that is 4 more toys. 5 + 4 = 9."
)
GSM8K_PIONEER = GSM8K_EXEMPLAR + "\nQuestion: {query} Answer:"
GSM8K_OBSERVER = GSM8K_EXEMPLAR + "\nQuestion: {query} Reference: {response} Answer:"

#: The named fields (besides ``{response_1}``, ``{response_2}``, ...: each earlier agent's answer).
FIELDS = ("query", "response", "responses")
_NUMBERED = re.compile(r"response_(\d+)$")


PIONEER, OBSERVER = "pioneer", "observer"
ROLES = (PIONEER, OBSERVER)


def chain_roles(num_agents: int) -> tuple[str, ...]:
    """The agents of a chain, by position: ``pioneer``, then ``observer`` (a chain of two), or
    ``observer_1`` ... ``observer_{N-1}`` (longer chains).

    >>> chain_roles(3)
    ('pioneer', 'observer_1', 'observer_2')
    """
    if isinstance(num_agents, bool) or not isinstance(num_agents, (int, np.integer)) or num_agents < 1:
        raise ValueError(f"num_agents must be a positive int (agents in the chain), got {num_agents!r}")
    if num_agents <= 2:
        return ROLES[:num_agents]
    return (PIONEER, *(f"{OBSERVER}_{k}" for k in range(1, num_agents)))


def fields_of(template: str, name: str = "template") -> list[str]:
    """The fields a format-string template uses, in order, with repeats."""
    try:
        return [f for _, f, _, _ in string.Formatter().parse(template) if f is not None]
    except ValueError as exc:
        raise UsageError(f"{name} {template!r} is not a valid format string: {exc}") from exc


def check_template(template: Template, *, allow_response: bool = True, name: str, position: int | None = None) -> None:
    """Raise a :class:`~cory_env.errors.UsageError` (a ``ValueError``) if a format-string template uses
    fields it may not.

    ``position`` is the agent's 0-based chain position (0: the pioneer); without it,
    ``allow_response`` says whether the template may use responses at all (the observer of a
    chain of two, position 1).
    """
    if callable(template):
        return
    if not isinstance(template, str):
        raise TypeError(f"{name} must be a format string or a callable (query, response) -> str")
    if position is None:
        position = 1 if allow_response else 0
    used = fields_of(template, name)
    earlier = [f"response_{j}" for j in range(1, position + 1)]
    allowed = [*FIELDS, *earlier] if position else ["query"]
    for f in used:
        if f in allowed:
            continue
        if (numbered := _NUMBERED.match(f)) and int(numbered[1]) >= 1:
            answered = f"agents 1..{position} have answered" if position else "no agent has answered yet"
            raise UsageError(
                f"{name} {template!r} names {{{f}}}, the answer of agent {numbered[1]}, which does not exist before "
                f"agent {position + 1} of the chain ({answered}); allowed: {', '.join('{' + a + '}' for a in allowed)}"
            )
        raise UsageError(
            f"{name} {template!r} uses unknown field {{{f}}}; allowed: {', '.join('{' + a + '}' for a in allowed)}"
        )
    if "query" not in used:
        raise UsageError(f"{name} {template!r} must contain the field {{query}}")


def response_slots(template: Template, position: int) -> int:
    """How many earlier responses the context of the agent at ``position`` (0-based) can hold: the
    fields it names (``{responses}`` counts every earlier one); a callable may hold them all."""
    if callable(template):
        return position
    count = 0
    for f in fields_of(template):
        if f == "responses":
            count += position
        elif f == "response" or _NUMBERED.match(f):
            count += 1
    return count


def render(template: Template, query: str, response: str = "", *, responses: Sequence[str] | None = None) -> str:
    """Fill a template with a query and the earlier agents' responses (``responses``, in chain
    order; ``response``, the previous one, defaults to the last of them)."""
    earlier = list(responses) if responses is not None else ([response] if response else [])
    if earlier:
        response = earlier[-1]
    if callable(template):
        if earlier and _takes_responses(template):
            return template(query, response, responses=earlier)
        return template(query, response)
    numbered = {f"response_{j}": r for j, r in enumerate(earlier, start=1)}
    return template.format(query=query, response=response, responses="\n".join(earlier), **numbered)


def _takes_responses(template: Callable) -> bool:
    try:
        parameters = inspect.signature(template).parameters
    except (TypeError, ValueError):
        return False
    return "responses" in parameters or any(p.kind is p.VAR_KEYWORD for p in parameters.values())


def chain_templates(
    roles: Sequence[str],
    templates: Sequence[Template] | None,
    pioneer_template: Template,
    observer_template: Template,
    knowledge_transfer: bool = True,
) -> list[Template]:
    """One checked template per chain position (``roles``): ``templates`` as given (one per agent), or the
    pioneer's then ``observer_template`` at every later position. Without knowledge transfer
    (the paper's ablation) every agent gets the pioneer's: it sees the query alone."""
    n, given = len(roles), templates is not None
    if templates is None:
        templates = [pioneer_template, *[observer_template] * (n - 1)]
    elif isinstance(templates, str) or len(templates) != n:
        raise UsageError(
            f"templates must be a list with one template per agent ({n}: {', '.join(roles)}), got {templates!r:.200}"
        )
    for k, template in enumerate(templates):
        name = f"templates[{k}]" if given else ("pioneer_template" if k == 0 else "observer_template")
        check_template(template, name=name, position=k)
    return list(templates) if knowledge_transfer else [templates[0]] * n


def given_answers(answers: Any, roles: Sequence[str], num_conversations: int, batched: bool) -> list[list[str]]:
    """The answers of a replay's first positions (``reset(options={"answers": ...})``), checked: ``k``
    lists of ``num_conversations`` strings, ``1 <= k < len(roles)`` (``[]`` for ``None``; in the
    single form a position's answer may be one string)."""
    if answers is None:
        return []
    N, B = len(roles), num_conversations
    if isinstance(answers, str) or not isinstance(answers, Sequence) or not 1 <= len(answers) < N:
        raise ValueError(
            f"options['answers'] must be a list of the answers of the first k positions (1 <= k < {N}: "
            f"at least one agent must play), got {answers!r:.80}"
        )
    given = []
    for k, row in enumerate(answers):
        row = [row] if isinstance(row, str) and not batched else row
        if (
            isinstance(row, str)
            or not isinstance(row, Sequence)
            or len(row) != B
            or not all(isinstance(a, str) for a in row)
        ):
            raise ValueError(
                f"options['answers'][{k}] (the {roles[k]}'s answers) must be {B} strings, one per conversation, "
                f"got {row!r:.80}"
            )
        given.append(list(row))
    return given


def transcript_text(
    queries: Sequence[str],
    roles: Sequence[str],
    responses: Mapping[str, Sequence[str]],
    task_rewards: Mapping[str, Sequence[float]],
) -> str:
    """An episode as text, conversation by conversation: each role's answer and its task reward
    (``(given)`` for the answers a replay was given)."""
    lines = []
    for b, q in enumerate(queries):
        lines.append(f"[{b}] query:    {q!r}")
        for role in roles:
            if role in task_rewards:
                lines.append(f"    {role:8s}: {responses[role][b]!r}  (task reward {task_rewards[role][b]:+.3f})")
            elif role in responses:
                lines.append(f"    {role:8s}: {responses[role][b]!r}  (given)")
    return "\n".join(lines)
