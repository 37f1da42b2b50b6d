"""A streamed prompt file (cory_env.tasks.prompt_file): the rows a list of the same rows gives, drawn with the
same random numbers; the checks a list's rows get, naming the line; a small index instead of the rows."""

from __future__ import annotations

import csv
import json
import pickle

import numpy as np
import pytest

from cory_env.errors import UsageError
from cory_env.prompts import PromptList, check_rows_have_fields, row_fields
from cory_env.tasks import custom as custom_module
from cory_env.tasks.custom import custom_prompts, custom_task
from cory_env.tasks.prompt_file import PromptFile

ROWS = [
    {"query": "colour one", "secret": "red", "words": "red, blue, green"},
    {"query": "colour, with a comma\nand a line break", "secret": "blue", "words": "red, blue, green"},
    {"query": "colour ünï", "secret": "green", "words": "red, blue, green", "note": "only here"},
]


def write(path, rows, bom: bool = False, crlf: bool = False) -> None:
    ending = "\r\n" if crlf else "\n"
    if path.suffix == ".jsonl":
        text = ending.join(json.dumps(r, ensure_ascii=False) for r in rows) + ending
        path.write_bytes((b"\xef\xbb\xbf" if bom else b"") + text.encode())
        return
    with path.open("w", encoding="utf-8-sig" if bom else "utf-8", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["query", "secret", "words", "note"], lineterminator=ending)
        writer.writeheader()
        writer.writerows(rows)


@pytest.fixture
def streamed(monkeypatch):
    """custom_prompts streams a file of more than 2 rows (instead of 10,000)."""
    monkeypatch.setattr(custom_module, "STREAMED_ROWS", 2)


@pytest.mark.parametrize("suffix", [".jsonl", ".csv"])
@pytest.mark.parametrize(("bom", "crlf"), [(False, False), (True, True)])
def test_a_streamed_file_draws_the_rows_a_list_draws(tmp_path, streamed, suffix, bom, crlf):
    path = tmp_path / f"rows{suffix}"
    write(path, ROWS, bom=bom, crlf=crlf)
    source = custom_prompts(path)
    assert isinstance(source, PromptFile) and len(source) == 3
    again = custom_prompts(path)  # the same file read twice gives the same rows
    listed = PromptList(source.rows(range(3)))
    assert [p.query for p in listed.prompts] == [r["query"] for r in ROWS]
    if suffix == ".csv":  # a CSV reads every column, empty where a row has no value
        assert listed.prompts[0].metadata == {"secret": "red", "words": "red, blue, green", "note": ""}
    else:
        assert listed.prompts[2].metadata == {k: v for k, v in ROWS[2].items() if k != "query"}
    for seed in range(3):
        drawn = source.sample(np.random.default_rng(seed), 7)
        assert drawn == listed.sample(np.random.default_rng(seed), 7)
        assert drawn == again.sample(np.random.default_rng(seed), 7)


def test_a_small_file_is_read_into_a_list_as_before(tmp_path):
    path = tmp_path / "rows.jsonl"
    write(path, ROWS)
    source = custom_prompts(path)
    assert isinstance(source, PromptList) and [p.query for p in source.prompts] == [r["query"] for r in ROWS]


def test_the_fields_templates_may_name_and_a_row_without_one(tmp_path, streamed):
    path = tmp_path / "rows.jsonl"
    write(path, ROWS)
    source = custom_prompts(path)
    assert source.fields == ("secret", "words", "note") and source.fields_in_every_row == {"secret", "words"}
    assert row_fields(source, None) == ("note", "secret", "words")
    check_rows_have_fields(source, [[["secret", "words"]]])  # every row has them
    with pytest.raises(UsageError, match=r"prompt row 0 \(query 'colour one'\) has no field 'note'"):
        check_rows_have_fields(source, [[["note"]]])


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("not json", r"rows.jsonl, line 3: not valid JSON"),
        ("[1, 2]", r"rows.jsonl, line 3: each line must be a JSON object"),
        ('{"query": ""}', r"rows.jsonl, line 3: the query must be a non-empty string"),
        ('{"prompt": "x"}', r"rows.jsonl, line 3: no column 'query'; the columns are 'prompt'"),
    ],
)
def test_a_bad_row_is_refused_naming_its_line(tmp_path, streamed, line, expected):
    path = tmp_path / "rows.jsonl"
    path.write_text("\n".join([json.dumps(ROWS[0]), "", line, json.dumps(ROWS[1])]) + "\n")
    with pytest.raises(UsageError, match=expected):
        custom_prompts(path)


def test_a_row_the_task_can_never_score_is_refused_naming_its_line(tmp_path, streamed):
    path = tmp_path / "rows.csv"
    write(path, [*ROWS, {"query": "last", "secret": "purple", "words": "red, blue, green"}])
    with pytest.raises(UsageError, match=r"rows.csv, line 6: the secret 'purple' is not among the row's words"):
        custom_task(path, like="signal")


def test_a_file_that_is_not_utf8_is_refused_naming_its_line(tmp_path, streamed):
    path = tmp_path / "rows.jsonl"
    path.write_bytes(json.dumps(ROWS[0]).encode() + b'\n{"query": "caf\xe9"}\n')
    with pytest.raises(UsageError, match=r"rows.jsonl, line 2: not UTF-8 text .* save it as UTF-8"):
        custom_prompts(path)


def test_the_index_is_all_a_streamed_file_keeps(tmp_path, streamed):
    """8 bytes a row for where it starts and 8 for its line, however long the rows are."""
    path = tmp_path / "rows.jsonl"
    long_rows = [{"query": "word " * 2000, "secret": "red", "words": "red, blue"} for _ in range(50)]
    write(path, long_rows)
    source = custom_prompts(path)
    assert source.starts.nbytes + source.lines.nbytes == 50 * 16
    assert len(pickle.dumps(source)) < 5_000  # the rows (about 500 KB) are not held
    assert source.row(49).query == long_rows[49]["query"] and source.place(49) == f"{path}, line 50"
