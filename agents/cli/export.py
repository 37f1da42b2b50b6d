"""Write a checkpoint's policies as Hugging Face models (what a finished run leaves in --out/model).

    cory-export --checkpoint runs/cory                 # -> runs/cory/model/<learner>
    cory-export --checkpoint runs/cory/checkpoints/iter_000009.safetensors --out exported

For a run stopped before its end, or trained with --save-model false. Each learner's folder
loads with ``AutoModelForCausalLM.from_pretrained`` (with --lora: ``PeftModel.from_pretrained``
on the base the adapter names); see agents/training/export.py. ``python examples/export_model.py``
is the same command.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from cory_agents.cli.errors import add_debug_flag, one_line_errors
from cory_agents.evaluation.held_out import find_checkpoint, policy_from_checkpoint, run_folder
from cory_agents.training.checkpoint import load_checkpoint
from cory_agents.training.export import MODEL_DIR


def _no_reward(queries: list[str], responses: list[str], **_: object) -> list[float]:
    return [0.0] * len(responses)  # exporting plays no episode


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--checkpoint", required=True, help="a run's --out folder (its newest checkpoint) or a checkpoint file"
    )
    parser.add_argument(
        "--out", default="", help=f"where to write <learner>/ folders (default: the run's {MODEL_DIR}/)"
    )
    parser.add_argument(
        "--trust-checkpoint",
        action="store_true",
        help="also load an old pickle checkpoint (iter_NNNNNN.pt): only your own files, as a pickle "
        "can run code; python -m cory_agents.training.checkpoint convert rewrites one in the safe format",
    )
    parser.add_argument(
        "--device",
        default="cpu",
        help="where to rebuild the models (cpu is enough to export; cuda for a --load-in-4bit run)",
    )
    return add_debug_flag(parser)


@one_line_errors
def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    path = find_checkpoint(args.checkpoint)
    state = load_checkpoint(path, trust=args.trust_checkpoint)
    trainer = policy_from_checkpoint(state, reward_fn=_no_reward, device=args.device)
    out = Path(args.out) if args.out else run_folder(path) / MODEL_DIR
    for name, folder in trainer.save_model(out).items():
        print(f"{name}: {folder}")


if __name__ == "__main__":
    main()
