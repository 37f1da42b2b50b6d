"""The model matrix: what the package does with each family users bring, and the page that says so.

tests/agents/training/test_supported_models.py runs every family's tiny random model
(:mod:`tests.support.model_zoo`) through the checks below; :func:`render` writes
``docs/supported-models.md`` from the same models and the real checkpoints' configs on the meta
device, and a test keeps the page equal to it. Regenerate the page after a change with::

    .venv/bin/python -m tests.support.supported_models
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

from cory_agents.learners.dropout import disable_dropout
from cory_agents.learners.lm import response_logits
from cory_agents.speed import attention_kinds, padding_free
from tests.support import ROOT
from tests.support.model_zoo import FAMILIES, PUBLISHED, published_config, tiny_model

PAGE = ROOT / "docs" / "supported-models.md"

#: The response columns the forward-pass check compares.
T = 4


def padded_batch(vocab_size: int, width: int = 24) -> tuple[torch.Tensor, torch.Tensor]:
    """Three contexts of up to ``width`` tokens (longer than the tiny models' windows of 8): the first
    left-padded by 6 columns, the second starting with the first one's first 4 tokens (a shared head,
    as a prompt template's), the third of full width."""
    ids = torch.randint(3, vocab_size, (3, width), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[0, :6] = 0
    ids[1, :4] = ids[0, 6:10]
    return ids, mask


def padded_batch_error(model: torch.nn.Module, vocab_size: int) -> float:
    """The largest difference between the response logits of :func:`padded_batch` run as one batch and
    each context run alone (no padding, nothing shared)."""
    ids, mask = padded_batch(vocab_size)
    with torch.no_grad():
        batched = response_logits(model, ids, mask, T)
        alone = [
            response_logits(model, ids[b : b + 1, mask[b].bool()], mask[b : b + 1, mask[b].bool()], T) for b in range(3)
        ]
    return max(float((batched[b] - alone[b][0]).abs().max()) for b in range(3))


def prepared(family: str, padding_free_passes: bool, vocab_size: int = 64) -> torch.nn.Module:
    """``family``'s tiny model as a run builds it: dropout off, then padding-free passes if asked."""
    model = tiny_model(family, vocab_size=vocab_size)
    disable_dropout(model)
    if padding_free_passes:
        padding_free.enable(model)
    return model


@dataclass(frozen=True)
class Row:
    """One family's line of the page."""

    family: str
    checkpoint: str  #: the real checkpoint whose config was checked
    architecture: str  #: its model class
    padding_free: str  #: "yes", "yes, sliding windows kept", or "padded: <why>"
    windows: str  #: the real checkpoint's sliding windows, as the package reads them
    fsdp_unit: str  #: the layer class FSDP shards as a unit


def row(family: str) -> Row:
    """What the package chooses for ``family``: the padding-free verdict on its tiny model (the probe pass
    included), and the real checkpoint's windows and layer class, read on the meta device."""
    logging.getLogger("cory_agents.speed.padding_free").disabled = True  # the verdict is the page's, not a log's
    try:
        model = prepared(family, padding_free_passes=True)
    finally:
        logging.getLogger("cory_agents.speed.padding_free").disabled = False
    config = published_config(family)
    with torch.device("meta"):
        real = AutoModelForCausalLM.from_config(config)
    reason = padding_free.fallback_reason(model) or (
        attention_kinds.unsupported(real) if real.config._attn_implementation == "sdpa" else None
    )
    windows = attention_kinds.sliding_windows(real)
    if reason is not None:
        verdict = f"padded: {reason}"
    else:
        verdict = "yes, sliding windows kept" if any(attention_kinds.sliding_windows(model)) else "yes"
    units = getattr(real, "_no_split_modules", None) or []
    return Row(
        family=family,
        checkpoint=PUBLISHED[family]["checkpoint"],
        architecture=type(real).__name__,
        padding_free=verdict,
        windows=_windows(windows),
        fsdp_unit=", ".join(f"`{u}`" for u in units) or "none (one unit)",
    )


def _windows(windows: list[int | None]) -> str:
    sliding = [w for w in windows if w is not None]
    if not sliding:
        return "none"
    sizes = ", ".join(str(w) for w in sorted(set(sliding)))
    return f"{sizes} on {len(sliding)} of {len(windows)} layers"


HEADER = """# Supported models

Every causal LM of 🤗 Transformers that loads with `AutoModelForCausalLM` can be trained. This page
lists the families the test suite runs (the embedded SmolLM2 and Llama 2 are `LlamaForCausalLM`, as
the llama3 row), each as a tiny random model (2 layers, width 64, built from
the family's config class with its distinctive features: sliding windows of 8 tokens, soft-capping,
layers without RoPE, q/k norms, partial rotary, the real checkpoints' dropouts), through:

- a left-padded batch against each context run alone, with padding-free passes and with padded ones:
  the logits agree to 1e-4 (float32);
- one PPO and one CORY iteration of `cory-train`'s defaults, and two iterations against
  `--no-padding-free` (the same metrics to 1e-3): iteration 0's KL to the reference is 0 for every family,
  as it must be with dropout off (`cory_agents.learners.dropout` switches off the rates models keep as
  floats or config fields: OPT's `dropout` 0.1, Falcon's config rates, GPT-2's dropout layers);
- one iteration with `--lora`, whose adapters move;
- the static-cache decode (`--cache-length`) against the eager actor, token for token; the compiled
  decode (`--compile`) likewise, in the slow tests (`make test-ci-slow`);
- each family's real checkpoint config, instantiated on the meta device (no weights), for the choices
  below.

**Padding-free passes** (the default; `--no-padding-free` turns them off) pack a batch's real tokens
into one row (`cory_agents.speed.padding_free`). A model keeps padded passes by itself when its
attention is not sdpa (Gemma 2's soft-capping needs eager attention), when its config asks for an
attention the packed one cannot compute (soft-capping, chunked or bidirectional attention), or when a
probe pass at build time finds its layers do not hand the packed batch to attention (Falcon): one
logged line says so. **Sliding windows** are kept per layer as the config's `layer_types` say (Gemma 3's
local layers, Qwen2 with `use_sliding_window`), or on every layer (Mistral, Phi-3). **FSDP** shards each
decoder layer as a unit (the class below, from the model's `_no_split_modules`); FSDP runs are tested on
the tiny Llama (tests/agents/distributed), not per family.

The table is generated by `python -m tests.support.supported_models`;
`tests/agents/training/test_supported_models.py` runs the checks above and keeps this page equal to the
generator's output.

| Family | Checkpoint checked | Class | Padding-free passes | Sliding windows (real checkpoint) | LoRA | `--compile` | FSDP unit |
|---|---|---|---|---|---|---|---|
"""


#: The LoRA and ``--compile`` cells: every family's, as tests/agents/training/test_supported_models.py runs
#: both for each family of :data:`~tests.support.model_zoo.FAMILIES` (a family failing one fails the suite).
TESTED = ("yes", "yes")


def render() -> str:
    """The whole page, one row per family of :data:`~tests.support.model_zoo.FAMILIES`."""
    lines = [HEADER.rstrip("\n")]
    for r in map(row, FAMILIES):
        cells = (r.family, f"`{r.checkpoint}`", f"`{r.architecture}`", r.padding_free, r.windows, *TESTED, r.fsdp_unit)
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines) + "\n"


def main(page: Path = PAGE) -> None:
    page.write_text(render())
    print(f"wrote {page}")


if __name__ == "__main__":
    main()
