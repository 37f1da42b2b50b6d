"""GSM8K reward: 1 if the answer's final number equals the reference answer, else 0.

The CORY paper scores GSM8K answers by "the last number in the answer". Models write
numbers in many ways, so the checker reads them the way a person would:

* thousands separators are dropped: ``1,000`` is 1000 (a comma not followed by
  exactly three digits separates numbers: ``1, 2`` is 1 then 2);
* currency signs and units around a number are ignored: ``$18``, ``18 dollars``, ``18%``;
* trailing punctuation is not part of the number: ``18.`` is 18;
* ``-3`` is negative, but the ``-`` of ``5-3`` is a subtraction (the last number is 3);
* numbers compare by value: ``2.50`` equals ``2.5``, ``18.0`` equals ``18``;
* if the response has a ``#### N`` line (GSM8K's own answer format), ``N`` is the
  answer, whatever follows;
* text after a new ``Question:`` is ignored: with the paper's few-shot prompt a model
  often goes on to invent the next exemplar, whose numbers are not its answer.

Example:
    >>> last_number("So she paid $1,250.50 in total.")
    '1250.5'
    >>> gsm8k_reward(["q"], ["5 + 4 = 9."], answer=["9"])
    [1.0]
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Any

#: A number: optional sign (not after a digit, letter or ")", so "5-3" is a subtraction),
#: an optional currency sign, then digits with optional comma thousands groups and decimals.
_NUMBER = re.compile(
    r"(?:(?<![\w)])(?P<sign>[-\u2212]))?"
    r"(?:[$\u00a3\u20ac]\s?)?"
    r"(?P<digits>\d{1,3}(?:,\d{3})+(?![\d])(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+)"
)
_FINAL_ANSWER = re.compile(r"####")
_NEXT_QUESTION = re.compile(r"\bQuestion\s*:")


def canonical_number(text: str) -> str:
    """A number's canonical string: ``"1,000"`` -> ``"1000"``, ``"$2.50"`` -> ``"2.5"``, ``"-0"`` -> ``"0"``.

    Raises:
        ValueError: ``text`` is not a single number.
    """
    match = _NUMBER.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"not a number: {text!r}")
    return _canonical(match)


def _canonical(match: re.Match[str]) -> str:
    digits = match.group("digits").replace(",", "")
    try:
        value = Decimal(digits)
    except InvalidOperation as exc:  # pragma: no cover - the pattern only admits decimals
        raise ValueError(f"not a number: {match.group(0)!r}") from exc
    if match.group("sign") and value != 0:
        value = -value
    text = format(value.normalize(), "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def extract_numbers(text: str) -> list[str]:
    """Every number in ``text``, in order, as canonical strings (see :func:`canonical_number`)."""
    return [_canonical(m) for m in _NUMBER.finditer(text)]


def last_number(text: str) -> str | None:
    """The number a response gives as its answer, or ``None`` if it has none.

    The first number after ``####`` if there is one; otherwise the last number before
    any new ``Question:``.
    """
    marker = _FINAL_ANSWER.search(text)
    if marker is not None:
        after = extract_numbers(text[marker.end() :])
        if after:
            return after[0]
        text = text[: marker.start()]
    following = _NEXT_QUESTION.search(text)
    if following is not None:
        text = text[: following.start()]
    numbers = extract_numbers(text)
    return numbers[-1] if numbers else None


def is_correct(response: str, answer: Any) -> bool:
    """Whether ``response``'s final number (:func:`last_number`) equals ``answer`` by value."""
    found = last_number(response)
    return found is not None and Decimal(found) == Decimal(canonical_number(str(answer)))


def gsm8k_reward(queries: list[str], responses: list[str], *, answer: list[Any] | None = None, **_: Any) -> list[float]:
    """1.0 for each response whose final number equals its reference ``answer``, else 0.0.

    ``answer`` comes from the prompts' metadata (the ``gsm8k`` task puts the number
    after ``####`` of each reference solution there).
    """
    if answer is None:
        raise ValueError(
            "the gsm8k reward needs reference answers: prompts with metadata['answer'] "
            "(the gsm8k task's prompts have it; for a custom task, give the data an 'answer' column)"
        )
    if not (len(queries) == len(responses) == len(answer)):
        raise ValueError(f"got {len(queries)} queries, {len(responses)} responses and {len(answer)} answers")
    return [float(is_correct(r, a)) for r, a in zip(responses, answer)]
