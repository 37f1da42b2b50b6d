"""--report-to: accelerate's experiment trackers, read back from what they wrote (offline, in tmp_path).

TensorBoard's event files are read with TensorBoard's own EventAccumulator, an offline W&B run
from its transaction log, MLflow's local file store with MLflow's client (where it is installed).
"""

from __future__ import annotations

import dataclasses
import glob
import importlib.util
import json
import struct
from pathlib import Path

import pandas as pd
import pytest
import yaml

from cory_agents.training.config import TrainConfig
from cory_agents.training.metrics import MetricsLogger
from cory_agents.training.trackers import installed_trackers, resolve_report_to, supported_trackers
from cory_agents.training.trainer import Trainer
from tests.support import ROOT
from tests.support.runs import toy_config
from tests.support.toy import fraction_good

PROMPTS = ["the movie was", "the plot is", "acting is very"]
SETTINGS = {"lr": 0.01, "algo": "cory", "lora": False, "model": "tiny", "task_file": ""}


def metrics(iteration: int) -> dict[str, float]:
    return {"llm_0/task_reward_mean": 0.1 * iteration, "llm_1/kl": 0.5 + iteration, "tokens_per_s": 800.0 + iteration}


def log_three_iterations(out: Path, report_to: str) -> None:
    with MetricsLogger(out, report_to=report_to, config=SETTINGS) as logger:
        for it in range(3):
            logger.log(it, metrics(it))


def tensorboard_scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar tag of the event files in ``folder`` (not its subfolders): [(step, value), ...]."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def wandb_run_records(wandb_dir: Path) -> list:
    """The records of the one offline W&B run under ``wandb_dir``: its ``run-<id>.wandb`` transaction log is
    LevelDB's log format (32 KiB blocks of chunks with a 7-byte header) holding one protobuf Record per entry."""
    import wandb
    from wandb.proto import wandb_internal_pb2

    wandb.teardown()  # W&B's service writes the log in the background: its teardown waits for it
    (path,) = glob.glob(str(wandb_dir / "wandb" / "offline-run-*" / "run-*.wandb"))
    data = Path(path).read_bytes()
    assert data[:4] == b":W&B"
    block, pos, chunk, records = 32768, 7, b"", []
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a header is padding
            pos += block - pos % block
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if kind == 0:  # zero padding
            pos += block - pos % block
            continue
        chunk += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # a full record, or the last chunk of one
            record = wandb_internal_pb2.Record()
            record.ParseFromString(chunk)
            records.append(record)
            chunk = b""
    return records


def wandb_history(records: list) -> dict[str, list[tuple[int, float]]]:
    history: dict[str, list[tuple[int, float]]] = {}
    for record in records:
        if record.WhichOneof("record_type") == "history":
            for item in record.history.item:
                key = item.key or "/".join(item.nested_key)
                if not key.startswith("_"):
                    history.setdefault(key, []).append((record.history.step.num, json.loads(item.value_json)))
    return history


def wandb_config(records: list) -> dict:
    return {
        item.key: json.loads(item.value_json)
        for r in records
        if r.WhichOneof("record_type") == "config"
        for item in r.config.update
        if not item.key.startswith("_")
    }


@pytest.fixture
def wandb_offline(tmp_path, monkeypatch) -> Path:
    """W&B in offline mode, everything it writes under tmp_path/wandb_home; yields WANDB_DIR."""
    wandb = pytest.importorskip("wandb")
    home = tmp_path / "wandb_home"
    for variable, value in {
        "WANDB_MODE": "offline",
        "WANDB_DIR": home,
        "WANDB_CONFIG_DIR": home / "config",
        "WANDB_CACHE_DIR": home / "cache",
        "WANDB_DATA_DIR": home / "data",
        "WANDB_SILENT": "true",
        "WANDB_CONSOLE": "off",
    }.items():
        monkeypatch.setenv(variable, str(value))
    monkeypatch.delenv("WANDB_PROJECT", raising=False)
    home.mkdir()
    yield home
    wandb.teardown()  # W&B reads its settings (WANDB_DIR, ...) once per process setup: the next test gets its own


def test_report_to_takes_trl_values():
    assert resolve_report_to("tensorboard") == ["tensorboard"]
    assert resolve_report_to("none") == resolve_report_to("") == resolve_report_to([]) == []
    assert resolve_report_to("all") == installed_trackers()
    assert "tensorboard" in installed_trackers()  # a core dependency
    assert resolve_report_to(" tensorboard , tensorboard") == ["tensorboard"]  # comma-separated, once each
    assert resolve_report_to(["tensorboard"]) == ["tensorboard"]  # a list, as TRL's report_to takes
    assert {"tensorboard", "wandb", "mlflow", "trackio"} <= set(supported_trackers())


def test_unknown_tracker_names_the_choices():
    with pytest.raises(ValueError, match=r"unknown tracker 'tensorbord'.*Choose from all, none, aim, .*tensorboard"):
        resolve_report_to("tensorboard,tensorbord")
    with pytest.raises(ValueError, match="accelerate's tracking API has no tracker for it"):
        resolve_report_to("neptune")
    with pytest.raises(ValueError, match="'all' and 'none' stand alone"):
        resolve_report_to("all,tensorboard")


def test_missing_tracker_package_names_what_to_install():
    missing = [
        name for name in ("comet_ml", "aim", "clearml", "dvclive", "swanlab") if name not in installed_trackers()
    ]
    if not missing:
        pytest.skip("every tracker is installed")
    with pytest.raises(ImportError, match=rf"--report-to {missing[0]}: .* not installed\. Install it with pip install"):
        resolve_report_to(f"tensorboard,{missing[0]}")


def test_command_line_reports_through_report_to_alone():
    spec = importlib.util.spec_from_file_location("_train_cory", ROOT / "examples" / "train_cory.py")
    train_cory = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(train_cory)

    def trackers(*args: str) -> list[str]:
        return resolve_report_to(train_cory.parse_config(list(args)).report_to)

    assert trackers() == ["tensorboard"]
    assert trackers("--report-to", "none") == []
    for retired in (["--tensorboard", "false"], ["--no_tensorboard"]):  # cory-env 0.1's switch (CHANGELOG.md)
        with pytest.raises(SystemExit):
            trackers(*retired)
    assert trackers("--report_to", "all") == installed_trackers()


def test_tensorboard_gets_the_scalars_and_the_settings(tmp_path):
    log_three_iterations(tmp_path, "tensorboard")
    scalars = tensorboard_scalars(tmp_path)  # event files in the run folder itself, as before
    assert scalars["llm_0/task_reward_mean"] == [(0, 0.0), (1, pytest.approx(0.1)), (2, pytest.approx(0.2))]
    assert scalars["llm_1/kl"] == [(0, 0.5), (1, 1.5), (2, 2.5)]
    assert scalars["charts/tokens_per_s"] == [(0, 800.0), (1, 801.0), (2, 802.0)]  # global keys under charts/
    (hparams,) = tmp_path.glob("*/hparams.yml")  # accelerate's TensorBoardTracker stores the settings there
    assert yaml.safe_load(hparams.read_text()) == {k: v for k, v in SETTINGS.items() if v is not None}
    assert len(pd.read_csv(tmp_path / "metrics.csv")) == 3  # the CSV as ever


def test_report_to_none_writes_only_the_files(tmp_path):
    log_three_iterations(tmp_path, "none")
    assert not list(tmp_path.rglob("events.out.tfevents.*"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.csv", "samples.jsonl"]


def test_wandb_offline_gets_the_scalars_and_the_settings(tmp_path, wandb_offline):
    log_three_iterations(tmp_path / "cory_s0", "wandb")
    records = wandb_run_records(wandb_offline)
    history = wandb_history(records)
    assert history["llm_0/task_reward_mean"] == [(0, 0.0), (1, pytest.approx(0.1)), (2, pytest.approx(0.2))]
    assert history["charts/tokens_per_s"] == [(0, 800.0), (1, 801.0), (2, 802.0)]
    assert wandb_config(records) == {k: v for k, v in SETTINGS.items() if v is not None}
    (run,) = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    assert (run.project, run.display_name) == ("cory-env", "cory_s0")  # the run is named after its folder


def test_mlflow_file_store_gets_the_scalars_and_the_settings(tmp_path, monkeypatch):
    mlflow = pytest.importorskip("mlflow")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", (tmp_path / "mlruns").as_uri())
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 asks for a database store otherwise
    monkeypatch.delenv("MLFLOW_EXPERIMENT_NAME", raising=False)
    log_three_iterations(tmp_path / "cory_s0", "mlflow")
    client = mlflow.tracking.MlflowClient()
    (run,) = client.search_runs([client.get_experiment_by_name("cory-env").experiment_id])
    assert run.info.run_name == "cory_s0"
    history = [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, "llm_1/kl")]
    assert history == [(0, 0.5), (1, 1.5), (2, 2.5)]
    assert run.data.params["lr"] == "0.01" and run.data.params["algo"] == "cory"


def test_a_bad_report_to_fails_before_the_models_load(tmp_path):
    config = TrainConfig(model=str(tmp_path / "no_such_model"), out=str(tmp_path / "run"), report_to="tensorbord")
    with pytest.raises(ValueError, match="unknown tracker 'tensorbord'"):
        Trainer(config, prompts=PROMPTS, reward_fn=fraction_good)
    config = dataclasses.replace(config, report_to="none,wandb")
    with pytest.raises(ValueError, match="'all' and 'none' stand alone"):
        Trainer(config, prompts=PROMPTS, reward_fn=fraction_good)


@pytest.mark.parametrize("report_to", ["tensorboard", "tensorboard,wandb"])
def test_trainer_reports_every_iteration_and_its_settings(toy_model, tmp_path, report_to, request):
    wandb_dir = request.getfixturevalue("wandb_offline") if "wandb" in report_to else None
    out = tmp_path / "run"
    config = toy_config(
        toy_model,
        out,
        algo="ppo",
        iterations=2,
        batch_size=4,
        mini_batch_size=2,
        ppo_epochs=1,
        report_to=report_to,
        save_model=False,
    )
    Trainer(config, prompts=PROMPTS, reward_fn=fraction_good).train(progress=False)
    rewards = pd.read_csv(out / "metrics.csv")["pioneer/task_reward_mean"].tolist()
    saved = json.loads((out / "config.json").read_text())
    assert saved["report_to"] == report_to and "tensorboard" not in saved
    reported = tensorboard_scalars(out)["pioneer/task_reward_mean"]
    assert [step for step, _ in reported] == [0, 1] and [v for _, v in reported] == pytest.approx(rewards)
    assert "charts/tokens_per_s" in tensorboard_scalars(out)
    (hparams,) = out.glob("*/hparams.yml")
    assert yaml.safe_load(hparams.read_text())["report_to"] == report_to
    if wandb_dir is not None:
        records = wandb_run_records(wandb_dir)
        history = wandb_history(records)["pioneer/task_reward_mean"]
        assert [step for step, _ in history] == [0, 1] and [v for _, v in history] == pytest.approx(rewards)
        assert wandb_config(records)["batch_size"] == 4


def test_trainer_with_report_to_none_reports_to_no_tracker(toy_model, tmp_path):
    config = toy_config(
        toy_model, tmp_path, algo="ppo", iterations=1, batch_size=4, mini_batch_size=2, ppo_epochs=1, save_model=False
    )  # toy_config passes report_to="none", as the scripts do
    Trainer(config, prompts=PROMPTS, reward_fn=fraction_good).train(progress=False)
    assert json.loads((tmp_path / "config.json").read_text())["report_to"] == "none"
    assert not list(tmp_path.rglob("events.out.tfevents.*"))


def test_a_resumed_run_reports_each_iteration_once(toy_model, tmp_path):
    config = toy_config(
        toy_model,
        tmp_path,
        algo="ppo",
        iterations=2,
        batch_size=4,
        mini_batch_size=2,
        ppo_epochs=1,
        report_to="tensorboard",
        checkpoint_every=1,
        save_model=False,
    )
    Trainer(config, prompts=PROMPTS, reward_fn=fraction_good).train(progress=False)
    resumed = dataclasses.replace(config, iterations=3, resume=True)
    Trainer(resumed, prompts=PROMPTS, reward_fn=fraction_good).train(progress=False)
    rewards = pd.read_csv(tmp_path / "metrics.csv")["pioneer/task_reward_mean"].tolist()
    # Sorted: TensorBoard reads event files in name order, and two writers of one process in one second
    # are told apart by a counter (".9" sorts after ".10"); a resumed run is another process, later.
    reported = sorted(tensorboard_scalars(tmp_path)["pioneer/task_reward_mean"])
    assert [step for step, _ in reported] == [0, 1, 2] and [v for _, v in reported] == pytest.approx(rewards)


def test_evaluating_a_run_reports_to_no_tracker():
    """A run's own trackers (wandb, say) are not needed, or maybe installed, where it is evaluated."""
    from cory_agents.evaluation.held_out import train_config_from

    saved = dataclasses.asdict(TrainConfig(report_to="tensorboard,wandb,mlflow"))
    config = train_config_from(saved)
    assert config.report_to == "none" and resolve_report_to(config.report_to) == []
    old = train_config_from(saved | {"tensorboard": False, "review_source": "imdb"})  # cory-env 0.1's config.json
    assert old.prompt_source == "imdb" and old.report_to == "none"
