"""Trained policies as Hugging Face models: what a run leaves for ``from_pretrained``.

At the end of a run (``--save-model``, on by default) the trainer writes each learner's policy
to ``<out>/model/<learner>`` (CORY: ``llm_0`` and ``llm_1``, either of which answers alone at
test time; PPO: ``pioneer``), with the tokenizer beside it:

* full fine-tuning: the whole causal LM, for ``AutoModelForCausalLM.from_pretrained(path)``;
* ``--lora``: the learner's adapter in PEFT's format, for
  ``PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base), path)`` (its
  ``adapter_config.json`` names the base; ``.merge_and_unload()`` gives a plain model).

Value heads are the training's critics and stay in the checkpoints. ``examples/export_model.py``
writes the same folders from any checkpoint (a run stopped early, or one trained without
``--save-model``). Each learner's folder is written under a temporary name inside the folder and
renamed into place, so an interrupted export never leaves a half-written one: a full disk or the
file-size limit ends it in one line naming the learner's folder and the room it needs, and an export
killed outright (SIGKILL) leaves its temporary folder, ``.cory-export-XXXXXXXX``, which the next export
into the folder removes, saying so (:mod:`cory_env.write_failures`). The folder's other
files are left alone: a learner's folder is replaced only if an earlier export wrote it (its
manifest, ``cory-export.json``, lists every file in it); otherwise the export is refused before it
writes anything (:mod:`cory_agents.training.ownership`).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch
from torch import nn

from cory_agents.distributed.fsdp import full_state
from cory_agents.training.adapters import AdapterView
from cory_agents.training.ownership import check_out_folder, check_replaceable, write_manifest
from cory_env.models import apply_umask
from cory_env.write_failures import held, is_held, remove_leftovers, temporary_name, writing

#: Where a run's policies go, under its --out.
MODEL_DIR = "model"
#: The prefix of an export's temporary folder, beside the learners' folders.
EXPORT_PREFIX = ".cory-export-"
#: The exact names of those folders (``tempfile.mkdtemp``'s), which the next export removes if one was left.
EXPORT_TEMPORARY = temporary_name(EXPORT_PREFIX)


def save_policies(
    policies: dict[str, nn.Module],
    tokenizers: dict[str, Any],
    folder: str | Path,
    *,
    sharded: bool = False,
    main: bool = True,
) -> dict[str, Path]:
    """Write each policy (a causal LM, or an :class:`~cory_agents.training.adapters.AdapterView`) to
    ``folder/<name>`` with ``save_pretrained``, and its tokenizer (``tokenizers[name]``) beside it;
    returns the paths.

    In a data-parallel run every process calls this and only the ``main`` one writes; under FSDP
    (``sharded``) the weights are first gathered whole, a collective.
    """
    folder = Path(folder)
    states = {name: _whole_state(policy) if sharded else None for name, policy in policies.items()}
    paths = {name: folder / name for name in policies}
    if not main:
        return paths
    _quiet_deepspeed_detection()
    check_export_folder(folder, list(policies))
    with writing(folder):
        folder.mkdir(parents=True, exist_ok=True)
        remove_leftovers(folder, EXPORT_TEMPORARY, "an export", in_use=is_held)  # a live export's is held
        tmp = Path(tempfile.mkdtemp(prefix=EXPORT_PREFIX, dir=folder))  # beside the user's files, ours alone
    try:
        with held(tmp):
            for name, policy in policies.items():
                with writing(paths[name], _weights_size(policy, states[name])):
                    _save_policy(policy, tokenizers[name], tmp, name, states[name])
            apply_umask(tmp)
            for name in policies:  # each learner's folder swapped in whole; an older export is set aside first
                if paths[name].exists():
                    paths[name].rename(tmp / f".{name}-old")
                (tmp / name).rename(paths[name])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # the temporary folder holds only what this export wrote
    return paths


def _save_policy(policy: nn.Module, tokenizer: Any, tmp: Path, name: str, state: dict[str, Any] | None) -> None:
    """Write ``policy`` and ``tokenizer`` to ``tmp/name``, with the export's manifest."""
    if isinstance(policy, AdapterView):  # PEFT writes a named adapter to a folder of its name
        policy.peft_model.save_pretrained(tmp / f".{name}", selected_adapters=[policy.adapter])
        written = tmp / f".{name}"
        (written / policy.adapter if policy.adapter != "default" else written).rename(tmp / name)
        shutil.rmtree(written, ignore_errors=True)  # what PEFT wrote beside the adapter (a model card)
    else:
        policy.save_pretrained(tmp / name, state_dict=state)
    tokenizer.save_pretrained(tmp / name)
    write_manifest(tmp / name)


def _weights_size(policy: nn.Module, state: dict[str, Any] | None) -> int:
    """The bytes of the weights an export of ``policy`` writes (an adapter's own for an adapter; a tied
    weight once): the room it needs, less the tokenizer's few."""
    if isinstance(policy, AdapterView):
        marker = f".{policy.adapter}."
        tensors = [p for n, p in policy.peft_model.named_parameters() if "lora_" in n and marker in n]
    else:
        tensors = list((policy.state_dict() if state is None else state).values())
    sizes = {(t.data_ptr(), t.dtype, t.numel()): t.numel() * t.element_size() for t in tensors}
    return sum(sizes.values())


def check_export_folder(folder: Path, learners: list[str]) -> None:
    """Refuse, before anything is written, an export into ``folder`` that would replace what cory-env
    did not write: ``folder`` a file, or ``folder/<learner>`` a folder without the export's manifest
    or with a file the manifest does not list (:mod:`cory_agents.training.ownership`)."""
    check_out_folder(folder)
    for learner in learners:
        check_replaceable(folder / learner, "choose another --out, or move it away")


def _whole_state(policy: nn.Module) -> dict[str, Any]:
    """A sharded model's state dict with whole tensors (a collective), each tied weight once under
    its first name, as ``save_pretrained`` writes a model whose weights are not sharded (a tied LM
    head is left to ``from_pretrained`` to tie again)."""
    seen: set[int] = set()
    unique = {}
    for name, tensor in policy.state_dict(keep_vars=True).items():  # the parameters themselves: ties visible
        if id(tensor) not in seen:
            seen.add(id(tensor))
            unique[name] = tensor.detach()
    return full_state(unique)


def _quiet_deepspeed_detection() -> None:
    """``save_pretrained`` imports DeepSpeed where it is installed (accelerate's unwrapping), and on a
    machine without CUDA DeepSpeed then warns that it "was unable to detect" a GPU. Naming the CPU
    as its accelerator, which it would choose anyway, spares a CPU run's output that warning."""
    if "deepspeed" not in sys.modules and not torch.cuda.is_available():
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
