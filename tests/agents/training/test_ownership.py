"""cory-env deletes, renames or overwrites only what it wrote (cory_agents.training.ownership): in every place
it writes, a user's file planted there is left alone, or the command refuses in one line naming it; what a write
killed midway left is removed by the next write there, and a user's file of a look-alike name stays."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from transformers import AutoModelForCausalLM

from cory_agents.cli import export as cory_export
from cory_agents.cli import train as cory_train
from cory_agents.evaluation.reward_benchmark import BenchmarkConfig, _prepare
from cory_agents.training.checkpoint import TEMPORARY as CHECKPOINT_TEMPORARY
from cory_agents.training.config import TrainConfig
from cory_agents.training.export import EXPORT_TEMPORARY, save_policies
from cory_agents.training.ownership import MANIFEST, NotOursError, remove_run
from cory_agents.training.run_lock import RunFolderInUseError, RunLock
from cory_env import models
from tests.support.commands import killed_midway, the_error, toy_args
from tests.support.toy import toy_tokenizer
from tests.support.user_files import THESIS, plant, tree


@pytest.fixture(scope="module")
def trained(toy_model, tmp_path_factory) -> Path:
    """A toy CORY run of one iteration: a checkpoint to export."""
    out = tmp_path_factory.mktemp("run") / "cory"
    cory_train.main(toy_args(toy_model, out, "--algo", "cory"))
    return out


@pytest.fixture(scope="module")
def policy(toy_model):
    return AutoModelForCausalLM.from_pretrained(toy_model), toy_tokenizer()


# ------------------------------------------------------------------------------------------- export


def test_an_export_writes_beside_a_users_files_and_replaces_only_its_own(policy, tmp_path):
    model, tokenizer = policy
    thesis = plant(tmp_path / "thesis.txt")
    paths = save_policies({"llm_0": model}, {"llm_0": tokenizer}, tmp_path)
    assert thesis.read_text() == THESIS
    assert paths["llm_0"] == tmp_path / "llm_0"
    listed = json.loads((tmp_path / "llm_0" / MANIFEST).read_text())["files"]
    assert "config.json" in listed and sorted(listed) == sorted(set(tree(tmp_path / "llm_0")) - {MANIFEST})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["llm_0", "thesis.txt"]  # no temporary folder left
    save_policies({"llm_0": model}, {"llm_0": tokenizer}, tmp_path)  # an export of its own: replaced
    assert sorted(p.name for p in tmp_path.iterdir()) == ["llm_0", "thesis.txt"]
    assert AutoModelForCausalLM.from_pretrained(tmp_path / "llm_0").config.vocab_size == model.config.vocab_size


def test_an_export_of_cory_env_0_2_without_a_manifest_is_replaced(policy, tmp_path):
    model, tokenizer = policy
    save_policies({"llm_0": model}, {"llm_0": tokenizer}, tmp_path)
    (tmp_path / "llm_0" / MANIFEST).unlink()  # what 0.2 wrote: save_pretrained's files alone
    save_policies({"llm_0": model}, {"llm_0": tokenizer}, tmp_path)
    assert (tmp_path / "llm_0" / MANIFEST).exists()
    (tmp_path / "llm_0" / MANIFEST).unlink()
    plant(tmp_path / "llm_0" / "notes.txt")  # and a file of the user's beside them: refused
    with pytest.raises(NotOursError, match="no cory-export.json"):
        save_policies({"llm_0": model}, {"llm_0": tokenizer}, tmp_path)
    assert (tmp_path / "llm_0" / "notes.txt").read_text() == THESIS


@pytest.mark.parametrize("planted", ["llm_0/notes.txt", "llm_0/thesis.safetensors"])
def test_an_export_refuses_a_learner_folder_it_did_not_write_whole(policy, tmp_path, planted):
    model, tokenizer = policy
    if planted == "llm_0/notes.txt":  # an earlier export, with a file of the user's put inside it
        save_policies({"llm_0": model}, {"llm_0": tokenizer}, tmp_path)
    plant(tmp_path / planted)  # else: a folder of the user's own that happens to be named llm_0
    before = tree(tmp_path)
    with pytest.raises(NotOursError, match="leaves it alone") as refused:
        save_policies({"llm_0": model}, {"llm_0": tokenizer}, tmp_path)
    assert str(tmp_path / "llm_0") in str(refused.value)
    assert tree(tmp_path) == before and sorted(p.name for p in tmp_path.iterdir()) == ["llm_0"]


def test_cory_export_into_a_users_folder_keeps_the_users_file(run, trained, tmp_path):
    thesis = plant(tmp_path / "out" / "thesis.txt")
    cory_export.main(["--checkpoint", str(trained), "--out", str(tmp_path / "out")])
    cory_export.main(["--checkpoint", str(trained), "--out", str(tmp_path / "out")])  # again: replaces its own
    assert thesis.read_text() == THESIS
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["llm_0", "llm_1", "thesis.txt"]


@pytest.mark.parametrize("where", ["a file", "below a file"])
def test_cory_export_out_a_file_is_one_usage_error(run, trained, tmp_path, where):
    thesis = plant(tmp_path / "thesis.txt")
    out = thesis if where == "a file" else thesis / "models"
    code, err = run(cory_export.main, "cory-export", ["--checkpoint", str(trained), "--out", str(out)])
    assert code == 2
    assert str(thesis) in the_error(err, "cory-export") and "is a file" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["thesis.txt"] and thesis.read_text() == THESIS


# ---------------------------------------------------------------------------------------------- train


def test_a_run_refuses_to_overwrite_a_users_file_of_a_name_it_writes(run, toy_model, tmp_path):
    metrics = plant(tmp_path / "out" / "metrics.csv")
    code, err = run(cory_train.main, "cory-train", toy_args(toy_model, tmp_path / "out"))
    assert code == 2 and str(metrics) in the_error(err, "cory-train")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["metrics.csv"] and metrics.read_text() == THESIS


@pytest.mark.parametrize("where", ["a file", "below a file"])
def test_a_runs_out_a_file_is_one_usage_error(run, toy_model, tmp_path, where):
    thesis = plant(tmp_path / "thesis.txt")
    code, err = run(cory_train.main, "cory-train", toy_args(toy_model, thesis if where == "a file" else thesis / "run"))
    assert code == 2 and "--out" in the_error(err, "cory-train") and str(thesis) in err
    assert thesis.read_text() == THESIS


def test_a_run_writes_beside_a_users_files_and_overwrite_keeps_them(toy_model, tmp_path):
    out = tmp_path / "out"
    notes, kept_checkpoint_note = plant(out / "notes.txt"), plant(out / "checkpoints" / "README")
    args = toy_args(toy_model, out, "--save-model", "true")
    cory_train.main(args)
    cory_train.main([*args, "--overwrite"])  # start over: its checkpoints and its model go, the user's files stay
    assert notes.read_text() == THESIS and kept_checkpoint_note.read_text() == THESIS
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["README", "iter_000000.safetensors"]
    plant(out / "model" / "llm_0" / "notes.txt")  # the user's file inside the exported model: refused
    with pytest.raises(NotOursError, match="notes.txt"):
        cory_train.main([*args, "--overwrite"])


# ---------------------------------------------------------------------------------------------- bench


def test_bench_overwrite_deletes_only_what_its_runs_wrote(trained, tmp_path):
    out = tmp_path / "bench"
    _prepare(out, TrainConfig(report_to="none"), BenchmarkConfig(out=str(out), algos=["cory"]))
    run_folder = out / "cory" / "seed0"
    run_folder.mkdir(parents=True)
    for name in ("config.json", "metrics.csv"):
        (run_folder / name).write_bytes((trained / name).read_bytes())
    notes = plant(run_folder / "notes.txt")
    _prepare(out, TrainConfig(report_to="none"), BenchmarkConfig(out=str(out), algos=["ppo"], overwrite=True))
    assert sorted(p.name for p in run_folder.iterdir()) == ["notes.txt"] and notes.read_text() == THESIS


def test_bench_overwrite_refuses_a_folder_a_live_run_holds(trained, tmp_path):
    out = tmp_path / "bench"
    _prepare(out, TrainConfig(report_to="none"), BenchmarkConfig(out=str(out), algos=["cory"]))
    run_folder = out / "cory" / "seed0"
    run_folder.mkdir(parents=True)
    (run_folder / "config.json").write_bytes((trained / "config.json").read_bytes())
    with RunLock(run_folder):
        before = tree(out)
        with pytest.raises(RunFolderInUseError):
            _prepare(out, TrainConfig(report_to="none"), BenchmarkConfig(out=str(out), algos=["ppo"], overwrite=True))
        assert tree(out) == before


def test_bench_refuses_a_run_folder_that_holds_no_run(tmp_path):
    out = tmp_path / "bench"
    _prepare(out, TrainConfig(report_to="none"), BenchmarkConfig(out=str(out), algos=["cory"]))
    thesis = plant(out / "cory" / "seed0" / "metrics.csv")
    with pytest.raises(NotOursError, match="holds no cory-env run"):
        _prepare(out, TrainConfig(report_to="none"), BenchmarkConfig(out=str(out), algos=["ppo"], overwrite=True))
    assert thesis.read_text() == THESIS and (out / "benchmark.json").exists()


def test_bench_refuses_a_users_report_in_a_folder_that_holds_no_benchmark(tmp_path):
    report = plant(tmp_path / "report.md")
    with pytest.raises(NotOursError, match="report.md"):
        _prepare(tmp_path, TrainConfig(report_to="none"), BenchmarkConfig(out=str(tmp_path), algos=["cory"]))
    assert report.read_text() == THESIS and not (tmp_path / "benchmark.json").exists()


def test_remove_run_refuses_a_model_folder_with_a_users_file(trained, tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "config.json").write_bytes((trained / "config.json").read_bytes())
    plant(out / "model" / "llm_0" / "weights.bin")  # no manifest: not an export of cory-env's
    with pytest.raises(NotOursError, match="no cory-export.json"):
        remove_run(out)
    assert (out / "config.json").exists()


# ------------------------------------------------------------------------------ converted-model cache


def test_the_model_cache_leaves_a_folder_it_did_not_convert(monkeypatch, tmp_path):
    monkeypatch.setenv("CORY_ENV_CACHE", str(tmp_path))
    thesis = plant(models.embedded_model_path() / "thesis.txt")
    monkeypatch.setattr(models, "_convert_gguf", lambda *a: pytest.fail("converted over a user's folder"))
    with pytest.raises(models.ModelNotAvailableError, match="leaves it alone"):
        models._ensure_embedded_model()
    assert thesis.read_text() == THESIS


# ----------------------------------------------------------------------------- what a killed write left

#: cory-export, its first learner's files written in its temporary folder when the process is killed (SIGKILL).
EXPORT_KILLED = """
import pathlib, sys, time
from cory_agents.cli import export as cory_export
from cory_agents.training import export

def killed(folder):
    pathlib.Path(sys.argv[1]).touch()
    time.sleep(600)

export.write_manifest = killed
cory_export.main(["--checkpoint", sys.argv[2], "--out", sys.argv[3]])
"""

#: cory-train, killed (SIGKILL) halfway through writing its second checkpoint.
CHECKPOINT_KILLED = """
import pathlib, sys, time
from cory_agents.cli import train as cory_train
from cory_agents.training import checkpoint

saves = []

def save_file(tensors, path, metadata):
    saves.append(path)
    if len(saves) == 1:
        return real(tensors, path, metadata=metadata)
    pathlib.Path(path).write_bytes(b"half a checkpoint")
    pathlib.Path(sys.argv[1]).touch()
    time.sleep(600)

real, checkpoint.save_file = checkpoint.save_file, save_file
cory_train.main(sys.argv[2:])
"""


def test_an_export_killed_midway_is_cleared_by_the_next_export_into_the_folder(trained, tmp_path, caplog):
    out = tmp_path / "exported"
    users = [plant(out / ".cory-export-notes"), plant(out / "thesis.txt")]
    killed_midway(EXPORT_KILLED, tmp_path / "writing", str(trained), str(out))
    (left,) = [p for p in out.iterdir() if EXPORT_TEMPORARY.match(p.name)]
    assert (left / "llm_0" / "model.safetensors").is_file()  # what the killed export had written
    with caplog.at_level(logging.WARNING, logger="cory_env.write_failures"):
        cory_export.main(["--checkpoint", str(trained), "--out", str(out)])
    assert [r.getMessage() for r in caplog.records] == [f"removed what an export that was killed left: {left}"]
    assert sorted(p.name for p in out.iterdir()) == [".cory-export-notes", "llm_0", "llm_1", "thesis.txt"]
    assert all(path.read_text() == THESIS for path in users)


def test_a_run_killed_while_writing_a_checkpoint_is_cleared_by_its_resume(toy_model, tmp_path, caplog):
    out = tmp_path / "run"
    notes = plant(out / "checkpoints" / ".tmp-notes.txt")
    args = toy_args(toy_model, out, "--iterations", "2", "--checkpoint-every", "1")
    killed_midway(CHECKPOINT_KILLED, tmp_path / "writing", *args)
    (left,) = [p for p in notes.parent.iterdir() if CHECKPOINT_TEMPORARY.match(p.name)]
    with caplog.at_level(logging.WARNING, logger="cory_env.write_failures"):
        cory_train.main([*args, "--resume"])
    assert [r.getMessage() for r in caplog.records if r.name == "cory_env.write_failures"] == [
        f"removed what a checkpoint write that was killed left: {left}"
    ]
    assert sorted(p.name for p in notes.parent.iterdir()) == [".tmp-notes.txt", "iter_000001.safetensors"]
    assert notes.read_text() == THESIS
