"""Toy training runs: the tiny model (the ``toy_model`` fixture) on the toy task, in process
(:func:`toy_config`) or through examples/train_cory.py (:func:`cli`, :func:`toy_cli_args`)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from cory_agents.training.config import TrainConfig
from tests.support import ROOT

PROMPTS = ["the movie was", "the plot is", "acting is very"]


def toy_config(model: Path, out: Path, **kw) -> TrainConfig:
    defaults = dict(
        model=str(model),
        iterations=12,
        batch_size=16,
        mini_batch_size=8,
        ppo_epochs=4,
        lr=1e-2,
        kl_coef=0.05,
        min_new_tokens=6,
        max_new_tokens=6,
        out=str(out),
        report_to="none",
        checkpoint_every=100,
        context_length=48,
    )
    defaults.update(kw)
    return TrainConfig.for_learner(defaults.get("learner", TrainConfig.learner))(**defaults)


def reward_curve(out: Path, learner: str) -> np.ndarray:
    return pd.read_csv(out / "metrics.csv")[f"{learner}/task_reward_mean"].to_numpy()


#: Seeds over which a team's learning is judged (:func:`rise_over_seeds`).
LEARNING_SEEDS = (0, 1, 2)


def rise_over_seeds(train, out: Path, learners, seeds=LEARNING_SEEDS, window: int = 3) -> dict[str, float]:
    """Each learner's rise in task reward (mean of the last ``window`` iterations minus the first ``window``),
    averaged over runs at ``seeds``: ``train(seed, folder)`` trains one run into ``folder``.

    At the toy's learning rate of 1e-2 and no KL penalty, one learner of a chain of three sometimes collapses
    in a single run (HAPPO: 3 of 16 runs, independent PPO: 2 of 16; 8 seeds on two kernel paths, measured
    2026-12-04), and which run does depends on how the CPU rounds. A claim that every learner learns is a
    claim about the algorithm, not about one trajectory: it is judged over seeds.
    """
    rises: dict[str, list[float]] = {learner: [] for learner in learners}
    for seed in seeds:
        folder = out / f"seed{seed}"
        train(seed, folder)
        for learner in learners:
            curve = reward_curve(folder, learner)
            rises[learner].append(curve[-window:].mean() - curve[:window].mean())
    return {learner: float(np.mean(values)) for learner, values in rises.items()}


def team_rises(model: Path, out: Path, learner: str, num_agents: int) -> dict[str, float]:
    """:func:`rise_over_seeds` of a chain of ``num_agents`` that ``learner`` (a team learner) trains on the toy
    task: 14 iterations and no KL penalty, as the chain-of-three test of independent PPO
    (tests/agents/training/test_teams.py), so that it measures learning alone."""
    from cory_agents.training.trainer import Trainer
    from tests.support.toy import fraction_good

    def train(seed: int, folder: Path) -> None:
        config = toy_config(
            model,
            folder,
            algo="cory",
            learner=learner,
            num_agents=num_agents,
            iterations=14,
            kl_coef=0.0,
            seed=seed,
            save_model=False,
        )
        Trainer(config, prompts=PROMPTS, reward_fn=fraction_good).train(progress=False)

    return rise_over_seeds(train, out, [f"llm_{i}" for i in range(num_agents)])


def cli(*args: str) -> list[str]:
    return [sys.executable, str(ROOT / "examples" / "train_cory.py"), *args]


def cli_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}


def toy_cli_args(model: Path, out: Path, *extra: str) -> list[str]:
    return [
        "--model",
        str(model),
        "--reward",
        "tests.support.toy:fraction_good",
        "--prompt-source",
        "rotten_tomatoes",
        "--batch-size",
        "4",
        "--mini-batch-size",
        "2",
        "--ppo-epochs",
        "2",
        "--lr",
        "1e-2",
        "--min-new-tokens",
        "3",
        "--max-new-tokens",
        "5",
        "--context-length",
        "48",
        "--out",
        str(out),
        "--report-to",
        "none",
        *extra,
    ]


def metrics_without_timing(out: Path) -> pd.DataFrame:
    return pd.read_csv(out / "metrics.csv").drop(columns=["tokens_per_s", "seconds"])


def toy_bench_args(model: Path, out: Path, *extra: str) -> list[str]:
    """cory-bench's flags for a benchmark of the toy model in ``out`` (a few seconds a run), then ``extra``."""
    return [
        "--model",
        str(model),
        "--reward",
        "tests.support.toy:fraction_good",
        "--prompt-source",
        "rotten_tomatoes",
        "--batch-size",
        "4",
        "--mini-batch-size",
        "2",
        "--ppo-epochs",
        "1",
        "--lr",
        "3e-2",
        "--min-new-tokens",
        "3",
        "--max-new-tokens",
        "4",
        "--context-length",
        "48",
        "--report-to",
        "none",
        "--eval-prompts",
        "4",
        "--eval-samples-per-prompt",
        "2",
        "--eval-batch-size",
        "8",
        "--progress",
        "false",
        "--out",
        str(out),
        *extra,
    ]
