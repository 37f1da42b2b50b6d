"""How every turn of a game is prompted: the template of each round and position, what it names, the room it needs.

A chain of ``N`` agents that plays ``R`` rounds has ``N * R`` turns, played in order (position
``k`` of round ``r`` is turn ``r * N + k``). :class:`TurnPrompts` holds, for each, its checked
template (:func:`~cory_env.templates.chain_templates`), the prompt-row fields it names (a row
without one is refused, naming it) and the room its prompt keeps for the earlier answers it
names; it renders a turn's prompts from the turns played before it
(:func:`~cory_env.templates.render_turn`), and checks that every turn fits the context, at once
for a list of prompts or for one episode's. The environment
(:class:`~cory_env.PioneerObserverEnv`) prompts its agents through it.

Example:
    >>> from cory_env.prompts import Prompt
    >>> prompts = TurnPrompts(["pioneer", "observer"], ["{query}", "{query} / {response}"], rounds=2)
    >>> row = [Prompt("Q")]
    >>> prompts.texts(0, 1, row, history=[(0, 0, ["a"]), (1, 0, ["b"])])
    ['Q']
    >>> prompts.texts(1, 1, row, history=[(0, 0, ["a"]), (1, 0, ["b"]), (0, 1, ["c"])])
    ['Q / c']
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from cory_env.context import Turn, check_chain_prompts_fit, tokenize_fitting
from cory_env.prompts import Prompt, PromptSource, check_rows_have_fields, row_fields, row_values
from cory_env.templates import (
    SENTIMENT_OBSERVER,
    SENTIMENT_PIONEER,
    Template,
    chain_templates,
    check_private_fields,
    named_row_fields,
    render_turn,
    response_slots,
)

#: A turn played: ``(position, round, answers)``, both 0-based, one answer per conversation.
History = Sequence[tuple[int, int, Sequence[str]]]


class TurnPrompts:
    """The prompts of every turn of a chain of ``roles`` playing ``rounds`` rounds.

    Args: as :class:`~cory_env.PioneerObserverEnv`'s of the same names; ``prompt_source`` gives the
    prompt fields a list's rows hold (when ``prompt_fields`` is not given) and, for a list, is checked
    at once for every field a template names.
    """

    def __init__(
        self,
        roles: Sequence[str],
        templates: Sequence[Template | Sequence[Template]] | None = None,
        pioneer_template: Template = SENTIMENT_PIONEER,
        observer_template: Template = SENTIMENT_OBSERVER,
        knowledge_transfer: bool = True,
        *,
        rounds: int = 1,
        later_templates: Sequence[Template] | None = None,
        prompt_source: PromptSource | None = None,
        prompt_fields: Sequence[str] | None = None,
        private_fields: Mapping[str, Sequence[int]] | None = None,
    ):
        self.roles, self.rounds = list(roles), rounds
        self.private_fields = check_private_fields(private_fields, roles)
        #: Prompts of a later turn known to fit, by (turn, tokenizer, context length, turn limit): not tokenized again.
        self._fitting: dict[tuple[int, int, int, int], set[str]] = {}
        self.prompt_fields = row_fields(prompt_source, prompt_fields, self.private_fields)
        #: The template of every turn, ``[round][position]``.
        self.table = chain_templates(
            roles,
            templates,
            pioneer_template,
            observer_template,
            knowledge_transfer,
            rounds=rounds,
            later_templates=later_templates,
            prompt_fields=self.prompt_fields,
            private_fields=self.private_fields,
        )
        N = len(roles)
        #: Room each turn's prompt keeps for the earlier answers it names, in units of max_new_tokens.
        self.slots = [
            [response_slots(t, k, r * N + k) if knowledge_transfer else 0 for k, t in enumerate(row)]
            for r, row in enumerate(self.table)
        ]
        #: The prompt-row fields each turn's template names.
        self.named = [[named_row_fields(t, self.prompt_fields) for t in row] for row in self.table]
        check_rows_have_fields(prompt_source, self.named)

    def texts(
        self,
        position: int,
        round: int,
        prompts: Sequence[Prompt],
        history: History = (),
        blank: int | None = None,
        tokenizer: Any = None,
    ) -> list[str]:
        """The prompts of ``position``'s turn in ``round``, one per prompt (conversation), from the turns
        played before it (or, with ``blank``, as if that many turns had been played with empty answers). The
        text is every model's (``tokenizer``, which a chat form's template needs, is not used)."""
        template, named = self.table[round][position], self.named[round][position]
        N = len(self.roles)
        texts = []
        for b, prompt in enumerate(prompts):
            if blank is None:
                earlier = [(k, r, answers[b]) for k, r, answers in history]
            else:
                earlier = [(i % N, i // N, "") for i in range(blank)]
            texts.append(render_turn(template, prompt.query, earlier, round, row_values(prompt, named, b)))
        return texts

    def start_turn(self, texts: list[str], speaker: Any, turn: int, context_length: int, T: int, *_: Any) -> Turn:
        """The turn (number ``turn`` of the episode) of ``speaker``'s agent, prompted by ``texts``, tokenized and
        checked to leave room for an answer of ``T`` tokens (:class:`~cory_env.context.Turn`)."""
        role = self.roles[turn % len(self.roles)]
        ids = tokenize_fitting(speaker.tokenizer, texts, role, context_length, T)
        return Turn.start(ids, texts, context_length, T, speaker.pad_token_id)

    def name(self, position: int, round: int) -> str:
        """A turn in messages: its role, and its round in a game of several."""
        return self.roles[position] if self.rounds == 1 else f"{self.roles[position]} (round {round + 1})"

    def check_episode(self, prompts: Sequence[Prompt], tokenizers: Sequence[Any], context_length: int, T: int) -> None:
        """Check that every turn after the first fits the context in an episode of ``prompts`` whose
        answers take ``T`` tokens (``tokenizers``: each position's), before it is played."""
        N = len(self.roles)
        for turn in range(1, N * self.rounds):
            k, r = turn % N, turn // N
            texts = self.texts(k, r, prompts, blank=turn)
            # Prompts drawn again (a source samples with replacement) were checked before: tokenize the others.
            checked = self._fitting.setdefault((turn, id(tokenizers[k]), context_length, T), set())
            if new := [t for t in dict.fromkeys(texts) if t not in checked]:
                tokenize_fitting(tokenizers[k], new, self.name(k, r), context_length, T, T * self.slots[r][k])
                checked.update(new)

    def check_all(
        self, prompts: Sequence[Prompt], tokenizers: Sequence[Any], context_length: int, max_new_tokens: int
    ) -> None:
        """Check at once that every prompt fits every turn in every one of ``tokenizers``
        (:func:`~cory_env.context.check_chain_prompts_fit`)."""
        N = len(self.roles)
        turns = []
        for turn in range(N * self.rounds):
            k, r = turn % N, turn // N
            turns.append((self.name(k, r), self.texts(k, r, prompts, blank=turn), self.slots[r][k]))
        queries = [p.query for p in prompts]
        check_chain_prompts_fit(turns, queries, tokenizers, context_length, max_new_tokens)
