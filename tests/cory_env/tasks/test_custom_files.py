"""Prompt files as people save them: a UTF-8 byte-order mark (Notepad, Excel's "CSV UTF-8") and
Windows line ends (CRLF) give the same prompts as the plain file."""

from __future__ import annotations

import codecs
import json
from pathlib import Path

import pytest

from cory_env.prompts import Prompt
from cory_env.tasks import custom_prompts, custom_task

# A quoted comma, a value that CSV keeps as written ("007"), and a character outside ASCII.
ROWS = [
    {"query": "Add 1,000 and 7, please", "answer": "1007", "level": "easy"},
    {"query": "Café au lait costs 3; two cost?", "answer": "006", "level": "hard, really"},
]
FIRST = Prompt("Add 1,000 and 7, please", {"answer": "1007", "level": "easy"})
LAST = Prompt("Café au lait costs 3; two cost?", {"answer": "006", "level": "hard, really"})

PLAIN_JSONL = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in ROWS)
PLAIN_CSV = (
    'query,answer,level\n"Add 1,000 and 7, please",1007,easy\n"Café au lait costs 3; two cost?",006,"hard, really"\n'
)

VARIANTS = {
    "bom": lambda text: codecs.BOM_UTF8 + text.encode("utf-8"),
    "crlf": lambda text: text.replace("\n", "\r\n").encode("utf-8"),
    "bom+crlf": lambda text: codecs.BOM_UTF8 + text.replace("\n", "\r\n").encode("utf-8"),
}


def _save(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("suffix, plain", [(".jsonl", PLAIN_JSONL), (".csv", PLAIN_CSV)])
def test_a_bom_and_crlf_give_the_plain_files_prompts(tmp_path, suffix, plain, variant):
    expected = custom_prompts(_save(tmp_path / f"plain{suffix}", plain.encode("utf-8"))).prompts
    assert expected == [FIRST, LAST]  # the plain file itself reads as written

    saved = _save(tmp_path / f"{variant}{suffix}", VARIANTS[variant](plain))
    assert saved.read_bytes() != plain.encode("utf-8")  # the variant really differs on disk
    prompts = custom_prompts(saved).prompts
    assert prompts == expected
    assert list(prompts[0].metadata) == ["answer", "level"]  # no '\ufeffquery' column took the query's place
    assert prompts[1].metadata["level"] == "hard, really"  # the last field of a row keeps no '\r'
    # The same file through custom_task, as --task-file reads it.
    assert custom_task(saved, like="gsm8k").prompts(split="train").prompts == expected


def test_a_bom_file_with_a_bad_line_still_names_the_line(tmp_path):
    path = _save(tmp_path / "bad.jsonl", codecs.BOM_UTF8 + b'{"query": "ok"}\r\n{"query": \r\n')
    with pytest.raises(ValueError, match=r"bad\.jsonl, line 2: not valid JSON"):
        custom_prompts(path)


def test_a_bom_csv_without_the_query_column_lists_the_columns_cleanly(tmp_path):
    path = _save(tmp_path / "q.csv", codecs.BOM_UTF8 + b"question,answer\r\nWhy?,42\r\n")
    with pytest.raises(ValueError, match=r"no column 'query'; the columns are 'question', 'answer'\."):
        custom_prompts(path)


@pytest.mark.parametrize("suffix, plain", [(".jsonl", PLAIN_JSONL), (".csv", PLAIN_CSV)])
def test_a_file_that_is_not_utf8_says_how_to_save_it(tmp_path, suffix, plain):
    """Excel's "Unicode Text" and some editors' "Unicode" write UTF-16."""
    path = _save(tmp_path / f"wide{suffix}", plain.encode("utf-16"))
    with pytest.raises(ValueError, match=rf"wide\{suffix}, line 1: not UTF-8 text .*save it as UTF-8") as err:
        custom_prompts(path)
    assert "\n" not in str(err.value)
