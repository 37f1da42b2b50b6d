"""The environment's own cost per token step, beside one forward pass of the model.

Both are measured in the same run, interleaved round by round (the machine is shared
and noisy), at the same batch size:

* environment: whole batched episodes of the full training stack
  (RoleExchange(CollectiveReward(env)) with PettingZoo's order enforcing), random
  token actions, no model; time per token step includes ``last()``/``observe``,
  resets (prompt sampling, tokenization), turn ends (decoding, a trivial reward);
* model: one incremental forward pass (KV cache, one new token per conversation) of
  the embedded SmolLM2-135M, the cost the environment's step sits beside in a rollout.

Target: the environment costs under 2% of the model's forward per token at B=16, in a game of
one round and of several (``--game-rounds 2 --turn-rewards``: each turn's prompt rendered from
the transcript, a reward per turn).

    python benchmarks/env_overhead.py --batch-size 16
    python benchmarks/env_overhead.py --batch-size 16 --game-rounds 2 --turn-rewards
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch
from transformers import DynamicCache

from cory_env import CollectiveRewardWrapper, RoleExchangeWrapper, env
from cory_env.models import EMBEDDED_MODEL, load_causal_lm, load_tokenizer
from cory_env.tasks.sentiment import sentiment_prompts


def length_reward(queries, responses, **_):
    return [float(len(r)) for r in responses]


def env_seconds_per_step(game, episodes: int, rng: np.random.Generator) -> float:
    steps, start = 0, time.perf_counter()
    for _ in range(episodes):
        game.reset()
        for _agent in game.agent_iter():
            obs, reward, term, trunc, info = game.last()
            if term:
                game.step(None)
            else:
                game.step(rng.integers(0, 1000, size=obs["input_ids"].shape[0]))
                steps += 1
    return (time.perf_counter() - start) / steps


@torch.no_grad()
def model_seconds_per_step(model, batch: int, prompt_len: int, new_tokens: int) -> float:
    cache = DynamicCache()
    ids = torch.randint(100, 1000, (batch, prompt_len))
    model(input_ids=ids, cache=cache, use_cache=True, logits_to_keep=1)
    start = time.perf_counter()
    for _ in range(new_tokens):
        ids = torch.randint(100, 1000, (batch, 1))
        model(input_ids=ids, cache=cache, use_cache=True, logits_to_keep=1)
    return (time.perf_counter() - start) / new_tokens


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch-size", type=int, default=16, help="conversations in lockstep (B)")
    p.add_argument("--max-new-tokens", type=int, default=15, help="tokens per response")
    p.add_argument("--rounds", type=int, default=5, help="interleaved measurement rounds")
    p.add_argument("--episodes", type=int, default=20, help="environment episodes per round")
    p.add_argument("--model", default=EMBEDDED_MODEL, help="model for the forward-pass reference")
    p.add_argument("--game-rounds", type=int, default=1, help="rounds the chain plays per episode (the env's rounds)")
    p.add_argument("--turn-rewards", action="store_true", help="reward every turn at its end")
    args = p.parse_args()

    tokenizer = load_tokenizer(args.model)
    model = load_causal_lm(args.model).eval()
    game = RoleExchangeWrapper(
        CollectiveRewardWrapper(
            env(
                tokenizer=tokenizer,
                prompts=sentiment_prompts(tokenizer, source="rotten_tomatoes"),
                reward_fn=length_reward,
                num_conversations=args.batch_size,
                max_new_tokens=args.max_new_tokens,
                stop_token_ids=[],  # random actions: every turn runs to max_new_tokens
                rounds=args.game_rounds,
                turn_rewards=args.turn_rewards,
                context_length=256 * args.game_rounds,
            )
        )
    )
    rng = np.random.default_rng(0)
    env_seconds_per_step(game, 2, rng)  # warm up
    model_seconds_per_step(model, args.batch_size, 16, 2)
    env_times, model_times = [], []
    for r in range(args.rounds):
        env_times.append(env_seconds_per_step(game, args.episodes, rng))
        model_times.append(model_seconds_per_step(model, args.batch_size, 16, args.max_new_tokens))
        print(f"round {r}: env {env_times[-1] * 1e6:8.1f} us/step   model forward {model_times[-1] * 1e3:7.2f} ms/step")
    env_s, model_s = statistics.median(env_times), statistics.median(model_times)
    ratio = env_s / model_s
    print(
        f"\nB={args.batch_size}, game rounds={args.game_rounds}, turn rewards={args.turn_rewards}, "
        f"torch threads={torch.get_num_threads()}, model={args.model}"
    )
    print(f"environment per token step: {env_s * 1e6:.1f} us (median of {args.rounds} rounds)")
    print(f"model forward per token:    {model_s * 1e3:.2f} ms")
    print(f"ratio env / forward:        {ratio:.2%}  (target < 2%: {'met' if ratio < 0.02 else 'NOT met'})")


if __name__ == "__main__":
    main()
