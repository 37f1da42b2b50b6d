"""Experiment trackers (``--report-to``): TensorBoard, Weights & Biases, MLflow, trackio, ...

The training metrics go to the trackers of Hugging Face accelerate's tracking API
(:mod:`accelerate.tracking`), built and driven as ``Accelerator(log_with=...)``,
``init_trackers``, ``log`` and ``end_training`` drive them. ``--report-to`` takes the values
TRL's ``report_to`` takes:

- ``tensorboard`` (the default): event files in ``--out`` (``tensorboard --logdir runs``);
- one tracker or a comma-separated list: ``wandb``, ``mlflow,tensorboard``, ... (any name of
  :func:`supported_trackers`: accelerate's ``aim, clearml, comet_ml, dvclive, mlflow, swanlab,
  tensorboard, trackio, wandb`` and those registered with ``accelerate.tracking.register_tracker_class``);
- ``all``: every one of accelerate's trackers whose package is installed; ``none``: none.

``metrics.csv`` and ``samples.jsonl`` are written whatever it says (:mod:`cory_agents.training.metrics`).

Where each tracker puts the run: trackers that keep their files in a folder (TensorBoard, Aim)
get ``--out``'s name as the run and its parent folder as the place, so TensorBoard's event files
are in ``--out`` itself; the others get the project ``cory-env`` (W&B: ``$WANDB_PROJECT`` if set;
MLflow: ``$MLFLOW_EXPERIMENT_NAME`` if set) and a run named after ``--out`` (W&B, MLflow, trackio).
The run's settings are stored as its hyperparameters (``init_trackers(config=...)``).

Example::

    trackers = Trackers(resolve_report_to("tensorboard,wandb"), "runs/cory_s0", config={"lr": 3e-5})
    trackers.start()  # or the first log()
    trackers.log({"llm_0/kl": 0.3, "charts/tokens_per_s": 812.5}, step=0)
    trackers.finish()
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from accelerate.tracking import LOGGER_TYPE_TO_CLASS, GeneralTracker, get_available_trackers
from accelerate.utils import LoggerType

from cory_env.errors import CoryError, UsageError

#: The project (W&B project, MLflow experiment, trackio project) a run is reported under.
PROJECT = "cory-env"
#: ``--report-to``'s default.
DEFAULT = "tensorboard"
#: cory-env's extras (pyproject.toml) that install a tracker; the others name their package.
EXTRAS = {"wandb": "wandb", "mlflow": "mlflow", "trackio": "trackio"}
PACKAGES = {
    "tensorboard": "tensorboard",
    "wandb": "wandb",
    "mlflow": "mlflow",
    "trackio": "trackio",
    "comet_ml": "comet-ml",
    "aim": "aim",
    "clearml": "clearml",
    "dvclive": "dvclive",
    "swanlab": "swanlab",
}
#: transformers' ``report_to`` names that accelerate's tracking API has no tracker for.
_TRANSFORMERS_ONLY = ("azure_ml", "codecarbon", "dagshub", "flyte", "kubeflow", "neptune")


class TrackerNotInstalledError(CoryError, ImportError):
    """``--report-to`` names a tracker whose package is not installed: install it, or leave the tracker out."""


class TrackerStartError(CoryError, RuntimeError):
    """A tracker of ``--report-to`` failed to start (W&B not logged in, an MLflow server not reachable, ...): the
    message gives its own error; fix that, or leave the tracker out. The run's checkpoints are written apart."""


def _start_failure(name: str, exc: Exception) -> str:
    reason = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return (
        f"--report-to {name}: the {name} tracker could not start ({type(exc).__name__}{': ' + reason if reason else ''}). "
        f"Fix that (for wandb: wandb login, or WANDB_MODE=offline), or leave {name} out of --report-to; "
        f"metrics.csv is written without any tracker"
    )


def supported_trackers() -> list[str]:
    """Every tracker name ``--report-to`` knows: accelerate's, and those registered with it."""
    return sorted(LOGGER_TYPE_TO_CLASS)


def installed_trackers() -> list[str]:
    """accelerate's trackers whose package is installed (what ``--report-to all`` reports to)."""
    return [str(tracker) for tracker in get_available_trackers()]


def resolve_report_to(report_to: str | Sequence[str] = DEFAULT) -> list[str]:
    """The trackers ``--report-to`` names, checked: each one known and its package installed.

    ``report_to`` is ``"all"``, ``"none"``, a name, a comma-separated list or a list of names
    (as TRL's). Raises :class:`~cory_env.errors.UsageError` (a ValueError) for an unknown name,
    :class:`TrackerNotInstalledError`
    (an ImportError) for a tracker whose package is missing (naming what to install).
    """
    spec = report_to if isinstance(report_to, str) else ",".join(report_to)
    requested = list(dict.fromkeys(n.strip() for n in spec.split(",") if n.strip()))  # in order, once each
    flag = f"--report-to {spec or 'none'}"
    if ("all" in requested or "none" in requested) and len(requested) > 1:
        raise UsageError(f"{flag}: 'all' and 'none' stand alone; list the trackers instead (e.g. tensorboard,wandb)")
    names = [] if requested == ["none"] else installed_trackers() if requested == ["all"] else requested
    for name in names:
        if name not in LOGGER_TYPE_TO_CLASS:
            known = ", ".join(["all", "none", *supported_trackers()])
            hint = " (transformers' Trainer reports to it, accelerate's tracking API has no tracker for it)"
            raise UsageError(
                f"{flag}: unknown tracker {name!r}{hint if name in _TRANSFORMERS_ONLY else ''}. Choose from {known}, "
                f"comma-separated, or register a GeneralTracker subclass with "
                f"accelerate.tracking.register_tracker_class"
            )
    installed = set(installed_trackers())
    for name in names:
        if name in LoggerType.list() and name not in installed:
            package = PACKAGES.get(name, name)
            install = f"pip install {package}"
            if name in EXTRAS:
                install = f"pip install 'cory-env[{EXTRAS[name]}]' (or {install})"
            raise TrackerNotInstalledError(
                f"--report-to {name}: the {name} tracker needs the {package} package, which is not installed. "
                f"Install it with {install}, or leave {name} out of --report-to"
            )
    return names


class Trackers:
    """The experiment trackers of one run: accelerate's tracker classes, started by :meth:`start` (or the first log).

    Args:
        names: tracker names, checked (:func:`resolve_report_to`).
        out_dir: the run folder (TensorBoard's event files go there; the run is named after it).
        config: the run's settings, stored as hyperparameters when the trackers start.
        purge_step: TensorBoard hides the events an earlier writer left at steps ``>= purge_step``
            (a resumed run logs the iterations after its checkpoint again).
    """

    def __init__(
        self,
        names: Sequence[str],
        out_dir: str | Path,
        *,
        config: Mapping[str, Any] | None = None,
        purge_step: int | None = None,
    ):
        self.names = list(names)
        self.out_dir = Path(out_dir)
        self.config = dict(config) if config is not None else None
        self.purge_step = purge_step
        self.trackers: list[GeneralTracker] = []
        self.started = False

    def start(self) -> None:
        """Build and start every tracker (as ``Accelerator.init_trackers``) and store the settings."""
        if self.started or not self.names:
            return
        from accelerate import PartialState

        PartialState()  # accelerate's trackers log through its logger, which needs the process state
        out = self.out_dir.resolve()
        try:
            for name in self.names:
                tracker_class = LOGGER_TYPE_TO_CLASS[name]
                try:
                    if tracker_class.requires_logging_directory:  # TensorBoard, Aim: the run's folder is --out
                        tracker = tracker_class(out.name, out.parent, **self._init_kwargs(name, out))
                    else:
                        tracker = tracker_class(self._project(name), **self._init_kwargs(name, out))
                    tracker.start()
                except Exception as exc:  # not logged in, no server, no network: the tracker's own error
                    raise TrackerStartError(_start_failure(name, exc)) from exc
                self.trackers.append(tracker)
            if self.config:
                values = hyperparameters(self.config)
                for tracker in self.trackers:
                    tracker.store_init_configuration(values)
        except BaseException:
            self.finish()
            raise
        self.started = True

    def log(self, values: Mapping[str, float], step: int) -> None:
        """Log scalars at ``step`` to every tracker (starting them first if needed)."""
        if not self.names:
            return
        self.start()
        for tracker in self.trackers:
            tracker.log(dict(values), step=step)

    def restart(self, purge_step: int) -> None:
        """Finish the trackers; the next :meth:`start` or :meth:`log` starts them again, TensorBoard hiding the
        steps ``>= purge_step`` that earlier runs wrote."""
        self.finish()
        self.purge_step = purge_step

    def finish(self) -> None:
        """End every tracker's run (as ``Accelerator.end_training``); safe to call twice."""
        trackers, self.trackers, self.started = self.trackers, [], False
        for tracker in trackers:
            tracker.finish()

    def _project(self, name: str) -> str:
        if name == "wandb":
            return os.environ.get("WANDB_PROJECT", PROJECT)
        return PROJECT  # MLflow: accelerate's MLflowTracker prefers $MLFLOW_EXPERIMENT_NAME

    def _init_kwargs(self, name: str, out: Path) -> dict[str, Any]:
        """``init_trackers(init_kwargs={name: ...})``'s keyword arguments: the run's name, TensorBoard's purge step."""
        if name == "tensorboard":
            return {} if self.purge_step is None else {"purge_step": self.purge_step}
        if name == "mlflow":
            return {"run_name": out.name}
        if name in ("wandb", "trackio"):
            return {"name": out.name}
        return {}


def hyperparameters(config: Mapping[str, Any]) -> dict[str, bool | int | float | str]:
    """The settings as every tracker stores them: unset ones (``None``) left out, anything but a scalar as text."""
    return {k: v if isinstance(v, (bool, int, float, str)) else str(v) for k, v in config.items() if v is not None}
