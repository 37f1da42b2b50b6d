"""A tiny CORY run, stopped after a checkpoint and run on, written as golden data.

``python -m tests.support.old_checkpoint OUT`` trains a toy CORY run for 2 iterations (the toy model in
``OUT/toy_model``, named by that relative path) and keeps that run folder, its checkpoint after
iteration 2 included, as ``OUT/stopped``; then it trains the same run whole, 4 iterations, and
keeps its metrics as ``OUT/whole_metrics.csv`` (without the timings).
``tests/data/checkpoint_before_the_move`` holds what cory-env wrote so at 7662da4, before
``agents/`` became subpackages.

``python -m tests.support.old_checkpoint --resume DIR`` writes the toy model into ``DIR`` and resumes
``DIR/stopped`` to 4 iterations with the code at hand: test_checkpoint checks that today's code
goes on from the old checkpoint exactly as the old code went on.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pandas as pd
import torch

from tests.support.toy import fraction_good, save_tiny_llama, toy_tokenizer

try:  # today's layout
    from cory_agents.training.config import TrainConfig
    from cory_agents.training.trainer import Trainer
except ImportError:  # cory-env before the move (7662da4)
    from agents.trainer import TrainConfig, Trainer

PROMPTS = ["the movie was", "the plot is", "acting is very"]


def config(out: str, iterations: int, **kw) -> TrainConfig:
    return TrainConfig(
        model="toy_model",
        iterations=iterations,
        batch_size=8,
        mini_batch_size=4,
        ppo_epochs=2,
        lr=1e-2,
        kl_coef=0.05,
        min_new_tokens=3,
        max_new_tokens=6,
        out=out,
        report_to="none",
        checkpoint_every=2,
        context_length=48,
        role_exchange_period=1,
        save_model=False,
        **kw,
    )


def main(out: Path) -> None:
    torch.set_num_threads(1)
    out.mkdir(parents=True, exist_ok=True)
    os.chdir(out)
    save_tiny_llama(Path("toy_model"), toy_tokenizer())
    Trainer(config("stopped", 2), prompts=PROMPTS, reward_fn=fraction_good).train(progress=False)
    Trainer(config("whole", 4), prompts=PROMPTS, reward_fn=fraction_good).train(progress=False)
    metrics = pd.read_csv("whole/metrics.csv").drop(columns=["tokens_per_s", "seconds"])
    metrics.to_csv("whole_metrics.csv", index=False, float_format="%.17g")
    shutil.rmtree("whole")
    shutil.rmtree("toy_model")
    for plot in Path("stopped").glob("*.png"):
        plot.unlink()


def resume(folder: Path) -> None:
    torch.set_num_threads(1)
    os.chdir(folder)
    save_tiny_llama(Path("toy_model"), toy_tokenizer())
    Trainer(config("stopped", 4, resume=True), prompts=PROMPTS, reward_fn=fraction_good).train(progress=False)


if __name__ == "__main__":
    if sys.argv[1] == "--resume":
        resume(Path(sys.argv[2]).resolve())
    else:
        main(Path(sys.argv[1]).resolve())
