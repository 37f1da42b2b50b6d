"""Play one batched pioneer → observer episode with a language model and print the texts.

Runs fully offline on the embedded default (SmolLM2-135M, Rotten Tomatoes review
prefixes, VADER sentiment reward); any Hugging Face causal LM name works too.

    python examples/play_episode.py                      # embedded default
    python examples/play_episode.py --model gpt2 --conversations 8 --greedy
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from cory_agents.acting.actor import LMActor
from cory_agents.cli.errors import RETIRED_EVAL_FLAGS, add_debug_flag, one_line_errors, refuse_retired_flags
from cory_env import CollectiveRewardWrapper, RoleExchangeWrapper, env
from cory_env.errors import UsageError
from cory_env.models import EMBEDDED_MODEL, load_causal_lm, load_tokenizer
from cory_env.rewards.sentiment import vader_sentiment
from cory_env.tasks.sentiment import sentiment_prompts


def build_parser() -> argparse.ArgumentParser:
    """The command line (also rendered in docs/cli.md)."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=EMBEDDED_MODEL, help="model name or path (default: the embedded SmolLM2-135M)")
    p.add_argument("--prompt-source", default="rotten_tomatoes", help="review source: rotten_tomatoes, imdb or auto")
    p.add_argument("--conversations", type=int, default=4, help="conversations played in lockstep (batch size)")
    p.add_argument("--max-new-tokens", type=int, default=15, help="tokens per response at most")
    p.add_argument("--greedy", action="store_true", help="greedy decoding instead of sampling")
    p.add_argument("--no-knowledge-transfer", action="store_true", help="the observer sees only the query")
    p.add_argument("--seed", type=int, default=0, help="seed for prompts and sampling")
    return add_debug_flag(refuse_retired_flags(p, {"--source": RETIRED_EVAL_FLAGS["--source"]}, version="0.3"))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    args = build_parser().parse_args(argv)
    if args.conversations < 1:
        raise UsageError(f"--conversations must be at least 1, got {args.conversations}")
    return args


@one_line_errors
def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    start = time.perf_counter()
    tokenizer = load_tokenizer(args.model)
    model = load_causal_lm(args.model).eval()
    print(f"loaded {args.model} in {time.perf_counter() - start:.1f} s")

    game = RoleExchangeWrapper(
        CollectiveRewardWrapper(
            env(
                tokenizer=tokenizer,
                prompts=sentiment_prompts(tokenizer, source=args.prompt_source),
                reward_fn=vader_sentiment,
                num_conversations=args.conversations,
                max_new_tokens=args.max_new_tokens,
                knowledge_transfer=not args.no_knowledge_transfer,
            )
        ),
        period=5,
    )
    actor = LMActor(model, do_sample=not args.greedy, generator=torch.Generator().manual_seed(args.seed))
    game.reset(seed=args.seed)
    start, steps, finals = time.perf_counter(), 0, {}
    for agent in game.agent_iter():
        obs, reward, term, trunc, info = game.last()
        if term or trunc:
            finals[agent] = (reward, info)
            game.step(None)
        else:
            game.step(actor.act(agent, obs))
            steps += 1
    elapsed = time.perf_counter() - start

    by_role = {info["role"]: info for _, info in finals.values()}
    pioneer, observer = by_role["pioneer"], by_role["observer"]
    for b, query in enumerate(pioneer["query"]):
        print(f"\n[{b}] query: {query!r}")
        print(f"  pioneer  {pioneer['task_reward'][b]:+.3f}  {pioneer['response'][b]!r}")
        print(f"  observer {observer['task_reward'][b]:+.3f}  {observer['response'][b]!r}")
        print(f"  collective reward {pioneer['reward'][b]:+.3f}")
    for learner, (reward, info) in finals.items():
        print(
            f"\n{learner} played {info['role']}: mean task reward {np.mean(info['task_reward']):+.3f}, "
            f"mean collective reward {reward:+.3f}"
        )
    tokens = int(pioneer["response_length"].sum() + observer["response_length"].sum())
    print(f"{steps} token steps, {tokens} tokens generated in {elapsed:.1f} s ({tokens / elapsed:.1f} tokens/s)")


if __name__ == "__main__":
    main()
