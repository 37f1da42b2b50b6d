"""Train one role with TorchRL's own PPO (ClipPPOLoss, GAE, a Collector) on the toy task.

TorchRL consumes the multi-agent AEC environment itself, through
``torchrl.envs.PettingZooWrapper(env=cory_env.env(numeric_infos=True, ...), use_mask=True)``:
each role is a group, and the trained role's policy and value networks are the
token-embedding modules of agents/integrations/torchrl.py. The other role, when there is one,
always says ``--other-word``. The PPO loss counts the steps where the trained role acts
(TorchRL's ``(group, "mask")``); its critic learns from every step.

    python examples/train_torchrl.py                              # the pioneer alone
    python examples/train_torchrl.py --role observer              # the observer, after a fixed pioneer
    python examples/train_torchrl.py --role pioneer --with-observer --collective-reward
    python examples/train_torchrl.py --echo --frames 8192 --out runs/torchrl

Prints the mean reward of the policy before and after training (same prompts) and a few
responses; with --out, writes metrics.csv (one row per collected batch), samples.jsonl and
task_reward.png, as the Stable-Baselines3 example does, and the policy's weights (policy.pt).
"""

from __future__ import annotations

import argparse
import time
import warnings
from pathlib import Path

import numpy as np
import torch
from tensordict.nn import TensorDictSequential
from torchrl.collectors import Collector
from torchrl.data import LazyTensorStorage, ReplayBuffer, SamplerWithoutReplacement
from torchrl.envs import PettingZooWrapper
from torchrl.objectives import ClipPPOLoss
from torchrl.objectives.value import GAE

import cory_env
from cory_agents.integrations.torchrl import (
    episode_rewards,
    finished_episode_rewards,
    fixed_token_policy,
    token_actor,
    token_critic,
)
from cory_agents.training.metrics import MetricsLogger
from cory_agents.training.plots import plot_run
from cory_env.tasks.toy import TOY_PROMPTS, add_task_arguments, reward_from_arguments, toy_tokenizer

# TorchRL warns for every PettingZoo release but 1.24.3; this one is tested with it
# (tests/agents/integrations/test_torchrl.py).
warnings.filterwarnings("ignore", message="PettingZoo in TorchRL is tested using version")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_task_arguments(p)
    p.add_argument("--frames", type=int, default=4096, help="environment steps (tokens of either role) to collect")
    p.add_argument("--frames-per-batch", type=int, default=256, help="steps per collected batch (one PPO update)")
    p.add_argument("--epochs", type=int, default=4, help="passes over each batch")
    p.add_argument("--minibatch-size", type=int, default=64, help="steps per gradient step")
    p.add_argument("--max-new-tokens", type=int, default=4, help="tokens per response at most")
    p.add_argument("--lr", type=float, default=3e-3, help="Adam learning rate")
    p.add_argument("--eval-episodes", type=int, default=200, help="episodes for the before/after evaluation")
    p.add_argument("--seed", type=int, default=0, help="seed for the networks, the sampling and the prompts")
    p.add_argument("--out", type=Path, default=None, help="run folder for metrics, plots and the policy")
    return p


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.with_observer and args.role == "observer":
        parser.error("--with-observer is for --role pioneer (the observer always has a pioneer before it)")
    if args.frames % args.frames_per_batch or args.frames_per_batch % args.minibatch_size:
        parser.error("--frames must be a multiple of --frames-per-batch, and that of --minibatch-size")
    return args


def make_env(args: argparse.Namespace, seed: int) -> PettingZooWrapper:
    """The pioneer/observer game on the toy task, as TorchRL sees it."""
    aec = cory_env.env(
        numeric_infos=True,  # infos TorchRL can turn into tensors; the texts are in last_transcript
        with_observer=args.role == "observer" or args.with_observer,
        tokenizer=toy_tokenizer(),
        prompts=TOY_PROMPTS,
        reward_fn=reward_from_arguments(args),
        max_new_tokens=args.max_new_tokens,
        context_length=32,
        observer_template="{query} {response} {query}",  # in the toy vocabulary
    )
    if args.collective_reward:
        aec = cory_env.CollectiveRewardWrapper(aec)
    return PettingZooWrapper(env=aec, use_mask=True, seed=seed)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    env, eval_env = make_env(args, args.seed), make_env(args, args.seed)
    role = args.role
    actor, critic = token_actor(env, role), token_critic(env, role)
    other = next((g for g in env.group_map if g != role), None)
    if other is None:
        policy = actor
    else:
        other_token = toy_tokenizer().convert_tokens_to_ids(args.other_word)
        policy = TensorDictSequential(actor, fixed_token_policy(env, other, other_token))

    keys = dict(
        reward=(role, "reward"),
        done=(role, "done"),
        terminated=(role, "terminated"),
        value=(role, "state_value"),
        advantage=(role, "advantage"),
        value_target=(role, "value_target"),
    )
    advantage = GAE(gamma=0.99, lmbda=0.95, value_network=critic)
    advantage.set_keys(**keys)
    # reduction="none": the per-step losses, masked below to the steps where the role acts.
    loss_module = ClipPPOLoss(
        actor,
        critic,
        clip_epsilon=0.2,
        entropy_bonus=False,
        critic_coeff=0.5,
        loss_critic_type="l2",
        normalize_advantage=True,
        reduction="none",
    )
    loss_module.set_keys(action=(role, "action"), sample_log_prob=(role, "action_log_prob"), **keys)
    optimizer = torch.optim.Adam(loss_module.parameters(), lr=args.lr)
    collector = Collector(
        env,
        policy,
        frames_per_batch=args.frames_per_batch,
        total_frames=args.frames,
        auto_register_policy_transforms=False,  # the policy keeps no state across steps (no InitTracker needed)
    )
    buffer = ReplayBuffer(
        storage=LazyTensorStorage(args.frames_per_batch),
        sampler=SamplerWithoutReplacement(),
        batch_size=args.minibatch_size,
    )

    eval_seed = args.seed + 10_000  # evaluation prompts apart from the training ones
    before = episode_rewards(eval_env, policy, role, args.eval_episodes, seed=eval_seed)
    metrics = MetricsLogger(args.out) if args.out else None
    start, frames = time.perf_counter(), 0
    for iteration, batch in enumerate(collector):
        frames += batch.numel()
        with torch.no_grad():
            advantage(batch)
        buffer.extend(batch.reshape(-1))
        for _ in range(args.epochs):
            for _ in range(args.frames_per_batch // args.minibatch_size):
                sample = buffer.sample()
                acting = sample[role, "mask"].float()  # (N, 1): the role acted at this step
                losses = loss_module(sample)
                objective = (losses["loss_objective"].reshape(acting.shape) * acting).sum() / acting.sum().clamp_min(1)
                loss = objective + losses["loss_critic"].mean()
                optimizer.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(loss_module.parameters(), 0.5)
                optimizer.step()
        collector.update_policy_weights_()
        if metrics is not None:
            log_batch(metrics, iteration, batch, role, frames, env)
    seconds = time.perf_counter() - start
    after = episode_rewards(eval_env, policy, role, args.eval_episodes, seed=eval_seed)
    collector.shutdown()

    sem = lambda r: r.std() / np.sqrt(len(r))  # noqa: E731
    print(f"{role}: {args.frames} steps in {seconds:.1f} s")
    print(
        f"mean reward over {args.eval_episodes} episodes: before {before.mean():.3f} ± {sem(before):.3f}, "
        f"after {after.mean():.3f} ± {sem(after):.3f}"
    )
    for seed in range(3):
        episode_rewards(eval_env, policy, role, 1, seed=eval_seed + seed)  # one episode, the last one finished
        transcript = eval_env.last_transcript  # by role, texts included
        mine = transcript[role]
        line = f"  {mine['query']!r} -> {mine['response']!r}  reward {mine['reward']:.2f}"
        if other is not None:
            line += f"  (other role: {transcript[other]['response']!r})"
        print(line)

    if metrics is not None:
        metrics.close()
        torch.save(actor.state_dict(), args.out / "policy.pt")
        plots = plot_run(args.out)
        print(f"wrote {args.out / 'metrics.csv'}, {', '.join(str(p) for p in plots)}, {args.out / 'policy.pt'}")


def log_batch(metrics: MetricsLogger, iteration: int, batch, role: str, frames: int, env: PettingZooWrapper) -> None:
    """One metrics.csv row per collected batch, with the columns of the project's other trainers."""
    rewards = finished_episode_rewards(batch, role).numpy()
    if not len(rewards):
        return
    task = finished_episode_rewards(batch, role, ("info", "task_reward")).numpy()
    length = finished_episode_rewards(batch, role, ("info", "response_length")).numpy()
    metrics.log(
        iteration,
        {
            f"{role}/task_reward_mean": task.mean(),
            f"{role}/task_reward_std": task.std(),
            f"{role}/reward_mean": rewards.mean(),
            f"{role}/response_length_mean": length.mean(),
            "episodes": len(rewards),
            "timesteps": frames,
        },
    )
    last = env.last_transcript[role]  # numeric infos carry no text: the last finished episode's
    sample = {"learner": role, "query": last["query"], "response": last["response"], "reward": float(last["reward"])}
    metrics.log_samples(iteration, [sample])


if __name__ == "__main__":
    main()
