"""A write that finds no room is one line that names the file and the room, and leaves nothing half-written; what a
killed write left is removed by name, and only that (cory_env.write_failures)."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from cory_env.write_failures import (
    OutOfSpaceError,
    amount,
    is_held,
    remove_leftovers,
    temporary_name,
    write_whole,
    writing,
)
from tests.support import ROOT
from tests.support.commands import command_env, under_file_size_limit

#: Under a file-size limit of 64 KiB: a file replaced whole, and a safetensors file, each of 400 KB.
PAST_THE_LIMIT = """
import json, sys
from pathlib import Path
import torch
from safetensors.torch import save_file
from cory_env.write_failures import OutOfSpaceError, write_whole, writing
folder, messages = Path(sys.argv[1]), []
for path, write in (
    (folder / "report.md", lambda path: write_whole(path, b"x" * 400_000)),
    (folder / "weights.safetensors", lambda path: save_file({"w": torch.ones(100_000)}, str(path))),
):
    try:
        with writing(path, 400_000):
            write(path)
    except OutOfSpaceError as exc:
        messages.append(str(exc))
print(json.dumps(messages))
"""


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full (a device every write to fails: ENOSPC)")
def test_a_full_disk_names_the_file_the_free_space_and_the_bytes_to_write(tmp_path):
    with pytest.raises(OutOfSpaceError) as failed:
        with writing(tmp_path / "report.md", 3 * 2**20), open("/dev/full", "wb") as disk:
            disk.write(b"x" * 10)  # what a full disk answers a write (at the flush)
    message = str(failed.value)
    assert message.startswith(f"could not write {tmp_path / 'report.md'}: No space left on device (")
    assert message.endswith(
        "free there, 3 MiB to write); nothing was half-written: make room, then run the command again"
    )
    assert "\n" not in message and isinstance(failed.value.__cause__, OSError)


def test_past_the_file_size_limit_a_file_is_written_whole_or_not_at_all(tmp_path):
    """A real write past ``ulimit -f`` (EFBIG, and safetensors' "File too large"): the message names the file, the
    limit and the bytes; the file it was to replace is as it was, and no temporary file is left."""
    (tmp_path / "report.md").write_text("the report before\n")
    result = under_file_size_limit(64 * 1024, sys.executable, "-c", PAST_THE_LIMIT, str(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    report, weights = json.loads(result.stdout)
    for path, message in ((tmp_path / "report.md", report), (tmp_path / "weights.safetensors", weights)):
        assert message == (
            f"could not write {path}: File too large (the file-size limit, ulimit -f, is 64 KiB; 391 KiB to write); "
            f"nothing was half-written: raise the limit, then run the command again"
        )
    assert (tmp_path / "report.md").read_text() == "the report before\n"
    assert not (tmp_path / "report.md.tmp").exists()


def test_any_other_failure_goes_on_as_it_was_and_leaves_no_temporary_file(tmp_path):
    (tmp_path / "taken").mkdir()
    with pytest.raises(IsADirectoryError), writing(tmp_path / "taken"):
        write_whole(tmp_path / "taken", "a file where a folder is")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"]


def test_amounts_read_as_people_read_them():
    assert [amount(n) for n in (900, 64 * 1024, 1536 * 1024, 514 * 2**20, 1.5 * 2**30)] == [
        "900 bytes",
        "64 KiB",
        "1.5 MiB",
        "514 MiB",
        "1.5 GiB",
    ]


def test_what_a_killed_write_left_is_removed_by_its_exact_name_and_one_line_says_so(tmp_path, caplog):
    left = [Path(tempfile.mkdtemp(prefix=".cory-export-", dir=tmp_path)) for _ in range(3)]  # the names it gives
    (left[0] / "model.safetensors").write_bytes(b"half a model")
    _, file = tempfile.mkstemp(prefix=".tmp-", suffix=".safetensors", dir=tmp_path)
    users = [".cory-export-notes", ".cory-export-abcd12345", ".cory-export-ABCD1234", ".tmp-notes.txt", "thesis.txt"]
    for name in users:
        (tmp_path / name).write_text("mine")
    with caplog.at_level(logging.WARNING, logger="cory_env.write_failures"):
        removed = remove_leftovers(tmp_path, temporary_name(".cory-export-"), "an export")
    assert removed == sorted(left) and not any(p.exists() for p in left)
    assert [r.getMessage() for r in caplog.records] == [
        f"removed what an export that was killed left: {', '.join(map(str, sorted(left)))}"
    ]
    assert remove_leftovers(tmp_path, temporary_name(".tmp-", ".safetensors"), "a checkpoint write") == [Path(file)]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(users)  # the user's look-alikes stay
    assert all((tmp_path / name).read_text() == "mine" for name in users)
    caplog.clear()
    assert remove_leftovers(tmp_path, temporary_name(".tmp-", ".safetensors"), "a checkpoint write") == []
    assert not caplog.records  # nothing left: nothing said


@pytest.mark.skipif(sys.platform == "win32", reason="a folder is held with flock")
def test_the_temporary_folder_of_a_live_writer_is_left_to_it(tmp_path):
    folder = Path(tempfile.mkdtemp(prefix=".cory-export-", dir=tmp_path))
    gate = tmp_path / "holding"
    code = (
        "import sys, time; from cory_env.write_failures import held\n"
        "with held(sys.argv[1]):\n    open(sys.argv[2], 'w').close(); time.sleep(600)\n"
    )
    writer = subprocess.Popen([sys.executable, "-c", code, str(folder), str(gate)], cwd=ROOT, env=command_env())
    try:
        while not gate.exists():
            assert writer.poll() is None, "the writer ended before it held its folder"
            time.sleep(0.05)
        assert is_held(folder)
        assert remove_leftovers(tmp_path, temporary_name(".cory-export-"), "an export", in_use=is_held) == []
        assert folder.is_dir()
    finally:
        writer.kill()
        writer.wait(timeout=60)
    assert not is_held(folder)  # the operating system let go when the writer was killed
    assert remove_leftovers(tmp_path, temporary_name(".cory-export-"), "an export", in_use=is_held) == [folder]
