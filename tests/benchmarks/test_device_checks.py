"""The device check scripts (run when a GPU is lent, with a few minutes of it) refuse an --out they could not
write before they start, not after the run: the results would be lost."""

from __future__ import annotations

import importlib

import pytest

from cory_env.errors import UsageError

SCRIPTS = ["compile_check", "cuda_check", "fsdp_check", "multi_device_check", "update_passes"]


@pytest.mark.parametrize("name", SCRIPTS)
def test_an_out_that_is_a_folder_is_refused_before_the_run(name, tmp_path):
    main = importlib.import_module(f"benchmarks.{name}").main
    with pytest.raises(UsageError, match=rf"--out {tmp_path} is a folder: .*--out {tmp_path}/{name}\.json"):
        main(["--out", str(tmp_path)])
    assert list(tmp_path.iterdir()) == []  # nothing was written


def test_an_out_below_a_file_is_refused(tmp_path):
    (tmp_path / "results").write_text("a user's file")
    main = importlib.import_module("benchmarks.update_passes").main
    with pytest.raises(UsageError, match="is below .*results, which is a file"):
        main(["--out", str(tmp_path / "results" / "passes.json")])
    assert (tmp_path / "results").read_text() == "a user's file"
