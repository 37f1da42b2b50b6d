"""Fine-tune a language model with CORY (or single-agent PPO) through the environment.

With no flags it trains on the embedded default, fully offline: SmolLM2-135M, movie-review
prefixes (Rotten Tomatoes offline, IMDB where available), VADER sentiment reward.

    cory-train                                  # CORY, embedded default
    cory-train --algo ppo --out runs/ppo        # the single-agent baseline
    cory-train --learner grpo --group-size 4    # critic-free learners (grpo, rloo) instead of PPO
    cory-train --learner grpo --help            # the flags of the grpo learner's section
    cory-train --learner happo --num-agents 3   # a multi-agent algorithm: the team learns at once
    cory-train --preset paper-imdb --device cuda --out runs/paper
    cory-train --out runs/cory --resume         # continue after a crash
    python examples/plot_runs.py --run PPO=runs/ppo --run CORY=runs/cory --out cmp.png

``python examples/train_cory.py`` is the same command.

On several GPUs (data parallel: each process plays --batch-size conversations), see docs/scale-out.md:

    accelerate launch --config_file examples/accelerate/multi_gpu.yaml examples/train_cory.py --out runs/cory

Writes to --out: metrics.csv (+ TensorBoard events; other trackers: --report-to), samples.jsonl, task_reward.png,
kl.png, combined_reward.png, config.json, checkpoints/, and model/<learner>/ (each trained policy
as a Hugging Face model, from_pretrained-ready; cory-export writes it from a checkpoint).
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from transformers import HfArgumentParser

from cory_agents.cli.errors import add_debug_flag, one_line_errors, refuse_retired_flags
from cory_agents.distributed.data_parallel import process_rank
from cory_agents.evaluation.statistics import reward_rise
from cory_agents.training.config import TrainConfig, learners_taking, sections_for
from cory_agents.training.export import MODEL_DIR
from cory_agents.training.metrics import read_metrics
from cory_agents.training.ownership import check_run_folder
from cory_agents.training.plots import learner_columns
from cory_agents.training.run_lock import RunLock
from cory_agents.training.trainer import Trainer
from cory_env.errors import UsageError


class _HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """Keeps the description's example lines as written and shows every flag's default."""


def build_parser(learner: str = TrainConfig.learner) -> HfArgumentParser:
    """The command line: :class:`TrainConfig`'s sections parsed together, the learner's own config
    for ``--learner learner``; each flag's help text is its field's (also docs/cli.md)."""
    parser = HfArgumentParser(sections_for(learner), description=__doc__, formatter_class=_HelpFormatter)
    return add_debug_flag(refuse_retired_flags(parser))


def grpo_parser() -> HfArgumentParser:
    """``cory-train --learner grpo``'s command line (its learner section is GRPO's): docs/cli.md."""
    return build_parser("grpo")


def happo_parser() -> HfArgumentParser:
    """``cory-train --learner happo``'s command line (PPO's learner section and ``--happo-factor-clip``): docs/cli.md."""
    return build_parser("happo")


def mappo_parser() -> HfArgumentParser:
    """``cory-train --learner mappo``'s command line (PPO's settings and the critic's): docs/cli.md."""
    return build_parser("mappo")


def chosen_learner(argv: list[str]) -> str:
    """``--learner``'s value on the command line, read before the rest: it chooses the learner's section."""
    first = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    first.add_argument("--learner", default=TrainConfig.learner)
    return first.parse_known_args(argv)[0].learner


def parse_config(argv: list[str] | None = None) -> TrainConfig:
    """The run's :class:`TrainConfig` from the command line (``sys.argv`` by default). A flag of another
    learner's section fails with a :class:`~cory_env.errors.UsageError` that names the learners that take it."""
    argv = sys.argv[1:] if argv is None else list(argv)
    learner = chosen_learner(argv)
    *parsed, unused = build_parser(learner).parse_args_into_dataclasses(args=argv, return_remaining_strings=True)
    for arg in unused:
        if owners := learners_taking(arg):
            raise UsageError(
                f"{arg.split('=')[0]} is a setting of --learner {', '.join(owners)}, not of --learner "
                f"{learner}: drop it, or choose that learner (cory-train --learner {owners[0]} --help)"
            )
    if unused:
        build_parser(learner).error(f"unrecognized arguments: {' '.join(unused)}")
    return TrainConfig.from_sections(*parsed)


def learning_summary(out: Path, batch_size: int, k: int = 3) -> list[str]:
    """One line per learner: task reward and KL at the start and at the end of the run (the means of
    the first and the last ``k`` iterations), and the rise in standard errors (cory_agents.evaluation.statistics)."""
    df = read_metrics(out)
    k = min(k, len(df) // 2)
    if k < 1:
        return []
    lines = []
    for learner, col in learner_columns(df, "task_reward_mean").items():
        rise = reward_rise(df[col], df[f"{learner}/task_reward_std"], batch_size, k)
        kl = df[f"{learner}/kl"]
        lines.append(
            f"{learner}: task reward {rise['first']:.3f} -> {rise['last']:.3f} ({rise['z']:+.1f} standard errors), "
            f"KL {kl[:k].mean():.3f} -> {kl[-k:].mean():.3f}"
        )
    return [f"start -> end (means of the first and the last {k} iterations):", *lines]


@one_line_errors
def main(argv: list[str] | None = None) -> None:
    config = parse_config(argv)
    # The package's own messages (data source used, resuming, ...) on stderr, above the progress bar.
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    for name in ("cory_agents", "cory_env"):
        logging.getLogger(name).setLevel(logging.INFO)
        logging.getLogger(name).addHandler(handler)
    if process_rank() == 0:  # the process that will hold the lock (the launch's main one)
        check_run_folder(Path(config.out))  # a user's file where the run writes: refused before the models load
        RunLock(config.out).check_free()  # before the models load: a folder another run holds fails at once
    trainer = Trainer(config)
    out = trainer.train()
    trainer.data_parallel.close()  # every process, the run over: no backend torn down at exit
    if trainer.stop_status:  # Ctrl-C or SIGTERM: a checkpoint after the iteration (cory_agents.training.interrupt)
        sys.exit(trainer.stop_status)
    if not trainer.data_parallel.is_main_process:
        return
    print("", *learning_summary(out, trainer.config.batch_size * trainer.data_parallel.num_processes), sep="\n")
    print(f"\nmetrics: {out / 'metrics.csv'}  samples: {out / 'samples.jsonl'}")
    print(f"plots:   {out / 'task_reward.png'}, {out / 'kl.png'}, {out / 'combined_reward.png'}")
    print(f"checkpoints: {out / 'checkpoints'} (resume with --resume --out {out})")
    if trainer.config.save_model:
        models = ", ".join(str(out / MODEL_DIR / name) for name in trainer.learners)
        kind = (
            "PeftModel.from_pretrained(base, path)" if trainer.config.lora else "AutoModelForCausalLM.from_pretrained"
        )
        print(f"models:  {models} ({kind})")


if __name__ == "__main__":
    main()
