"""Tiny runs of a chain of two (CORY, CORY with LoRA, CORY with one minibatch per epoch) and of
PPO, written as golden data.

``python -m tests.support.chain_of_two OUT`` trains them on one thread and writes each run's metrics
(without its timings) and samples to OUT. ``tests/data/chain_of_two`` holds what the code wrote
before chains of N agents existed (cory-env at 12ce942; cory_one_minibatch was added later, by
this script run on that commit): test_teams checks that a chain of two still trains bit for bit
as it did.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import pandas as pd
import torch

from cory_agents.training.config import TrainConfig
from cory_agents.training.trainer import Trainer
from tests.support.toy import fraction_good, save_tiny_llama, toy_tokenizer

#: Each run's settings beside the common ones; in cory_one_minibatch a minibatch is the whole batch
#: (PPO's first training pass then doubles as its scoring pass: cory_agents.speed.scoring_reuse).
RUNS = {
    "cory": {},
    "cory_lora": dict(lora=True),
    "ppo": dict(algo="ppo"),
    "cory_one_minibatch": dict(mini_batch_size=8),
}


def main(out: Path) -> None:
    torch.set_num_threads(1)
    out.mkdir(parents=True, exist_ok=True)
    model = save_tiny_llama(Path(tempfile.mkdtemp()) / "m", toy_tokenizer())
    for name, kw in RUNS.items():
        run = Path(tempfile.mkdtemp()) / name
        config = TrainConfig(
            **(
                dict(
                    model=str(model),
                    iterations=4,
                    batch_size=8,
                    mini_batch_size=4,
                    ppo_epochs=2,
                    lr=1e-2,
                    kl_coef=0.05,
                    min_new_tokens=3,
                    max_new_tokens=6,
                    out=str(run),
                    report_to="none",
                    checkpoint_every=100,
                    context_length=48,
                    role_exchange_period=1,
                    save_model=False,
                )
                | kw
            )
        )
        Trainer(config, prompts=["the movie was", "the plot is", "acting is very"], reward_fn=fraction_good).train(
            progress=False
        )
        metrics = pd.read_csv(run / "metrics.csv").drop(columns=["tokens_per_s", "seconds"])
        metrics.to_csv(out / f"{name}_metrics.csv", index=False, float_format="%.17g")
        (out / f"{name}_samples.jsonl").write_text((run / "samples.jsonl").read_text())


if __name__ == "__main__":
    main(Path(sys.argv[1]))
