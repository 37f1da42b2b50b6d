"""Chat form: every agent's view of the game as a multi-party conversation, through its own chat template.

In chat form (``chat=True``, a :class:`ChatForm`, or prompt rows that are messages) an agent's context is
the conversation as that agent sees it, rendered by its own tokenizer's chat template with the generation
prompt (:class:`~cory_env.chat.ChatTemplate`), as TRL renders a conversational prompt:

1. a **system message**: the position's instructions (:attr:`ChatForm.system`, a ``str.format`` string that
   may name ``{name}``, ``{query}`` and the prompt row's fields this position may see: a private field
   reaches only its positions, as in the raw form);
2. the **opening**: the prompt row's messages (TRL's conversational format, a list of ``{"role",
   "content"}``; a system message of the row's joins the position's), or for a row of text one user
   message (:attr:`ChatForm.opening`, default ``{query}``);
3. the **turns played**: the agent's own as ``assistant`` messages, each other agent's as a ``user``
   message with the speaker's name (:attr:`ChatForm.speaker_format`, default ``"{name}: {content}"``),
   its text without special tokens.

A turn ends at the template's end-of-turn token or the tokenizer's EOS. In a team of different models
each agent renders with its own template.

**Carried context.** An agent's view only grows from one of its turns to the next, so its later turn's
prompt is its last prompt and answer, in the columns they were played in, then the tokens of the text the
template adds (:meth:`~cory_env.context.Turn.carry`): a policy's KV cache over its earlier turn stays valid
(the observation's ``past_length`` is nonzero at the start of such a turn, ``num_new_tokens`` counts the
new columns). Where the template does not render the earlier view as the head of the later one (one that
trims an answer's spaces, or drops earlier reasoning) or the carried columns do not fit the window, the
turn is rendered afresh (``past_length == 0``): the text is the same, its tokens as a fresh prefill's.

Example:
    >>> from cory_env.models import load_tokenizer
    >>> from cory_env.prompts import Prompt
    >>> chat = ChatPrompts(["pioneer", "observer"], ChatForm(system=["Answer.", "Improve the answer."]))
    >>> print(chat.texts(1, 0, [Prompt("Name a colour.")], [(0, 0, ["Red."])], tokenizer=load_tokenizer())[0])
    <|im_start|>system
    Improve the answer.<|im_end|>
    <|im_start|>user
    Name a colour.<|im_end|>
    <|im_start|>user
    pioneer: Red.<|im_end|>
    <|im_start|>assistant
    <BLANKLINE>
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from cory_env.chat import ChatTemplate
from cory_env.context import PromptTooLongError, Turn, encode, prompt_lengths, tokenize_fitting
from cory_env.errors import UsageError
from cory_env.prompts import Prompt, PromptSource, _listed, check_rows_have_fields, row_fields, row_values
from cory_env.templates import check_private_fields, fields_of
from cory_env.turn_prompts import TurnPrompts

#: A turn played: ``(position, round, answers)``, both 0-based, one answer per conversation.
History = Sequence[tuple[int, int, Sequence[str]]]


@dataclass(frozen=True)
class ChatForm:
    """How a game is played as a conversation (module docstring).

    Attributes:
        system: each position's system message: one ``str.format`` string for every position, one per
            position (``None`` for none; a longer chain's later positions take the last), or ``None``: no
            system messages. Fields: ``{name}`` (the position's
            name), ``{query}``, and the prompt row's fields the position may see.
        opening: the user message a row of text opens with: ``{query}`` and the row's fields every position
            may see. A row of messages opens with its messages.
        names: each position's name in the others' views (default: the roles, ``pioneer``, ``observer``).
        speaker_format: another agent's turn as a user message: ``{name}`` and ``{content}``.
        carry: an agent's later turn continues the tokens of its earlier one (module docstring: "Carried
            context"); ``False`` renders and prefills every turn afresh (an ablation, for comparison).
    """

    system: str | Sequence[str | None] | None = None
    opening: str = "{query}"
    names: Sequence[str] | None = None
    speaker_format: str = "{name}: {content}"
    carry: bool = True


class ChatPrompts:
    """The chat-form prompts of every turn of a chain of ``roles`` playing ``rounds`` rounds.

    Args: ``form`` the :class:`ChatForm`; the others as :class:`~cory_env.PioneerObserverEnv`'s of the same
    names. The form's templates are checked now (fields a position may not see, unknown fields), and so is
    every row of a prompt list (the fields they name, the messages).
    """

    def __init__(
        self,
        roles: Sequence[str],
        form: ChatForm,
        *,
        rounds: int = 1,
        prompt_source: PromptSource | None = None,
        prompt_fields: Sequence[str] | None = None,
        private_fields: Mapping[str, Sequence[int]] | None = None,
    ):
        if not isinstance(form, ChatForm):
            raise TypeError(f"chat must be True, False, None or a ChatForm, got {form!r:.80}")
        self.roles, self.rounds, self.form = list(roles), rounds, form
        self._fitting: dict[tuple[int, int, int, int], set[str]] = {}  # the views checked, per turn and tokenizer
        N = len(self.roles)
        self.private_fields = check_private_fields(private_fields, roles)
        self.prompt_fields = row_fields(prompt_source, prompt_fields, self.private_fields) if prompt_source else ()
        # A chain shorter than the form plays its first positions (PPO: the pioneer alone); in a longer one the
        # later positions take the last system message (as the raw form's later agents take the observer's
        # template) and their roles as names.
        given = list(form.names) if form.names is not None else []
        self.names = [*given[:N], *self.roles[len(given) : N]]
        if len(set(self.names)) != N or not all(isinstance(n, str) and n for n in self.names):
            raise UsageError(f"ChatForm.names must be distinct non-empty names, one per position, got {self.names!r}")
        if form.system is None or isinstance(form.system, str):
            self.systems: list[str | None] = [form.system] * N
        elif len(form.system) > 0:
            self.systems = [form.system[min(k, len(form.system) - 1)] for k in range(N)]
        else:
            raise UsageError("ChatForm.system must be a string, None, or a non-empty list (one per position)")
        everyone = [f for f in self.prompt_fields if f not in self.private_fields or len(self.private_fields[f]) == N]
        #: The row fields each position's messages name.
        self.named = [
            self._checked(system, f"ChatForm.system[{k}]", k, ["name", "query"]) if system is not None else ()
            for k, system in enumerate(self.systems)
        ]
        opening = self._checked(form.opening, "ChatForm.opening", None, ["query"], visible=everyone)
        self.named = [tuple(dict.fromkeys([*named, *opening])) for named in self.named]
        self._opening_fields = opening
        speaker = fields_of(form.speaker_format, "ChatForm.speaker_format")
        if "content" not in speaker or set(speaker) - {"name", "content"}:
            raise UsageError(
                f"ChatForm.speaker_format must name {{content}} (and may name {{name}}), got {form.speaker_format!r}"
            )
        if prompt_source is not None:
            check_rows_have_fields(prompt_source, [self.named])
        self._templates: dict[int, ChatTemplate] = {}

    def _checked(
        self, template: Any, name: str, position: int | None, chain: list[str], visible: Sequence[str] | None = None
    ) -> tuple[str, ...]:
        """The row fields ``template`` names, after refusing a field it may not name."""
        if not isinstance(template, str):
            raise UsageError(f"{name} must be a format string, got {template!r:.80}")
        if visible is None:
            visible = [
                f for f in self.prompt_fields if f not in self.private_fields or position in self.private_fields[f]
            ]
        named = []
        for f in fields_of(template, name):
            if f in chain:
                continue
            if f in visible:
                named.append(f)
                continue
            if f in self.private_fields:
                who = ", ".join(map(str, sorted(self.private_fields[f])))
                where = f"position {position}'s" if position is not None else "every position's (the opening)"
                raise UsageError(
                    f"{name} {template!r} names {{{f}}}, a private field that only position(s) {who} may see, in "
                    f"{where} messages: name it in the system message of a position that may see it"
                )
            raise UsageError(
                f"{name} {template!r} names the unknown field {{{f}}}; it may name "
                f"{', '.join('{' + a + '}' for a in [*chain, *visible])}"
            )
        return tuple(dict.fromkeys(named))

    def template(self, tokenizer: Any, seat: int | None = None) -> ChatTemplate:
        """``tokenizer``'s :class:`~cory_env.chat.ChatTemplate`, probed once (``seat``: the agent whose model it is,
        for the messages of its errors)."""
        if id(tokenizer) not in self._templates:
            who = "the model" if seat is None else f"agent {seat + 1} ({self.roles[seat]})"
            self._templates[id(tokenizer)] = ChatTemplate(tokenizer, who)
        return self._templates[id(tokenizer)]

    def end_of_turn_ids(self, tokenizers: Sequence[Any]) -> list[list[int]]:
        """Each agent's stop tokens (``tokenizers``: one per position): its template's end of turn, and its EOS."""
        return [self.template(t, k).end_of_turn_ids for k, t in enumerate(tokenizers)]

    def render(self, views: Sequence[Sequence[Mapping[str, str]]], tokenizer: Any) -> list[str]:
        """``views`` (one conversation each) rendered by ``tokenizer``'s template, with the generation prompt."""
        template = self.template(tokenizer)
        return [template.render(view) for view in views]

    def messages(
        self, position: int, prompt: Prompt, earlier: Sequence[tuple[int, int, str]], row: int = 0
    ) -> list[dict[str, str]]:
        """The conversation as ``position`` sees it before its turn, after the turns ``earlier``
        (``(position, round, answer)``, in the order played)."""
        fields = row_values(prompt, self.named[position], row)
        out: list[dict[str, str]] = []
        system = self.systems[position]
        if system is not None:
            out.append(
                {"role": "system", "content": system.format(**fields, name=self.names[position], query=prompt.query)}
            )
        if prompt.messages is not None:
            opening = [dict(m) for m in prompt.messages]
            if out and opening[0]["role"] == "system":  # the row's system message joins the position's
                out[0]["content"] += f"\n\n{opening.pop(0)['content']}"
            out.extend(opening)
        else:
            opened = {f: fields[f] for f in self._opening_fields}
            out.append({"role": "user", "content": self.form.opening.format(**opened, query=prompt.query)})
        for k, _, answer in earlier:
            if k == position:
                out.append({"role": "assistant", "content": answer})
            else:
                said = self.form.speaker_format.format(name=self.names[k], content=answer)
                out.append({"role": "user", "content": said})
        return out

    def texts(
        self,
        position: int,
        round: int,
        prompts: Sequence[Prompt],
        history: History = (),
        blank: int | None = None,
        *,
        tokenizer: Any,
    ) -> list[str]:
        """The rendered prompts of ``position``'s turn in ``round``, one per conversation, in ``tokenizer``'s chat
        template, from the turns played before it (or, with ``blank``, as if that many turns had been played with
        empty answers)."""
        return self.render(self.views(position, prompts, history, blank), tokenizer)

    def views(
        self, position: int, prompts: Sequence[Prompt], history: History = (), blank: int | None = None
    ) -> list[list[dict[str, str]]]:
        """The conversation as ``position`` sees it before its turn (:meth:`messages`), one per conversation."""
        N = len(self.roles)
        views = []
        for b, prompt in enumerate(prompts):
            if blank is None:
                earlier = [(k, r, answers[b]) for k, r, answers in history]
            else:
                earlier = [(i % N, i // N, "") for i in range(blank)]
            views.append(self.messages(position, prompt, earlier, b))
        return views

    def conversations(
        self, position: int, prompts: Sequence[Prompt], history: History, answers: Sequence[str]
    ) -> list[list[dict[str, str]]]:
        """Each conversation as ``position`` saw it in its turn after ``history``, and its ``answers`` last: the
        turn's ``messages`` in the infos and the transcript."""
        views = self.views(position, prompts, history)
        return [[*view, {"role": "assistant", "content": answer}] for view, answer in zip(views, answers)]

    def name(self, position: int, round: int) -> str:
        """A turn in messages: its role, and its round in a game of several."""
        return self.roles[position] if self.rounds == 1 else f"{self.roles[position]} (round {round + 1})"

    def start_turn(
        self,
        texts: list[str],
        speaker: Any,
        turn: int,
        context_length: int,
        T: int,
        previous: Turn | None = None,
        answers: Sequence[str] | None = None,
    ) -> Turn:
        """The turn (number ``turn`` of the episode) of ``speaker``'s agent, prompted by ``texts``: continuing the
        agent's ``previous`` turn (whose answers' text was ``answers``) where every conversation's view only grew
        and that fits the window, else rendered afresh (its tokens checked to leave room for ``T``)."""
        tokenizer = speaker.tokenizer
        if previous is not None and answers is not None:
            rests = []
            for b, text in enumerate(texts):
                head = previous.prompt_texts[b] + answers[b]
                if not text.startswith(head):  # the template rewrote an earlier message: render afresh
                    break
                rests.append(text[len(head) :])
            else:
                new = encode(tokenizer, rests, add_special_tokens=False)
                carried = Turn.carry(previous, new, texts, T, speaker.stop_token_ids, speaker.pad_token_id)
                if carried is not None:
                    return carried
        N = len(self.roles)
        name = self.name(turn % N, turn // N)
        ids = tokenize_fitting(tokenizer, texts, name, context_length, T, add_special_tokens=False)
        return Turn.start(ids, texts, context_length, T, speaker.pad_token_id)

    def check_episode(self, prompts: Sequence[Prompt], tokenizers: Sequence[Any], context_length: int, T: int) -> None:
        """Check that every turn after the first fits the context in an episode of ``prompts`` whose answers take
        ``T`` tokens (``tokenizers``: each position's), before it is played: the view with every earlier answer
        ``T`` tokens long, and an answer."""
        N = len(self.roles)
        for turn in range(1, N * self.rounds):
            k, r = turn % N, turn // N
            texts = self.texts(k, r, prompts, blank=turn, tokenizer=tokenizers[k])
            # Prompts drawn again (a source samples with replacement) were checked before: tokenize the others.
            checked = self._fitting.setdefault((turn, id(tokenizers[k]), context_length, T), set())
            if new := [t for t in dict.fromkeys(texts) if t not in checked]:
                tokenize_fitting(
                    tokenizers[k], new, self.name(k, r), context_length, T, T * turn, add_special_tokens=False
                )
                checked.update(new)

    def check_all(self, prompts: Sequence[Prompt], tokenizers: Sequence[Any], context_length: int, T: int) -> None:
        """Check at once that every prompt fits every turn in the chat template of every one of ``tokenizers``; the
        error names how many do not, the longest, and the ``context_length`` that holds them all."""
        N = len(self.roles)
        worst: tuple[int, str, int, int] = (0, "", 0, 0)  # length needed, turn, row, how many do not fit
        for tokenizer in tokenizers:
            for turn in range(N * self.rounds):
                k, r = turn % N, turn // N
                texts = self.texts(k, r, prompts, blank=turn, tokenizer=tokenizer)
                lengths = prompt_lengths(tokenizer, texts, T * (turn + 1), add_special_tokens=False)
                over = int(np.sum(lengths > context_length))
                b = int(np.argmax(lengths))
                if lengths[b] > worst[0]:
                    worst = (int(lengths[b]), self.name(k, r), b, max(over, worst[3]))
        needed, turn_name, b, over = worst
        if needed > context_length:
            raise PromptTooLongError(
                f"{over} of {len(prompts)} prompts do not fit context_length={context_length} as the conversation "
                f"the {turn_name} sees, with every answer {T} tokens long (max_new_tokens); the longest needs {needed}, "
                f"for the query {prompts[b].query[:120]!r}. Raise context_length to {needed} (at most the model's "
                f"window), lower max_new_tokens or --rounds, or drop the longest prompts."
            )


def chat_form(chat: ChatForm | bool | None, source: PromptSource) -> ChatForm | None:
    """The chat form a game is played in (``None``: the raw form), from the environment's ``chat``: a
    :class:`ChatForm`, ``True`` (the default form), ``False``, or ``None``: chat form where the prompt rows are
    messages, as TRL applies the chat template to a conversational dataset and not to a plain-text one."""
    if chat is not None and not isinstance(chat, (bool, ChatForm)):
        raise TypeError(f"chat must be True, False, None or a ChatForm, got {chat!r:.80}")
    rows = _listed(source)
    messages = rows is not None and any(p.messages is not None for p in rows)
    if chat is False and messages:
        raise UsageError(
            "the prompt rows are messages (a conversation), which only the chat form renders: drop chat=False (or "
            "--no-chat), or give the rows as text"
        )
    if chat is None:
        return ChatForm() if messages else None
    return ChatForm() if chat is True else (chat or None)


def game_prompts(
    chat: ChatForm | None,
    roles: Sequence[str],
    templates: Any,
    pioneer_template: Any,
    observer_template: Any,
    knowledge_transfer: bool,
    **settings: Any,
) -> TurnPrompts | ChatPrompts:
    """How a game's turns are prompted: in its chat form ``chat``, :class:`ChatPrompts` (each agent's view of the
    conversation; the raw form's string-template settings refused), else the raw form's
    :class:`~cory_env.turn_prompts.TurnPrompts` (a template per turn). ``settings``: ``rounds``,
    ``later_templates``, ``prompt_source``, ``prompt_fields``, ``private_fields``."""
    if chat is None:
        return TurnPrompts(roles, templates, pioneer_template, observer_template, knowledge_transfer, **settings)
    later = settings.pop("later_templates", None)
    refuse_raw_prompts(templates, later, knowledge_transfer)
    return ChatPrompts(roles, chat, **settings)


def refuse_raw_prompts(templates: Any, later_templates: Any, knowledge_transfer: bool) -> None:
    """Refuse the raw form's string-template settings in a game played in chat form: string templates, and
    ``knowledge_transfer=False`` (in a conversation every agent sees the others' turns)."""
    given = {"templates": templates is not None, "later_templates": later_templates is not None}
    raw = [name for name, set_ in {**given, "knowledge_transfer=False": not knowledge_transfer}.items() if set_]
    if raw:
        raise UsageError(
            f"{', '.join(raw)} set the raw form's string prompts, but this game is played in chat form (every agent "
            f"sees the conversation): describe it with a ChatForm (system messages, opening) instead, or chat=False"
        )
