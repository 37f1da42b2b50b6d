"""The run's devices as the settings name them: ``--device`` and ``--learner-devices``, parsed and checked
against each other, the learners and the launcher (:func:`check_devices`, part of
:func:`cory_agents.training.config.resolve`). Whether a device exists on this machine is checked where it is
used (:func:`cory_agents.training.build.select_devices`)."""

from __future__ import annotations

from typing import Any

import torch

from cory_agents.distributed.data_parallel import DataParallel
from cory_env.errors import UsageError


def parse_device(spec: str, flag: str) -> torch.device:
    """A device name (``cpu``, ``cuda``, ``cuda:N``, ...) as torch reads it; a name torch does not know fails
    with a UsageError naming ``flag`` (and ``auto``, which only ``--device`` takes, where it applies). Whether
    the device exists here is not checked."""
    try:
        return torch.device(spec)
    except RuntimeError as exc:
        forms = "cpu, cuda, cuda:N or auto" if flag == "--device" else "cpu, cuda, cuda:N"
        raise UsageError(f"{flag} {spec!r}: {exc} (give {forms})") from exc


def learner_devices(config: Any) -> list[torch.device]:
    """``--learner-devices``, parsed: one device per learner (empty when not given)."""
    specs = [s.strip() for s in config.learner_devices.split(",") if s.strip()]
    return [parse_device(s, "--learner-devices") for s in specs]


def check_devices(config: Any, dp: DataParallel) -> None:
    """``--device`` and ``--learner-devices`` against each other, the learners and the launcher. Whether a
    device exists on this machine is checked where it is used (:func:`cory_agents.training.build.select_devices`)."""
    if dp.is_distributed:
        if config.learner_devices:
            raise UsageError(
                "--learner-devices is for a single process; under accelerate launch each process uses its own "
                "device (drop --learner-devices, or run without accelerate launch)"
            )
        if config.device != "auto" and parse_device(config.device, "--device").type != dp.device.type:
            raise UsageError(
                f"--device {config.device} conflicts with the launcher's device {dp.device}: drop --device "
                f"(CUDA_VISIBLE_DEVICES= runs the processes on CPUs)"
            )
        return
    if not config.learner_devices:
        return
    names, devices = config.learner_names(), learner_devices(config)
    if len(devices) != len(names):
        raise UsageError(
            f"--learner-devices lists {len(devices)} device(s) for {len(names)} learner(s) ({', '.join(names)}): "
            f"give one per learner, e.g. --learner-devices {','.join(f'cuda:{i}' for i in range(len(names)))}"
        )
    if config.lora and len(set(devices)) > 1:
        raise UsageError("--learner-devices with different devices needs full fine-tuning: --lora shares one base")
    if config.device != "auto":
        raise UsageError("give either --device or --learner-devices, not both")
