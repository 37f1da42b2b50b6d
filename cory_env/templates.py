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

**Rounds** (``rounds=R``: the chain plays ``R`` times). A turn's template may also name

- ``{response_k_j}``: agent ``k``'s answer in round ``j`` (both 1-based);
- ``{round}``: the round being played, from 1;

and then ``{response_k}`` is agent ``k``'s latest answer before this turn, ``{response}`` the
previous turn's answer (in round 2 the pioneer's is the last agent's of round 1) and
``{responses}`` every earlier turn's answer in the order played, one per line: the whole
transcript. Every field names only turns already played: a template naming one that cannot
exist yet at its position and round fails when the environment is made.

**Prompt fields.** Any other field names a field of the prompt row (a key of
:attr:`~cory_env.prompts.Prompt.metadata`, such as a signalling game's ``{secret}``). A field
declared *private* (``private_fields={"secret": [0]}``) may be named only by the positions
listed: no other agent's prompt ever holds it. A callable template sees neither.

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
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
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
_BY_ROUND = re.compile(r"response_(\d+)_(\d+)$")


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


def check_template(
    template: Template,
    *,
    allow_response: bool = True,
    name: str,
    position: int | None = None,
    round: int = 0,
    prompt_fields: Collection[str] = (),
    private_fields: Mapping[str, Collection[int]] | None = None,
    num_agents: int | None = None,
) -> None:
    """Raise a :class:`~cory_env.errors.UsageError` (a ``ValueError``) if a format-string template uses
    fields it may not (``num_agents``: the chain's length, where known, bounds the agents named).

    ``position`` is the agent's 0-based chain position (0: the pioneer) and ``round`` the 0-based
    round of the turn; without a position, ``allow_response`` says whether the template may use
    responses at all (the observer of a chain of two, position 1). ``prompt_fields`` are the
    prompt rows' fields a template may name, ``private_fields`` (a subset, each with the positions
    that may see it) those only some positions may.
    """
    if callable(template):
        return
    if not isinstance(template, str):
        raise TypeError(f"{name} must be a format string or a callable (query, response) -> str")
    if position is None:
        position = 1 if allow_response else 0
    private = dict(private_fields or {})
    used = fields_of(template, name)
    # Agents 1..position have answered in this round; every agent in the rounds before it.
    earlier = [f"response_{j}" for j in range(1, position + 1)]
    answered_any = position > 0 or round > 0
    allowed = [*FIELDS, *earlier] if answered_any else ["query"]
    if round > 0:
        allowed.append("round")
    visible = [f for f in prompt_fields if f not in private or position in private[f]]
    for f in used:
        if f in allowed or f in visible or (f == "round" and round == 0):
            continue
        if f in private:
            who = ", ".join(str(p) for p in sorted(private[f])) or "none"
            raise UsageError(
                f"{name} {template!r} names {{{f}}}, a private field that only position(s) {who} may see "
                f"(0: the pioneer); this template is position {position}'s. Remove {{{f}}} from it, or make the "
                f"field visible there (private_fields)"
            )
        numbered = _NUMBERED.match(f)
        by_round = _BY_ROUND.match(f)
        if num_agents is not None and (named := numbered or by_round) and int(named[1]) > num_agents:
            raise UsageError(
                f"{name} {template!r} names {{{f}}}, an answer of agent {named[1]}, but the chain has {num_agents} "
                f"agents: name agents 1..{num_agents}"
            )
        if by_round and int(by_round[1]) >= 1 and int(by_round[2]) >= 1:
            k, j = int(by_round[1]), int(by_round[2])
            if j <= round or (j == round + 1 and k <= position):
                continue
            raise UsageError(
                f"{name} {template!r} names {{{f}}}, agent {k}'s answer in round {j}, which is not played before "
                f"agent {position + 1}'s turn in round {round + 1}: a template may name only turns already played"
            )
        if numbered and int(numbered[1]) >= 1:
            if round > 0:  # every agent answered in an earlier round: its latest answer
                continue
            answered = f"agents 1..{position} have answered" if position else "no agent has answered yet"
            raise UsageError(
                f"{name} {template!r} names {{{f}}}, the answer of agent {numbered[1]}, which does not exist before "
                f"agent {position + 1} of the chain ({answered}); allowed: {', '.join('{' + a + '}' for a in allowed)}"
            )
        raise UsageError(
            f"{name} {template!r} uses unknown field {{{f}}}; allowed: "
            f"{', '.join('{' + a + '}' for a in [*allowed, *visible])}"
            + ("" if f not in ("response", "responses") else " (no agent has answered before the pioneer's first turn)")
        )
    if "query" not in used:
        raise UsageError(f"{name} {template!r} must contain the field {{query}}")


def response_slots(template: Template, position: int, turns_before: int | None = None) -> int:
    """How many earlier responses the context of the agent at ``position`` (0-based) can hold: the
    fields it names (``{responses}`` counts every earlier turn: ``turns_before``, by default
    ``position``, the turns of a first round); a callable may hold them all."""
    turns_before = position if turns_before is None else turns_before
    if callable(template):
        return turns_before
    count = 0
    for f in fields_of(template):
        if f == "responses":
            count += turns_before
        elif f == "response" or _NUMBERED.match(f) or _BY_ROUND.match(f):
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
    fields = turn_fields([(k, 0, a) for k, a in enumerate(earlier)], round=0)
    return template.format(**{**fields, "response": response}, query=query)


def turn_fields(history: Sequence[tuple[int, int, str]], round: int) -> dict[str, Any]:
    """The chain's fields of a turn in ``round`` (0-based), from the turns played before it in one
    conversation, in order: ``(position, round, answer)``, both 0-based.

    >>> fields = turn_fields([(0, 0, "a"), (1, 0, "b"), (0, 1, "c")], round=1)
    >>> fields["response"], fields["response_1"], fields["response_1_1"], fields["responses"], fields["round"]
    ('c', 'c', 'a', 'a\\nb\\nc', 2)
    """
    answers = [a for _, _, a in history]
    fields: dict[str, Any] = {
        "response": answers[-1] if answers else "",
        "responses": "\n".join(answers),
        "round": round + 1,
    }
    for position, played, answer in history:
        fields[f"response_{position + 1}"] = answer  # the latest answer of that agent
        fields[f"response_{position + 1}_{played + 1}"] = answer
    return fields


def render_turn(
    template: Template,
    query: str,
    history: Sequence[tuple[int, int, str]],
    round: int,
    prompt_fields: Mapping[str, Any] | None = None,
) -> str:
    """A turn's context: ``template`` filled with the query, the fields of the earlier turns
    (:func:`turn_fields`) and ``prompt_fields`` (the prompt row's fields this position may see).
    In a first round it is what :func:`render` gives with the earlier agents' answers."""
    if callable(template):
        return render(template, query, responses=[a for _, _, a in history])
    return template.format(**(prompt_fields or {}), **turn_fields(history, round), query=query)


def _takes_responses(template: Callable) -> bool:
    try:
        parameters = inspect.signature(template).parameters
    except (TypeError, ValueError):
        return False
    return "responses" in parameters or any(p.kind is p.VAR_KEYWORD for p in parameters.values())


def chain_templates(
    roles: Sequence[str],
    templates: Sequence[Template | Sequence[Template]] | None,
    pioneer_template: Template,
    observer_template: Template,
    knowledge_transfer: bool = True,
    *,
    rounds: int = 1,
    later_templates: Sequence[Template] | None = None,
    prompt_fields: Collection[str] = (),
    private_fields: Mapping[str, Collection[int]] | None = None,
) -> list[list[Template]]:
    """The checked template of every turn: ``[round][position]``.

    ``templates`` as given (one per agent; an agent's entry may be a list of one template per
    round), or the pioneer's then ``observer_template`` at every later position. In the rounds
    after the first, an agent with a single template keeps it; without ``templates`` every
    position uses ``later_templates`` (one per agent) or, by default, ``observer_template``: each
    agent revises after reading the turn before it. Without knowledge transfer (the paper's
    ablation) every turn gets the pioneer's first template: it sees the query alone."""
    n, given = len(roles), templates is not None
    if templates is None:
        templates = [pioneer_template, *[observer_template] * (n - 1)]
    elif isinstance(templates, str) or len(templates) != n:
        raise UsageError(
            f"templates must be a list with one template per agent ({n}: {', '.join(roles)}), got {templates!r:.200}"
        )
    if later_templates is not None and (isinstance(later_templates, str) or len(later_templates) != n):
        raise UsageError(
            f"later_templates must be a list with one template per agent ({n}: {', '.join(roles)}), "
            f"got {later_templates!r:.200}"
        )
    table: list[list[Template]] = [[] for _ in range(rounds)]
    for k, entry in enumerate(templates):
        if isinstance(entry, str) or callable(entry):
            later = entry if given else (later_templates[k] if later_templates is not None else observer_template)
            per_round = [entry, *[later] * (rounds - 1)]
        elif isinstance(entry, Sequence) and len(entry) == rounds:
            per_round = list(entry)
        else:
            raise UsageError(
                f"templates[{k}] must be a template or a list of one template per round ({rounds}), got {entry!r:.200}"
            )
        for r, template in enumerate(per_round):
            if given:
                name = f"templates[{k}]" + (f"[{r}]" if not (isinstance(entry, str) or callable(entry)) else "")
            elif r == 0:
                name = "pioneer_template" if k == 0 else "observer_template"
            else:
                name = f"later_templates[{k}]" if later_templates is not None else "observer_template"
            check_template(
                template,
                name=name,
                position=k,
                round=r,
                prompt_fields=prompt_fields,
                private_fields=private_fields,
                num_agents=n,
            )
            table[r].append(template)
    if not knowledge_transfer:  # every position prompted as the pioneer: it must be allowed to see its fields
        for k in range(1, n):
            check_template(
                table[0][0],
                name=f"the pioneer's template at position {k} (no knowledge transfer)",
                position=k,
                prompt_fields=prompt_fields,
                private_fields=private_fields,
            )
        return [[table[0][0]] * n for _ in range(rounds)]
    return table


def given_answers(
    answers: Any, roles: Sequence[str], num_conversations: int, batched: bool, rounds: int = 1
) -> list[list[str]]:
    """The answers of a replay's first turns (``reset(options={"answers": ...})``), checked: ``k``
    lists of ``num_conversations`` strings, ``0 <= k < len(roles) * rounds`` (``[]`` for ``None``; in
    the single form a turn's answer may be one string). Turns count in the order played: the
    chain's positions in round 1, then in round 2, ..."""
    if answers is None:
        return []
    N, B = len(roles), num_conversations
    if isinstance(answers, str) or not isinstance(answers, Sequence) or not len(answers) < N * rounds:
        what = "positions" if rounds == 1 else f"turns, in the order played ({rounds} rounds)"
        raise ValueError(
            f"options['answers'] must be a list of the answers of the first k {what} (0 <= k < {N * rounds}: "
            f"at least one turn must be played), got {answers!r:.80}"
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
                f"options['answers'][{k}] (the {roles[k % N]}'s answers{'' if rounds == 1 else f' in round {k // N + 1}'}) must be {B} strings, one per conversation, "
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


def rounds_text(
    queries: Sequence[str],
    roles: Sequence[str],
    history: Sequence[tuple[int, int, Sequence[str]]],
    played: Mapping[str, Sequence[Any]],
) -> str:
    """An episode of several rounds as text, conversation by conversation: every turn's answer in
    the order played, with its task reward (``(given)`` for a replay's given turns)."""
    scores = {(t.position, t.round): t.task_reward for turns in played.values() for t in turns}
    lines = []
    for b, q in enumerate(queries):
        lines.append(f"[{b}] query:    {q!r}")
        for position, round, answers in history:
            score = scores.get((position, round))
            tail = "(given)" if score is None else f"(task reward {score[b]:+.3f})"
            lines.append(f"    {roles[position]:8s} round {round + 1}: {answers[b]!r}  {tail}")
    return "\n".join(lines)


def check_rounds(rounds: Any) -> int:
    """``rounds`` (how many times the chain plays), checked: a positive int."""
    if isinstance(rounds, bool) or not isinstance(rounds, (int, np.integer)) or rounds < 1:
        raise UsageError(f"rounds must be a positive int (how many times the chain plays; 1: once), got {rounds!r}")
    return int(rounds)


def check_private_fields(private_fields: Any, roles: Sequence[str]) -> dict[str, frozenset[int]]:
    """``private_fields`` (``{field: positions that may see it}``), checked: field names and 0-based
    positions of the chain."""
    if private_fields is None:
        return {}
    if not isinstance(private_fields, Mapping):
        raise UsageError(
            f"private_fields must map a prompt field to the positions that may see it, such as "
            f"{{'secret': [0]}}, got {private_fields!r:.80}"
        )
    checked = {}
    for name, positions in private_fields.items():
        if (
            not isinstance(name, str)
            or not name.isidentifier()
            or name in (*FIELDS, "round")
            or _NUMBERED.match(name)
            or _BY_ROUND.match(name)
        ):
            raise UsageError(f"private_fields: {name!r} cannot be a prompt field's name (a chain field or not a name)")
        if isinstance(positions, (str, int)) or not isinstance(positions, Iterable):
            raise UsageError(f"private_fields[{name!r}] must be a list of chain positions (0-based), got {positions!r}")
        positions = list(positions)
        bad = [
            p
            for p in positions
            if isinstance(p, bool) or not isinstance(p, (int, np.integer)) or not 0 <= p < len(roles)
        ]
        if bad:
            raise UsageError(
                f"private_fields[{name!r}] names position(s) {bad}, but the chain's positions are 0..{len(roles) - 1} "
                f"({', '.join(roles)})"
            )
        checked[name] = frozenset(int(p) for p in positions)
    return checked


def named_row_fields(template: Template, prompt_fields: Collection[str]) -> tuple[str, ...]:
    """The prompt-row fields a template names (none for a callable)."""
    if callable(template):
        return ()
    return tuple(dict.fromkeys(f for f in fields_of(template) if f in prompt_fields))
