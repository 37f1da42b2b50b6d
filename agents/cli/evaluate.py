"""Evaluate a trained policy (or a model as it is) on held-out prompts.

Each learner answers the held-out prompts alone, as the pioneer, k times per prompt; reported:
mean task reward, KL to the reference, combined reward, distinct-1/2 and repetition rate
(signs of distribution collapse), and pass@1 / pass@k where answers are right or wrong (gsm8k).

    cory-eval --checkpoint runs/cory                        # every learner of a run
    cory-eval --checkpoint runs/cory --learners llm_0 --samples-per-prompt 4
    cory-eval --model smollm2-135m --num-prompts 32         # the model before training
    cory-eval --model runs/cory/model/llm_0                 # an exported policy (KL not known: 0)
    cory-eval --checkpoint runs/gsm8k --samples-per-prompt 8 --out gsm8k_eval.json

A team trained on the signalling game (``--task signal``) is measured in that game instead
(cory_agents.evaluation.communication): its success with an exact interval and p-value against chance,
its success with another secret's message, how often the message changes the answer, the mutual
information of secret and message, and the secret x message x answer table.

Writes JSON (default: <run>/evaluation.json) and prints a table. ``python examples/evaluate.py`` is
the same command.
"""

from __future__ import annotations

import argparse

from transformers import HfArgumentParser

from cory_agents.cli.errors import RETIRED_EVAL_FLAGS, add_debug_flag, one_line_errors, refuse_retired_flags
from cory_agents.evaluation.communication import format_measures
from cory_agents.evaluation.held_out import EvalConfig, evaluate, format_result


def build_parser() -> HfArgumentParser:
    parser = HfArgumentParser(EvalConfig, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    return add_debug_flag(refuse_retired_flags(parser, RETIRED_EVAL_FLAGS, version="0.3"))


@one_line_errors
def main(argv: list[str] | None = None) -> None:
    (config,) = build_parser().parse_args_into_dataclasses(args=argv)  # EvalConfig's checks raise UsageError
    result = evaluate(config)
    if "communication" in result:  # a team on the signalling game
        print(format_measures(result["communication"], result["policy"]["checkpoint"]))
    else:
        print(format_result(result))
    print(f"\nwritten: {result['path']}")


if __name__ == "__main__":
    main()
