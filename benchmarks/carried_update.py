"""A learner's update over a chat game of several rounds, carried context against afresh, side by side in one run.

The same game (the embedded model, chat form, ``--conversations`` conversations of ``--rounds`` rounds,
``--new-tokens`` tokens a turn) is played twice: with the carried context (an agent's later turn holds its
earlier one, masked columns included) and afresh (every turn rendered anew, ``ChatForm(carry=False)``).
The observer's episode of each is then learned from by one PPO learner (padding-free passes, as a run
builds it; 4 epochs, minibatches of ``--mini-batch-size`` rows, as benchmarks/iteration.py), from the same
state each time, the two forms alternating ``--repeats`` times. It prints each episode's real tokens and
width, each update's seconds, and the carried / afresh ratio of the medians.

    HF_HUB_OFFLINE=1 PYTHONPATH=. python benchmarks/carried_update.py
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python benchmarks/carried_update.py` from anywhere

import cory_env  # noqa: E402
from cory_agents.acting.actor import LMActor  # noqa: E402
from cory_agents.learners.base import Episode  # noqa: E402
from cory_agents.learners.ppo import PPOConfig, PPOLearner  # noqa: E402
from cory_agents.learners.value_model import CausalLMWithValueHead  # noqa: E402
from cory_agents.speed import padding_free  # noqa: E402
from cory_env.chat_prompts import ChatForm  # noqa: E402
from cory_env.models import load_causal_lm, load_tokenizer  # noqa: E402

FORM = ChatForm(system=["Continue the review.", "Improve your partner's review."])
PROMPTS = ["The film was", "A long day of", "I watched it twice and", "Nobody told me that"]


def zero(queries, responses, **_):
    return [0.0] * len(responses)


def played(model, tokenizer, carry: bool, args: argparse.Namespace) -> Episode:
    """The observer's episode of the game played with (``carry``) or without the carried context."""
    game = cory_env.raw_env(
        tokenizer=tokenizer, prompts=PROMPTS, reward_fn=zero, chat=dataclasses.replace(FORM, carry=carry),
        rounds=args.rounds, num_conversations=args.conversations, max_new_tokens=args.new_tokens, context_length=256,
    )  # fmt: skip
    game.reset(seed=0)
    actor = LMActor(model, generator=torch.Generator().manual_seed(1))
    for agent in game.agent_iter():
        observation, _, done, _, _ = game.last()
        game.step(None if done else actor.step(agent, observation).tokens.numpy())
    return Episode.from_turns(game.played_turns("observer"), {})


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2-135m", help="model name or path")
    p.add_argument("--rounds", type=int, default=2, help="rounds of the game")
    p.add_argument("--conversations", type=int, default=8, help="conversations per batch")
    p.add_argument("--new-tokens", type=int, default=10, help="tokens per turn at most")
    p.add_argument("--mini-batch-size", type=int, default=8, help="rows per minibatch")
    p.add_argument("--repeats", type=int, default=3, help="updates of each form, alternating")
    args = p.parse_args()
    model, tokenizer = load_causal_lm(args.model).eval(), load_tokenizer(args.model)
    episodes = {"carried": played(model, tokenizer, True, args), "afresh": played(model, tokenizer, False, args)}
    for form, ep in episodes.items():
        print(f"{form}: {int(ep.attention_mask.sum())} real tokens in {tuple(ep.input_ids.shape)} (rows, columns)")
    reference = load_causal_lm(args.model).requires_grad_(False)
    policy = CausalLMWithValueHead(load_causal_lm(args.model))
    padding_free.enable(reference)
    padding_free.enable(policy)
    learner = PPOLearner(policy, reference, PPOConfig(mini_batch_size=args.mini_batch_size, ppo_epochs=4), seed=3)
    state = copy.deepcopy(learner.state_dict())
    seconds: dict[str, list[float]] = {form: [] for form in episodes}
    for _ in range(args.repeats):
        for form, ep in episodes.items():
            learner.load_state_dict(state)
            start = time.perf_counter()
            learner.learn(ep)
            seconds[form].append(time.perf_counter() - start)
            print(f"  {form} update {seconds[form][-1]:.2f} s", flush=True)
    medians = {form: statistics.median(s) for form, s in seconds.items()}
    print(f"carried / afresh update: {medians['carried'] / medians['afresh']:.2f}x ({medians})")


if __name__ == "__main__":
    main()
