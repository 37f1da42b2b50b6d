"""Checkpoint files: written whole or not at all, the newest kept, readable as a plain file is."""

from __future__ import annotations

import os
import threading

import pytest
import torch

from agents.checkpoint import latest_checkpoint, list_checkpoints, load_checkpoint, save_checkpoint


def test_the_newest_checkpoint_replaces_the_older_one_with_plain_permissions(tmp_path):
    save_checkpoint(tmp_path, 0, {"iteration": 1, "w": torch.ones(3)})
    path = save_checkpoint(tmp_path, 1, {"iteration": 2, "w": torch.zeros(3)})
    assert list_checkpoints(tmp_path) == [path] and latest_checkpoint(tmp_path) == path
    assert load_checkpoint(path)["iteration"] == 2
    umask = os.umask(0)
    os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask


def test_a_failed_save_leaves_the_previous_checkpoint_and_no_partial_file(tmp_path):
    first = save_checkpoint(tmp_path, 0, {"iteration": 1})
    with pytest.raises(Exception):
        save_checkpoint(tmp_path, 1, {"iteration": 2, "unpicklable": threading.Lock()})
    assert list_checkpoints(tmp_path) == [first]
    assert [p.name for p in first.parent.iterdir()] == [first.name]  # no temporary file left


def test_temporary_files_are_never_taken_for_checkpoints(tmp_path):
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / ".tmp-abc.pt").write_bytes(b"half written")
    assert latest_checkpoint(tmp_path) is None
