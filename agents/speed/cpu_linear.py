"""Linear layers that pick the matrix-multiply layout a CPU runs fastest, for acting and scoring.

``nn.Linear`` computes ``x @ W.T`` with one call to the BLAS (MKL in PyTorch's CPU build).
Two kinds of call in this package's forward passes run far below the CPU's speed that way:

* **A decode step** multiplies a few rows (one new token per conversation) by every weight of
  the model. For 8 rows MKL reads the weights faster computing the same product as
  ``(W @ x.T).T`` than as ``x @ W.T``, the embedded model's LM head (49152 x 576) most of all
  (docs/benchmarks.md has the rates and times).
* **A frozen model's LM head under an integer** ``logits_to_keep``: Hugging Face passes it
  the last positions' hidden states, a slice that is not contiguous. When no gradient is
  needed for the weight, ``torch.matmul`` does not copy such an input into one matrix; it runs
  a batched multiply over the weight expanded per conversation, slower than copying the input
  and multiplying once. A reference model, or a LoRA policy (whose base LM
  head is frozen), called that way makes such calls; this package's own scoring passes keep
  column indices instead (:func:`cory_agents.learners.lm.predicting_columns`), which give a copy.

:class:`CPULinear` is ``nn.Linear`` with a ``forward`` that takes the faster layout in these
two cases on a CPU (the few-row case only in float32 and without autograd, so training's
forward and backward passes multiply as before) and calls ``F.linear`` otherwise.
:func:`use_cpu_linear` gives every plain ``nn.Linear`` of a model this class in place: the
weights, their names, state dicts, ``isinstance(m, nn.Linear)`` (which peft checks to put a
LoRA adapter around it) and deep copies are unchanged. Results equal ``F.linear``'s up to
float32 rounding (the order of the sums differs), so a sampled token can, rarely, differ.

The :class:`~cory_agents.training.trainer.Trainer` applies it to CPU runs unless ``--no-cpu-linear``.
What it saves in a CORY iteration's rollout and in the whole iteration, at the CORY authors'
settings, is in docs/benchmarks.md; ``benchmarks/iteration.py --cpu-linear-ablation`` measures
a CORY iteration without it, side by side.
On CUDA nothing changes; under bfloat16 autocast only the contiguous copy applies.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

#: At most this many rows (conversations x new tokens) take the ``(W @ x.T).T`` layout.
FEW_ROWS = 16


class CPULinear(nn.Linear):
    """``nn.Linear`` that, on a CPU, multiplies a few float32 rows as ``(W @ x.T).T`` (without
    autograd) and copies a non-contiguous batched input into one matrix first. See the module docstring."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.weight
        if x.device.type != "cpu":
            return F.linear(x, w, self.bias)
        if not torch.is_grad_enabled() and x.dtype == w.dtype == torch.float32 and not torch.is_autocast_enabled("cpu"):
            rows = x.numel() // x.shape[-1] if x.shape[-1] else 0
            if 0 < rows <= FEW_ROWS:
                out = torch.mm(w, x.reshape(rows, x.shape[-1]).T).T.contiguous()  # what follows reads rows
                if self.bias is not None:
                    out += self.bias
                return out.view(*x.shape[:-1], w.shape[0])
        if x.dim() > 2 and not x.is_contiguous():
            x = x.contiguous()
        return F.linear(x, w, self.bias)


def use_cpu_linear(model: nn.Module) -> int:
    """Make every plain ``nn.Linear`` in ``model`` a :class:`CPULinear`, in place; returns how many.

    Only modules whose type is exactly ``nn.Linear`` change: subclasses with their own
    ``forward`` (bitsandbytes' 4-bit layers) keep it. A peft LoRA layer is not an ``nn.Linear``;
    the plain base layer inside it is (its small ``lora_A``/``lora_B`` too, when they exist already).

    Example:
        >>> net = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
        >>> use_cpu_linear(net), type(net[0]).__name__, isinstance(net[0], nn.Linear)
        (2, 'CPULinear', True)
    """
    changed = 0
    for module in model.modules():
        if type(module) is nn.Linear:
            module.__class__ = CPULinear
            changed += 1
    return changed
