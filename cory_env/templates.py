"""Prompt templates: how a query (and the pioneer's response) become an agent's context.

A template is a ``str.format`` string with the fields ``{query}`` and ``{response}``
(the pioneer's decoded response), or any callable ``(query, response) -> str``.
The pioneer's template may only use ``{query}``: it has not seen a response.

The observer's context is rendered as text and tokenized as a whole, as in the
CORY authors' code, so it reads like natural text to the model.

Example:
    >>> render(SENTIMENT_OBSERVER, query="The film", response=" was dull")
    'I can make this sentence "The film was dull" more positive: The film'
"""

from __future__ import annotations

import string
from collections.abc import Callable
from typing import Union

Template = Union[str, Callable[[str, str], str]]

#: The pioneer simply continues the review prefix (the paper's IMDB setting).
SENTIMENT_PIONEER = "{query}"
#: The observer prompt of the CORY authors' IMDB code.
SENTIMENT_OBSERVER = 'I can make this sentence "{query}{response}" more positive: {query}'

#: The paper's one-shot exemplar for GSM8K.
GSM8K_EXEMPLAR = (
    "Question: Shawn has five toys. For Christmas, he got two toys each from his mom "
    "and dad. How many toys does he have now? Answer: Shawn started with 5 toys. If he "
    "got 2 toys each from his mom and dad, then that is 4 more toys. 5 + 4 = 9."
)
GSM8K_PIONEER = GSM8K_EXEMPLAR + "\nQuestion: {query} Answer:"
GSM8K_OBSERVER = GSM8K_EXEMPLAR + "\nQuestion: {query} Reference: {response} Answer:"

FIELDS = ("query", "response")


def check_template(template: Template, *, allow_response: bool, name: str) -> None:
    """Raise ``ValueError`` if a format-string template uses fields it may not."""
    if callable(template):
        return
    if not isinstance(template, str):
        raise TypeError(f"{name} must be a format string or a callable (query, response) -> str")
    allowed = FIELDS if allow_response else ("query",)
    try:
        used = {f for _, f, _, _ in string.Formatter().parse(template) if f is not None}
    except ValueError as exc:
        raise ValueError(f"{name} {template!r} is not a valid format string: {exc}") from exc
    unknown = used - set(allowed)
    if unknown:
        raise ValueError(
            f"{name} {template!r} uses unknown field(s) {sorted(unknown)}; "
            f"allowed: {', '.join('{' + f + '}' for f in allowed)}"
        )
    if "query" not in used:
        raise ValueError(f"{name} {template!r} must contain the field {{query}}")


def render(template: Template, query: str, response: str = "") -> str:
    """Fill a template with a query and (for the observer) the pioneer's response."""
    if callable(template):
        return template(query, response)
    return template.format(query=query, response=response)
