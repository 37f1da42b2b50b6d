"""Difference rewards with and without common random numbers: the variance of the pioneer's signal, measured.

The pioneer's difference reward in CORY's chain of two is ``D = r^p + (r^o - r'^o)``: its own reward plus
what its answer added to the observer's, ``r'^o`` the observer's reward when the chain is replayed with the
pioneer's answer blank (:mod:`cory_agents.learners.difference`). The replay either reuses the episode's
random numbers (common random numbers, CRN: the observer samples from its generator as it stood when its
turn began in the episode) or draws fresh ones. This script plays ``--episodes`` episodes of the embedded
model (the policies as loaded: nothing learns), and for each replays the observer's turn once with CRN and
``--fresh`` times with fresh samples. It prints, per task, over every conversation of every episode:

- ``Var[r^o - r'^o]``, the observer term, and ``Var[D]``, with CRN and with one fresh replay; their ratio;
- with the mean of ``--fresh`` fresh replays (``--difference-replays K``, each a turn more);
- the share of conversations whose observer term is exactly 0 (the blank changed nothing the observer said);
- the replay noise: the variance of ``r'^o`` between fresh replays of the same conversation (zero with CRN,
  which is deterministic given the episode).

    python studies/difference_variance.py                       # sentiment and signal, 4 episodes each
    python studies/difference_variance.py --task signal --episodes 2 --batch-size 8
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python studies/difference_variance.py` from anywhere

from cory_agents.learners.replay import replay  # noqa: E402
from cory_agents.training.config import TrainConfig  # noqa: E402
from cory_agents.training.trainer import Trainer  # noqa: E402

#: Each task's flags beyond the defaults (the signalling game needs its own reward and prompts).
TASKS = {"sentiment": {}, "signal": {"task": "signal", "reward": "signal", "prompt_source": "auto"}}


def measure(task: str, episodes: int, fresh: int, batch_size: int, seed: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as out:
        config = TrainConfig(
            algo="cory", learner="difference", batch_size=batch_size, seed=seed, out=out, report_to="none",
            **TASKS[task],
        )  # fmt: skip
        trainer = Trainer(config)
        terms: dict[str, list[np.ndarray]] = {"crn": [], "fresh": [], "fresh_mean": [], "own": [], "noise": []}
        for _ in range(episodes):
            team = trainer.team_episode(trainer.rollout())
            pioneer, observer = team.order
            observed = team.episodes[observer].task_rewards
            blank = {0: [""] * batch_size}
            with team.acting():
                common = replay(team, trainer.learners, blank).task_rewards([observer])
                samples = [
                    replay(team, trainer.learners, blank, common_random_numbers=False).task_rewards([observer])
                    for _ in range(fresh)
                ]
            terms["own"].append(team.episodes[pioneer].task_rewards)
            terms["crn"].append(observed - common)
            terms["fresh"].append(observed - samples[0])
            terms["fresh_mean"].append(observed - np.mean(samples, axis=0))
            terms["noise"].append(np.var(samples, axis=0, ddof=1))
    own = np.concatenate(terms["own"])
    result = {"conversations": float(len(own)), "fresh_replays": float(fresh)}
    for name in ("crn", "fresh", "fresh_mean"):
        term = np.concatenate(terms[name])
        result[f"var_term_{name}"] = float(np.var(term, ddof=1))
        result[f"var_D_{name}"] = float(np.var(own + term, ddof=1))
    result["zero_term_crn"] = float(np.mean(np.concatenate(terms["crn"]) == 0))
    result["zero_term_fresh"] = float(np.mean(np.concatenate(terms["fresh"]) == 0))
    result["replay_noise_fresh"] = float(np.mean(np.concatenate(terms["noise"])))
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", choices=sorted(TASKS), nargs="+", default=sorted(TASKS))
    parser.add_argument("--episodes", type=int, default=4)
    parser.add_argument("--fresh", type=int, default=4, help="fresh replays per episode (K)")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    for task in args.task:
        r = measure(task, args.episodes, args.fresh, args.batch_size, args.seed)
        n, k = int(r["conversations"]), int(r["fresh_replays"])
        print(f"\n{task}: {n} conversations ({args.episodes} episodes x {args.batch_size}), the embedded model")
        print("| replay | Var[r^o - r'^o] | Var[D] | term exactly 0 |")
        print("|---|---|---|---|")
        print(f"| common random numbers | {r['var_term_crn']:.4f} | {r['var_D_crn']:.4f} | {r['zero_term_crn']:.0%} |")
        print(f"| fresh, 1 replay | {r['var_term_fresh']:.4f} | {r['var_D_fresh']:.4f} | {r['zero_term_fresh']:.0%} |")
        print(f"| fresh, mean of {k} | {r['var_term_fresh_mean']:.4f} | {r['var_D_fresh_mean']:.4f} | |")
        ratio = r["var_D_fresh"] / r["var_D_crn"] if r["var_D_crn"] else float("inf")
        print(f"Var[D] fresh / CRN: {ratio:.2f}x; replay noise Var[r'^o] between fresh replays: "
              f"{r['replay_noise_fresh']:.4f} (CRN: 0, the replay is the episode's given its random numbers)")  # fmt: skip


if __name__ == "__main__":
    main()
