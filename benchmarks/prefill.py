"""Prompt prefill of a rollout: padding-free (the default) against the padded batch.

A rollout's first forward pass per turn runs each learner's prompts through the model to fill
its KV cache. :class:`cory_agents.acting.actor.LMActor` runs it padding-free when the model has
:mod:`cory_agents.speed.padding_free` enabled: each context's real tokens only, and the tokens contexts
start with in common (a template's head, a GRPO group's prompt) once; the cache is then laid out
as a padded prefill leaves it. This script plays one rollout of the trainer at the given
settings, keeps the observation each agent prefilled, and then times that prefill with the
policy as it is and with a copy whose attention is plain sdpa (the padded prefill), alternating
the two ``--rounds`` times in one process. It prints the medians, their ratio, and how far the
next-token logits of the two are apart.

    python benchmarks/prefill.py                                       # sentiment, CORY, batch 8
    python benchmarks/prefill.py --task gsm8k                          # the one-shot GSM8K prompts
    python benchmarks/prefill.py --task gsm8k --learner grpo --group-size 4
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", default="sentiment", choices=("sentiment", "gsm8k"), help="whose prompts")
    p.add_argument("--learner", default="ppo", choices=("ppo", "grpo", "rloo"), help="grpo/rloo: grouped prompts")
    p.add_argument("--group-size", type=int, default=4, help="grpo/rloo: responses per prompt")
    p.add_argument("--batch-size", type=int, default=8, help="conversations per rollout")
    p.add_argument("--new-tokens", type=int, default=0, help="tokens per pioneer response (0: 10, or 48 for gsm8k)")
    p.add_argument("--rounds", type=int, default=7, help="alternating timings of each prefill")
    p.add_argument("--model", default="smollm2-135m", help="model name or path")
    args = p.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import torch

    from cory_agents.acting.actor import LMActor
    from cory_agents.training.config import TrainConfig
    from cory_agents.training.trainer import Trainer
    from cory_env.models import hugging_face_model

    tokens = args.new_tokens or (48 if args.task == "gsm8k" else 10)
    settings = dict(
        algo="cory",
        task=args.task,
        learner=args.learner,
        group_size=args.group_size,
        model=args.model,
        batch_size=args.batch_size,
        mini_batch_size=args.batch_size,
        min_new_tokens=tokens,
        max_new_tokens=tokens,
        device="cpu",
        checkpoint_every=10**6,
        report_to="none",
    )
    if args.task == "sentiment":
        settings["prompt_source"] = "rotten_tomatoes"
    prefilled: dict[str, dict[str, np.ndarray]] = {}
    act = LMActor.next_token_logits

    def keep_first(actor: LMActor, agent: str, observation: dict[str, np.ndarray]) -> torch.Tensor:
        if int(observation["past_length"][0]) == 0:
            prefilled.setdefault(agent, {k: np.array(v) for k, v in observation.items()})
        return act(actor, agent, observation)

    with tempfile.TemporaryDirectory() as out:
        trainer = Trainer(TrainConfig(**settings, out=out))
        LMActor.next_token_logits = keep_first
        try:
            trainer.rollout()
        finally:
            LMActor.next_token_logits = act
    print(f"settings: {settings}")
    total = {"padding-free": 0.0, "padded": 0.0}
    for agent, observation in prefilled.items():
        packed_model = trainer.learners[agent].actor.model
        padded_model = copy.deepcopy(packed_model)
        hugging_face_model(padded_model).set_attn_implementation("sdpa")
        actors = {"padding-free": LMActor(packed_model), "padded": LMActor(padded_model)}
        times: dict[str, list[float]] = {name: [] for name in actors}
        logits = {}
        for _ in range(args.rounds + 1):  # the first round warms up
            for name, actor in actors.items():
                actor.forget()
                start = time.perf_counter()
                with torch.no_grad():
                    logits[name] = actor.next_token_logits(agent, observation)
                times[name].append(time.perf_counter() - start)
        mask = observation["attention_mask"]
        width = int(observation["num_new_tokens"][0])
        median = {name: statistics.median(t[1:]) for name, t in times.items()}
        for name in total:
            total[name] += median[name]
        gap = float((logits["padding-free"] - logits["padded"]).abs().max())
        print(
            f"{agent}: {mask.shape[0]} prompts, {int(mask.sum())} real tokens in {mask.shape[0]} x {width} columns: "
            f"padding-free {median['padding-free']:.3f} s, padded {median['padded']:.3f} s, "
            f"ratio {median['padding-free'] / median['padded']:.2f}x; next-token logits apart by at most {gap:.1e}"
        )
    print(
        f"both prefills: padding-free {total['padding-free']:.3f} s, padded {total['padded']:.3f} s, "
        f"ratio {total['padding-free'] / total['padded']:.2f}x"
    )


if __name__ == "__main__":
    main()
