"""Train one role with Stable-Baselines3's PPO on the toy task (18 tokens, reward: say "good").

The role is a single-agent Gymnasium environment (``cory/PioneerObserverRole-v0``);
SB3's own ``MultiInputPolicy`` reads it through a small token-embedding features
extractor (agents/integrations/sb3.py). No language model: one CPU core is enough.

    python examples/train_sb3.py                                  # the pioneer alone
    python examples/train_sb3.py --role observer                  # the observer, after a fixed pioneer
    python examples/train_sb3.py --role pioneer --with-observer --collective-reward
    python examples/train_sb3.py --num-agents 3 --role observer_1   # the middle of a chain of three
    python examples/train_sb3.py --target-word great --timesteps 8192 --out runs/sb3
    python examples/train_sb3.py --echo          # reward repeating the query's last word

The fixed other roles say ``--other-word`` every step. Prints the mean reward of the
policy before and after training (same prompts), and a few responses; with --out,
writes metrics.csv, samples.jsonl, task_reward.png and the SB3 model (model.zip).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_vec_env

import cory_env
from cory_agents.integrations.sb3 import RolloutMetricsCallback, episode_rewards, token_policy_kwargs
from cory_agents.training.plots import plot_run
from cory_env.tasks.toy import TOY_PROMPTS, add_task_arguments, reward_from_arguments, toy_tokenizer


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_task_arguments(p, roles=None)
    p.add_argument("--num-agents", type=int, default=2, help="agents in the chain; the others say --other-word")
    p.add_argument("--timesteps", type=int, default=4096, help="PPO environment steps (tokens)")
    p.add_argument("--envs", type=int, default=4, help="environments (conversations) per rollout")
    p.add_argument("--max-new-tokens", type=int, default=4, help="tokens per response at most")
    p.add_argument("--lr", type=float, default=3e-3, help="Adam learning rate")
    p.add_argument("--eval-episodes", type=int, default=200, help="episodes for the before/after evaluation")
    p.add_argument("--seed", type=int, default=0, help="seed for PPO and the training prompts")
    p.add_argument("--out", type=Path, default=None, help="run folder for metrics, plots and the model")
    return p


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    tokenizer = toy_tokenizer()
    other_token = tokenizer.convert_tokens_to_ids(args.other_word)
    others = args.role != "pioneer" or args.with_observer or args.num_agents > 2
    other_policy = (lambda obs: other_token) if others else None
    chain = {"num_agents": args.num_agents} if args.num_agents != 2 else {}
    env_kwargs = dict(
        role=args.role,
        other_policy=other_policy,
        collective_reward=args.collective_reward,
        tokenizer=tokenizer,
        prompts=TOY_PROMPTS,
        reward_fn=reward_from_arguments(args),
        max_new_tokens=args.max_new_tokens,
        context_length=32,
        observer_template="{query} {response} {query}",  # in the toy vocabulary
        render_mode=None,  # make_vec_env would ask for "rgb_array"
        **chain,
    )
    try:
        cory_env.RoleEnv(**env_kwargs)  # bad flags fail here, with the environment's message
    except (ValueError, TypeError) as exc:
        parser.error(str(exc).replace("num_agents=N", "--num-agents N"))
    venv = make_vec_env(cory_env.ROLE_ENV_ID, n_envs=args.envs, seed=args.seed, env_kwargs=env_kwargs)
    eval_env = make_vec_env(cory_env.ROLE_ENV_ID, n_envs=args.envs, env_kwargs=env_kwargs)
    model = PPO(
        "MultiInputPolicy",
        venv,
        n_steps=64,
        batch_size=64,
        n_epochs=4,
        learning_rate=args.lr,
        seed=args.seed,
        policy_kwargs=token_policy_kwargs(),
        verbose=0,
    )

    eval_seed = args.seed + 10_000  # evaluation prompts apart from the training ones
    before = episode_rewards(model, eval_env, args.eval_episodes, seed=eval_seed)
    callbacks = [RolloutMetricsCallback(args.out, learner=args.role)] if args.out else []
    start = time.perf_counter()
    model.learn(args.timesteps, callback=callbacks, progress_bar=False)
    seconds = time.perf_counter() - start
    after = episode_rewards(model, eval_env, args.eval_episodes, seed=eval_seed)

    sem = lambda r: r.std() / np.sqrt(len(r))  # noqa: E731
    print(f"{args.role}: {args.timesteps} steps in {seconds:.1f} s")
    print(
        f"mean reward over {args.eval_episodes} episodes: before {before.mean():.3f} ± {sem(before):.3f}, "
        f"after {after.mean():.3f} ± {sem(after):.3f}"
    )

    single = cory_env.RoleEnv(**env_kwargs)
    for seed in range(3):
        obs, info = single.reset(seed=eval_seed + seed)
        done = False
        while not done:
            action, _ = model.predict(obs, deterministic=False)
            obs, reward, done, _, info = single.step(action)
        other = f"  (other role: {info['other_response']!r})" if "other_response" in info else ""
        if "other_responses" in info:  # a longer chain
            other = f"  (others: {info['other_responses']})"
        print(f"  {info['query']!r} -> {info['response']!r}  reward {reward:.2f}{other}")

    if args.out:
        model.save(args.out / "model.zip")
        plots = plot_run(args.out)
        print(f"wrote {args.out / 'metrics.csv'}, {', '.join(str(p) for p in plots)}, {args.out / 'model.zip'}")


if __name__ == "__main__":
    main()
