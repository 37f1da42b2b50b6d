"""The signalling game's rows: a row of your task file that can never score is refused when the file is read,
naming its line, the value and the fix (cory_env.tasks.signal.check_row through custom_task, as --task-file)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from cory_env.errors import UsageError
from cory_env.prompts import Prompt
from cory_env.tasks import custom_task
from cory_env.tasks.signal import SECRET_WORDS, check_row, signal_prompts, signal_reward

GOOD = {"query": "colour", "secret": "red", "words": "red, blue, green"}

#: Rows whose receiver can never score, and the start of what the refusal says after the row's place.
NEVER_SCORE = {
    "empty secret": (
        {"secret": "", "words": "red, blue, green"},
        "the secret is empty (''), so the receiver can never name it and the row can never score: give the row's "
        "secret, one of its words (red, blue, green)",
    ),
    "secret not among the words": (
        {"secret": "purple", "words": "red, blue, green"},
        "the secret 'purple' is not among the row's words (red, blue, green), of which the receiver names one, so "
        "the row can never score: add it to the words, or correct the secret",
    ),
    "a word twice": (
        {"secret": "blue", "words": "red, blue, red"},
        "the words name 'red' more than once (red, blue, red): list each of the K words the receiver chooses from once",
    ),
    "a secret the reward cannot read": (
        {"secret": "Red", "words": "Red, blue"},
        "the secret 'Red' is not one word of the letters a-z in lower case",
    ),
    "a secret of two words": (
        {"secret": "light blue", "words": "light blue, red"},
        "the secret 'light blue' is not one word of the letters a-z in lower case",
    ),
}


def _save(path: Path, rows: list[dict]) -> Path:
    if path.suffix == ".csv":
        with path.open("w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=["query", "secret", "words"])
            writer.writeheader()  # line 1; the rows are on lines 2, 3, ...
            writer.writerows(rows)
    else:
        path.write_text("\n".join(json.dumps(row) for row in rows) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("case", sorted(NEVER_SCORE))
@pytest.mark.parametrize("suffix", [".jsonl", ".csv"])
def test_a_row_that_can_never_score_is_refused_naming_its_line_and_the_fix(tmp_path, case, suffix):
    row, error = NEVER_SCORE[case]
    rows = [GOOD, {"query": "colour", **row}] if suffix == ".csv" else [GOOD, GOOD, {"query": "colour", **row}]
    path = _save(tmp_path / f"signal{suffix}", rows)  # the row on line 3 either way
    with pytest.raises(UsageError) as refused:
        custom_task(path, like="signal")
    assert str(refused.value).startswith(f"{path}, line 3: {error}"), str(refused.value)
    assert "\n" not in str(refused.value)


def test_json_lists_of_words_and_rows_given_as_a_list_are_checked_too(tmp_path):
    path = tmp_path / "signal.jsonl"
    path.write_text(json.dumps(GOOD) + "\n\n" + json.dumps(GOOD | {"words": ["red", "blue", "blue"]}) + "\n")
    with pytest.raises(UsageError, match=rf"^{path}, line 3: the words name 'blue' more than once \(red, blue, blue\)"):
        custom_task(path, like="signal")
    with pytest.raises(UsageError, match=r"^the data, row 1: the secret is empty"):
        custom_task([GOOD, GOOD | {"secret": ""}], like="signal")
    short = tmp_path / "short.csv"  # a row short of its words cell
    short.write_text('query,secret,words\ncolour,red,"red, blue"\ncolour,red\n')
    with pytest.raises(UsageError, match=rf"^{short}, line 3: the words are None: give the K words"):
        custom_task(short, like="signal")
    with pytest.raises(UsageError, match=r"^the data, row 0: the secret 'purple' is not among"):
        custom_task([GOOD], like="signal", test_data=[GOOD | {"secret": "purple"}])  # the held-out rows too


def test_the_rows_it_takes_can_score(tmp_path):
    path = _save(tmp_path / "signal.csv", [GOOD, {"query": "animal", "secret": "dog", "words": "cat, dog"}])
    prompts = custom_task(path, like="signal").prompts(split="train").prompts
    assert [p.metadata for p in prompts] == [
        {"secret": "red", "words": "red, blue, green"},
        {"secret": "dog", "words": "cat, dog"},
    ]
    meta = {key: [p.metadata[key] for p in prompts] for key in ("secret", "words")}
    assert signal_reward(["q", "q"], [" Red!", " a dog"], **meta, position=1) == [1.0, 1.0]


def test_every_built_in_row_passes_the_check():
    for kind, words in SECRET_WORDS.items():
        for k in range(2, len(words) + 1):
            for prompt in signal_prompts(num_secrets=k, secret_words=kind).prompts:
                check_row(prompt)  # raises for a row that can never score


def test_a_row_without_the_fields_is_left_to_the_environment():
    """The environment refuses a row that lacks a field a template names, naming the row and the field."""
    check_row(Prompt("colour", {"words": "red, blue"}))
    check_row(Prompt("colour", {"secret": "red"}))
