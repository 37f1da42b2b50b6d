"""The update's passes, eager against compiled (``torch.compile``, dynamic shapes), side by side in one run.

A PPO learner's update runs, per iteration, passes without gradients over the batch (the frozen reference's,
and the scoring pass unless a minibatch is the whole batch: cory_agents.speed.scoring_reuse) and
``ppo_epochs`` x (batch / minibatch) passes with a forward and a backward over a minibatch
(:class:`~cory_agents.learners.ppo.PPOLearner`). This script times both kinds on the value-head model as a
run builds it (:class:`~cory_agents.learners.value_model.CausalLMWithValueHead`, padding-free passes, CPU
linear layers on a CPU), over batches of a CORY iteration's shape (``--batch-size`` 8 contexts, prompts of
40-70 tokens with left padding, ``--response`` 10 tokens; four widths in turn, as batches vary), the
forward + backward over the first ``--mini-batch-size`` of them, by two paths interleaved width by width:

- eager: the model called as a run calls it;
- compiled: ``torch.compile(model, dynamic=True)``, the whole model (Inductor: C++ on a CPU, Triton on CUDA),
  compiled at its first call of each kind (with and without gradients), at the first width.

For each model (``--models tiny embedded``: rollout.py ``--tiny``'s 2-layer, 64-wide Llama over 1024 tokens,
where launches dominate, and the embedded SmolLM2-135M) it prints milliseconds per pass (medians over the
rounds and widths), compiled / eager speed-ups, the seconds the compiles took, and how many iterations of a
CORY run (two learners, each with the passes above, cory-train's defaults: 1 epoch, minibatches of
``min(16, batch)``) win them back. It checks the compiled pass against the eager one (largest logit
difference without gradients, loss difference with them) and counts the frames Dynamo compiled at the
widths after the first (any would mean a width compiles again, and its time is then in the figures).

    python benchmarks/update_passes.py                                   # both models, CPU
    python benchmarks/update_passes.py --device cuda --bf16 --batch-size 64   # a GPU (benchmarks/compile_check.py)
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch
from torch._dynamo.utils import counters
from trl.trainer.utils import selective_log_softmax

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python benchmarks/update_passes.py` from anywhere

from benchmarks.rollout import synchronized, tiny_llama  # noqa: E402
from cory_agents.cli.errors import one_line_errors  # noqa: E402
from cory_agents.evaluation.report import check_output_file, write_json  # noqa: E402
from cory_agents.learners.lm import default_mini_batch_size, response_inputs  # noqa: E402
from cory_agents.learners.value_model import CausalLMWithValueHead  # noqa: E402
from cory_agents.speed import padding_free  # noqa: E402
from cory_agents.speed.cpu_linear import use_cpu_linear  # noqa: E402
from cory_env.models import load_causal_lm  # noqa: E402

PROMPTS = (40, 55, 47, 70)  # the widths of the prompts, in turn


def value_model(name: str, device: str, path: str | None = None) -> CausalLMWithValueHead:
    """``name``'s model (``tiny``, or ``embedded``: ``path`` if given) as a run builds a PPO learner's (module docstring)."""
    lm = tiny_llama() if name == "tiny" else load_causal_lm(path or "smollm2-135m", device=device)
    lm.config._attn_implementation = "sdpa"
    if device == "cpu":
        use_cpu_linear(lm)
    if not padding_free.enable(lm):
        raise RuntimeError(f"{name}: padding-free passes need sdpa attention")
    model = CausalLMWithValueHead(lm).to(device)
    padding_free.enable(model)
    return model


def batches(vocab: int, rows: int, response: int, device: str) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """One left-padded batch per prompt width (a third of the rows padded, up to a third of the prompt)."""
    g = torch.Generator().manual_seed(0)
    out = []
    for P in PROMPTS:
        ids = torch.randint(3, vocab, (rows, P + response), generator=g)
        mask = torch.ones_like(ids)
        for b in range(0, rows, 3):
            mask[b, : int(torch.randint(1, P // 3, (1,), generator=g))] = 0
        out.append((ids.to(device), mask.to(device)))
    return out


def passes(model, ids: torch.Tensor, mask: torch.Tensor, T: int, mini: int, bf16: bool) -> dict:
    """A pass without gradients over the batch (eval mode, as scoring) and a forward + backward over its first
    ``mini`` contexts (train mode, as a minibatch); each returns what the check compares."""

    def no_grad() -> torch.Tensor:
        model.eval()
        with torch.no_grad(), torch.autocast(ids.device.type, dtype=torch.bfloat16, enabled=bf16):
            logits, _ = model(**response_inputs(ids, mask, T))
        return logits.float()

    def with_grad() -> torch.Tensor:
        model.train()
        with torch.autocast(ids.device.type, dtype=torch.bfloat16, enabled=bf16):
            logits, values = model(**response_inputs(ids[:mini], mask[:mini], T))
        loss = selective_log_softmax(logits.float(), ids[:mini, -T:]).mean() + values.float().mean()
        loss.backward()
        return loss.detach()

    return {"no-grad pass": no_grad, "forward+backward": with_grad}


def measure(name: str, args: argparse.Namespace, path: str | None = None) -> dict:
    """The two paths' passes on ``name``'s model (:func:`value_model`), side by side (module docstring)."""
    now = synchronized(args.device)
    B = args.batch_size
    mini = args.mini_batch_size or default_mini_batch_size(B)
    eager = value_model(name, args.device, path)
    models = {"eager": eager, "compiled": torch.compile(eager, dynamic=True)}
    data = batches(eager.lm.config.vocab_size, B, args.response, args.device)

    def run(label: str, ids: torch.Tensor, mask: torch.Tensor) -> dict[str, tuple[float, torch.Tensor]]:
        out = {}
        for kind, fn in passes(models[label], ids, mask, args.response, mini, args.bf16).items():
            start = now()
            result = fn()
            out[kind] = (now() - start, result)
            eager.zero_grad(set_to_none=True)
        return out

    first = {label: run(label, *data[0]) for label in models}  # the compiles, at the first width
    compile_s = sum(t for t, _ in first["compiled"].values()) - sum(t for t, _ in first["eager"].values())
    difference = {
        kind: float((first["compiled"][kind][1] - first["eager"][kind][1]).abs().max()) for kind in first["eager"]
    }
    frames = counters["frames"]["ok"]
    times: dict[str, dict[str, list[float]]] = {label: {"no-grad pass": [], "forward+backward": []} for label in models}
    for _ in range(args.rounds):
        for ids, mask in data:
            for label in models:
                for kind, (seconds, _) in run(label, ids, mask).items():
                    times[label][kind].append(seconds)
    ms = {label: {k: 1000 * statistics.median(v) for k, v in kinds.items()} for label, kinds in times.items()}
    no_grad_passes = 1 + (mini != B)  # the reference's, and the scoring pass unless epoch 0's pass doubles as it
    per_iteration = {
        label: 2 * (no_grad_passes * m["no-grad pass"] + args.ppo_epochs * (B // mini) * m["forward+backward"])
        for label, m in ms.items()
    }
    saved = (per_iteration["eager"] - per_iteration["compiled"]) / 1000
    return {
        "ms": ms,
        "compiled/eager speed": {k: ms["eager"][k] / ms["compiled"][k] for k in ms["eager"]},
        "compile_s": compile_s,
        "minibatch": mini,
        "update_ms_per_cory_iteration": per_iteration,
        "iterations_to_win_back_the_compile": compile_s / saved if saved > 0 else None,
        "largest_difference": difference,
        "frames_compiled_at_later_widths": counters["frames"]["ok"] - frames,
    }


@one_line_errors
def main(argv: list[str]) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", nargs="+", choices=["tiny", "embedded"], default=["tiny", "embedded"])
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--bf16", action="store_true", help="bfloat16 autocast")
    p.add_argument("--batch-size", type=int, default=8, help="contexts per pass")
    p.add_argument("--response", type=int, default=10, help="response tokens per context")
    p.add_argument("--mini-batch-size", type=int, help="contexts of a forward + backward (default: as cory-train's)")
    p.add_argument("--ppo-epochs", type=int, default=1, help="passes over the batch per iteration (as cory-train's)")
    p.add_argument("--rounds", type=int, default=5, help="measured rounds over the four widths")
    p.add_argument("--out", help="also write the results here (JSON)")
    args = p.parse_args(argv)
    if args.out:
        check_output_file(args.out, example="update_passes.json")  # before the run, which writes it at the end
    results = {}
    for name in args.models:
        r = results[name] = measure(name, args)
        where = f"batch {args.batch_size}, minibatch {r['minibatch']}, {args.device}{', bf16' if args.bf16 else ''}"
        print(f"{name} ({where}):", flush=True)
        for kind, speed in r["compiled/eager speed"].items():
            print(
                f"  {kind:17s} eager {r['ms']['eager'][kind]:9.2f} ms  compiled {r['ms']['compiled'][kind]:9.2f} ms  "
                f"compiled/eager speed {speed:.2f}x"
            )
        back = r["iterations_to_win_back_the_compile"]
        print(
            f"  compile {r['compile_s']:.1f} s; a CORY iteration's update passes "
            f"{r['update_ms_per_cory_iteration']['eager']:.0f} -> {r['update_ms_per_cory_iteration']['compiled']:.0f} ms; "
            f"won back after {'never' if back is None else f'{back:.0f}'} iterations"
        )
        d = r["largest_difference"]
        print(
            f"  compiled against eager: logits {d['no-grad pass']:.2e}, loss {d['forward+backward']:.2e}; "
            f"frames compiled at later widths {r['frames_compiled_at_later_widths']}",
            flush=True,
        )
    if args.out:
        write_json(args.out, {"settings": vars(args), "results": results})


if __name__ == "__main__":
    main()
