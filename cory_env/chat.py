"""Chat templates: a model's chat template as the environment renders conversations through it.

In chat form (:mod:`cory_env.chat_prompts`) an agent's context is a conversation rendered by its own
tokenizer's chat template with the generation prompt, as ``apply_chat_template(messages,
add_generation_prompt=True)`` renders it and as TRL renders a conversational prompt. Templates differ
in what they accept, and :class:`ChatTemplate` finds out once per tokenizer, by rendering probes, what
a multi-party conversation needs of it, then meets each as Hugging Face's own templates expect:

- a template without a system role (Gemma 2 raises on one; others drop it) gets the system text at the
  head of the first user message, a blank line after it: what Gemma 3's own template does;
- a template that requires user and assistant to alternate (Gemma, Llama 2, Mistral) gets consecutive
  messages of one role joined into one, a blank line between them.

A template may add messages of its own (SmolLM2's and Qwen's write a default system message where a
conversation has none). A turn ends at the template's end-of-turn token (the special token it writes after an assistant
message: ``<|im_end|>``, ``<|eot_id|>``, ``<end_of_turn>``, ``<|end|>``) or at the tokenizer's EOS.

Example:
    >>> from cory_env.models import load_tokenizer
    >>> template = ChatTemplate(load_tokenizer())
    >>> template.render([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}])
    '<|im_start|>system\\nBe brief.<|im_end|>\\n<|im_start|>user\\nHi<|im_end|>\\n<|im_start|>assistant\\n'
    >>> template.end_of_turn_ids
    [2]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from cory_env.context import encode
from cory_env.errors import UsageError

#: The roles of TRL's conversational format, the only ones a prompt row's messages may take.
MESSAGE_ROLES = ("system", "user", "assistant")

_PROBE = "Zq7Wv"  # a string no template writes by itself


def check_messages(messages: Any, where: str) -> tuple[dict[str, str], ...]:
    """A prompt row's messages (TRL's conversational format: a list of ``{"role", "content"}``), checked:
    every role one of :data:`MESSAGE_ROLES`, every content a string, at least one user message."""
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence) or not messages:
        raise UsageError(
            f"{where}: messages must be a non-empty list of {{'role', 'content'}} dicts (TRL's conversational "
            f"format), got {messages!r:.80}"
        )
    checked = []
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping) or "role" not in message or "content" not in message:
            raise UsageError(f"{where}: message {i} must be a dict with 'role' and 'content', got {message!r:.80}")
        role, content = message["role"], message["content"]
        if role not in MESSAGE_ROLES:
            raise UsageError(
                f"{where}: message {i} has the role {role!r}; a prompt row's roles are {', '.join(MESSAGE_ROLES)} "
                f"(TRL's conversational format; the game's own speakers are added by the environment)"
            )
        if not isinstance(content, str):
            raise UsageError(f"{where}: message {i}'s content must be a string, got {content!r:.80}")
        checked.append({"role": role, "content": content})
    if not any(m["role"] == "user" for m in checked):
        raise UsageError(f"{where}: the messages hold no user message: a conversation opens with one")
    return tuple(checked)


class ChatTemplate:
    """A tokenizer's chat template, probed once: what it accepts, how a turn ends.

    Args:
        tokenizer: a Hugging Face tokenizer with a ``chat_template``.
        who: how messages name its model (``"agent 2 (observer)"``).
    """

    def __init__(self, tokenizer: Any, who: str = "the model"):
        if not getattr(tokenizer, "chat_template", None):
            raise UsageError(
                f"chat form needs a chat template, but the tokenizer of {who} has none: use a chat (instruct) "
                f"model, set tokenizer.chat_template, or play the raw form (no --chat; string prompts)"
            )
        self.tokenizer, self.who = tokenizer, who
        self.system = self._accepts([{"role": "system", "content": _PROBE}, {"role": "user", "content": "x"}])
        self.consecutive = self._accepts([{"role": "user", "content": "x"}, {"role": "user", "content": _PROBE}])
        #: The tokens that end a turn: the template's end-of-turn token, and the tokenizer's EOS.
        self.end_of_turn_ids = self._end_of_turn()

    def _accepts(self, messages: list[dict[str, str]]) -> bool:
        """Whether the template renders ``messages`` with the probe's text in it (it may raise, or drop a message)."""
        try:
            return _PROBE in self._apply(messages, False)
        except Exception:  # noqa: BLE001 - jinja2's TemplateError, or a template that fails another way
            return False

    def _apply(self, messages: list[dict[str, str]], generation_prompt: bool) -> str:
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt)

    def _end_of_turn(self) -> list[int]:
        asked = [{"role": "user", "content": "x"}]
        text = self.render([*asked, {"role": "assistant", "content": _PROBE}], generation_prompt=False)
        after = text[text.rindex(_PROBE) + len(_PROBE) :] if _PROBE in text else ""
        ids = encode(self.tokenizer, [after], add_special_tokens=False)[0] if after else []
        special = set(getattr(self.tokenizer, "all_special_ids", []) or []) | set(
            getattr(self.tokenizer, "added_tokens_decoder", {}) or {}
        )
        stops = [ids[0]] if ids and ids[0] in special else []
        eos = self.tokenizer.eos_token_id
        for t in [eos] if isinstance(eos, int) else list(eos or []):
            if t not in stops:
                stops.append(int(t))
        return stops

    def fitted(self, messages: Sequence[Mapping[str, str]]) -> list[dict[str, str]]:
        """``messages`` as this template takes them: the system text folded into the first user message where
        it has no system role, consecutive messages of one role joined where roles must alternate."""
        out = [dict(m) for m in messages]
        if not self.system and out and out[0]["role"] == "system":
            system = out.pop(0)["content"]
            first = next((m for m in out if m["role"] == "user"), None)
            if first is None:
                out.insert(0, {"role": "user", "content": system})
            else:
                first["content"] = f"{system}\n\n{first['content']}"
        if not self.consecutive:
            joined: list[dict[str, str]] = []
            for m in out:
                if joined and joined[-1]["role"] == m["role"]:
                    joined[-1]["content"] += f"\n\n{m['content']}"
                else:
                    joined.append(m)
            out = joined
        return out

    def render(self, messages: Sequence[Mapping[str, str]], generation_prompt: bool = True) -> str:
        """The text of ``messages`` (with the generation prompt, by default) as the template renders them; a
        template that raises on them raises a :class:`~cory_env.errors.UsageError` naming the model and its message."""
        fitted = self.fitted(messages)
        try:
            return self._apply(fitted, generation_prompt)
        except Exception as exc:  # noqa: BLE001 - jinja2's TemplateError, or a template that fails another way
            roles = " -> ".join(m["role"] for m in fitted)
            raise UsageError(
                f"the chat template of {self.who} raises on a conversation of {roles}: {type(exc).__name__}: {exc}. "
                f"Give the model a template that takes these roles (tokenizer.chat_template), or play the raw form"
            ) from exc
