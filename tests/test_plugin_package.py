"""The plug-in package of ``examples/plugins/magrpo``, installed with pip beside cory-env in a fresh virtual
environment, from folders outside the repository: its learner reaches the installed commands.

As in tests/test_packaging.py, the heavy dependencies are not installed again: a ``.pth`` file lets the new
environment see this one's site-packages, after its own; cory-env and the plug-in are built and installed
from copies (``pip install --no-deps``). The runs use ``--model tiny`` (cory_env.tiny_model).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pandas as pd
import pytest

from tests.support import ROOT

NOT_COPIED = shutil.ignore_patterns(
    ".venv", ".git", "build", "dist", "site", "runs", "*.egg-info", "__pycache__", ".*_cache", ".hypothesis"
)
#: A small, fast run of the tiny model (checkpoints every iteration, so that a kill leaves one).
SMALL = ["--model", "tiny", "--batch-size", "4", "--mini-batch-size", "4", "--group-size", "2", "--ppo-epochs", "1"]
SMALL += ["--min-new-tokens", "3", "--max-new-tokens", "4", "--report-to", "none", "--checkpoint-every", "1"]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    return env | {"HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}


def _run(command: list[str], cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    result = subprocess.run(command, capture_output=True, text=True, env=_env(), cwd=cwd, timeout=timeout)
    assert result.returncode == 0, f"{' '.join(command)} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    """A fresh environment with cory-env and the plug-in installed by pip from copies outside the repository."""
    where = tmp_path_factory.mktemp("plugin")
    source = Path(shutil.copytree(ROOT, where / "cory-env", ignore=NOT_COPIED))
    plugin = Path(shutil.copytree(ROOT / "examples" / "plugins" / "magrpo", where / "magrpo", ignore=NOT_COPIED))
    _run([sys.executable, "-m", "venv", str(where / "venv")], where)
    python = where / "venv" / "bin" / "python"
    purelib = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site = Path(_run([str(python), "-c", purelib], where).stdout.strip())
    ours = dict.fromkeys(sysconfig.get_paths()[key] for key in ("purelib", "platlib"))
    (site / "_cory_env_test_heavy_dependencies.pth").write_text("".join(f"{p}\n" for p in ours))
    for package in (source, plugin):
        _run([str(python), "-m", "pip", "install", "--no-deps", str(package)], where)
    return where / "venv" / "bin"


@pytest.mark.slow
def test_the_installed_learner_trains_resumes_and_runs_in_cory_bench(venv, tmp_path):
    work = tmp_path / "work"  # outside the repository: nothing of it on sys.path
    work.mkdir()
    help_ = _run([str(venv / "cory-train"), "--learner", "magrpo", "--help"], work).stdout
    assert "Learner magrpo:" in help_ and "--magrpo_baseline" in help_

    signal_run = work / "signal"
    _run([str(venv / "cory-train"), "--learner", "magrpo", "--task", "signal", "--iterations", "2", *SMALL,
          "--out", str(signal_run)], work)  # fmt: skip
    assert json.loads((signal_run / "config.json").read_text())["learner"] == "magrpo"

    # Two rounds of the sentiment task, killed (SIGKILL) after its first checkpoint, then resumed: the metrics
    # are those of an uninterrupted run.
    rounds = ["--learner", "magrpo", "--rounds", "2", "--magrpo-baseline", "rloo", "--iterations", "4", *SMALL]
    _run([str(venv / "cory-train"), *rounds, "--out", str(work / "whole")], work)
    killed = work / "killed"
    proc = subprocess.Popen(
        [str(venv / "cory-train"), *rounds, "--out", str(killed)], env=_env(), cwd=work,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + 300
    while not list((killed / "checkpoints").glob("iter_*.safetensors")):
        assert proc.poll() is None and time.monotonic() < deadline, "the run ended before it was killed"
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert pd.read_csv(killed / "metrics.csv")["iteration"].max() < 3, "killed too late to test a resume"
    _run([str(venv / "cory-train"), *rounds, "--out", str(killed), "--resume"], work)
    whole, resumed = (
        pd.read_csv(w / "metrics.csv").drop(columns=["tokens_per_s", "seconds"]) for w in (work / "whole", killed)
    )
    pd.testing.assert_frame_equal(whole, resumed, check_exact=True)

    # cory-eval and cory-export rebuild the run from its settings: the learner is found again.
    _run([str(venv / "cory-export"), "--checkpoint", str(killed), "--out", str(work / "exported")], work)
    assert (work / "exported" / "llm_0" / "config.json").is_file()
    _run([str(venv / "cory-eval"), "--checkpoint", str(killed), "--num-prompts", "4", "--batch-size", "4",
          "--out", str(work / "evaluation.json")], work)  # fmt: skip
    assert json.loads((work / "evaluation.json").read_text())

    bench = work / "bench"
    _run([str(venv / "cory-bench"), "--algos", "cory:grpo", "cory:magrpo", "--seeds", "1", "--iterations", "2",
          "--eval-prompts", "4", "--eval-batch-size", "4", "--magrpo-baseline", "rloo", *SMALL, "--out", str(bench),
          "--no-progress"], work)  # fmt: skip
    report = json.loads((bench / "report.json").read_text())
    assert "cory:magrpo" in json.dumps(report) and (bench / "report.md").is_file()
