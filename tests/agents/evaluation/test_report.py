"""cory_agents.evaluation.report: a script rewrites its sections of a hand-written page and nothing else."""

from __future__ import annotations

import pytest

from cory_agents.evaluation.report import write_sections

A, B = ("<!-- a -->", "<!-- /a -->"), ("<!-- b -->", "<!-- /b -->")


def test_each_section_is_replaced_and_the_rest_of_the_page_kept(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(f"# Title\n\nprose\n{A[0]}\nold a\n{A[1]}\nmiddle\n{B[0]}{B[1]}\nend\n")
    write_sections(page, {A: "new a\n\nline 2", B: ""})
    assert page.read_text() == f"# Title\n\nprose\n{A[0]}\nnew a\n\nline 2\n{A[1]}\nmiddle\n{B[0]}\n\n{B[1]}\nend\n"
    write_sections(page, {A: "again"})  # rewriting is idempotent for the same body and leaves B alone
    write_sections(page, {A: "again"})
    assert page.read_text() == f"# Title\n\nprose\n{A[0]}\nagain\n{A[1]}\nmiddle\n{B[0]}\n\n{B[1]}\nend\n"


def test_a_page_without_the_markers_is_refused_before_anything_is_written(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(f"{A[0]}\nold a\n{A[1]}\n")
    with pytest.raises(ValueError, match=rf"page.md lacks the markers {B[0]} \.\.\. {B[1]}: put them where"):
        write_sections(page, {A: "new a", B: "new b"})
    assert page.read_text() == f"{A[0]}\nold a\n{A[1]}\n"  # A not written either


def test_a_result_that_cannot_be_written_is_one_error_naming_the_file(tmp_path):
    from cory_agents.evaluation.report import ReportWriteError, write_json

    (tmp_path / "taken").mkdir()  # what a full disk or a missing permission also ends in: an OSError
    with pytest.raises(ReportWriteError, match=f"could not write {tmp_path / 'taken'}: Is a directory") as raised:
        write_json(tmp_path / "taken", {"a": 1})
    assert isinstance(raised.value, OSError)  # what it was before
    assert not (tmp_path / "taken.tmp").exists()  # no half-written file left behind
