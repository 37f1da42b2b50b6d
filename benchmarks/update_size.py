"""How far one PPO update moves the policy on the embedded model, and why: the measurements
behind docs/why-it-learns.md.

One batched episode of single-agent PPO on the embedded default (SmolLM2-135M-Instruct,
movie-review prefixes, VADER), then, each from the same weights and a fresh optimizer:

1. checks of the update's inputs: the sampled tokens' log-probs against the policy's entropy
   (a column shift would show as a far lower log-prob), the scoring pass (eval mode, no grad)
   against the training pass, padded against padding-free passes, and how much of the
   advantages' variance the critic's initial values make;
2. one AdamW step (one epoch, one minibatch: the whole batch) under variants of learning rate,
   Adam's eps, frozen embeddings and value loss, and the KL between the policy before and
   after it over the batch's response tokens (``approx_kl`` as PPO logs it, the range of the
   ratio and the fraction of tokens outside PPO's clip range 0.2), and over a second batch
   that the step did not train on.

    python benchmarks/update_size.py                 # batch 16, seed 0
    python benchmarks/update_size.py --batch-size 8 --seed 1
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import tempfile

import numpy as np
import torch
from trl.trainer.utils import entropy_from_logits, selective_log_softmax

from cory_agents.algorithms.advantages import explained_variance, gae, whiten
from cory_agents.algorithms.kl import token_rewards
from cory_agents.speed import padding_free
from cory_agents.training.config import TrainConfig
from cory_agents.training.trainer import Trainer
from cory_env.models import hugging_face_model


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lr", type=float, default=1.41e-5, help="the learning rate of the reference variant")
    args = parser.parse_args(argv)
    B = args.batch_size
    with tempfile.TemporaryDirectory() as out:
        config = TrainConfig(
            algo="ppo",
            batch_size=B,
            mini_batch_size=B,
            ppo_epochs=1,
            lr=args.lr,
            seed=args.seed,
            iterations=1,
            out=out,
            report_to="none",
            save_model=False,
        )
        trainer = Trainer(config)
        learner = trainer.learners["pioneer"]
        episode, _ = trainer.rollout()["pioneer"]
        held_out, _ = trainer.rollout()["pioneer"]  # a second batch, never trained on
    T = episode.response_width
    ids, attn = episode.input_ids, episode.attention_mask
    response, mask = ids[:, -T:], attn[:, -T:].float()
    real = mask.bool()

    def forward(train: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        learner.model.train(train)
        with torch.set_grad_enabled(train):
            logits, values = learner._forward(ids, attn, T)
        learner.model.eval()
        return logits.detach(), values.detach()

    # 1. the update's inputs
    logits, values = forward()
    logprobs = selective_log_softmax(logits, response)
    print(f"batch {B}, response width {T}, {int(mask.sum())} response tokens")
    print(
        f"sampled tokens' mean log-prob {logprobs[real].mean():.3f}; the policy's mean entropy "
        f"{entropy_from_logits(logits)[real].mean():.3f} (equal in expectation)"
    )
    for shift in (1, -1):
        shifted = selective_log_softmax(logits, torch.roll(response, shift, dims=1))[real].mean()
        print(f"  the same, tokens shifted by {shift:+d} column: {shifted:.3f}")
    train_logprobs = selective_log_softmax(forward(train=True)[0], response)
    print(
        f"scoring pass (eval, no grad) vs training pass: max |log-prob difference| "
        f"{(train_logprobs - logprobs)[real].abs().max():.2e}"
    )
    hugging_face_model(learner.model).set_attn_implementation("sdpa")  # padded passes
    padded = selective_log_softmax(forward()[0], response)
    padding_free.enable(learner.model)
    print(f"padded vs padding-free pass: max |log-prob difference| {(padded - logprobs)[real].abs().max():.2e}")
    scores = torch.tensor(episode.scores, dtype=torch.float32)
    rewards = token_rewards(scores, torch.zeros_like(mask), mask, 0.0)
    head = learner.model.v_head.weight
    with torch.no_grad():  # the head as it was drawn before (std 1/sqrt(hidden+1)), for comparison
        head.normal_(std=(head.shape[1] + 1) ** -0.5, generator=torch.Generator().manual_seed(args.seed))
        random_values = forward()[1]
        head.zero_()
    critics = (("a random value head (as before)", random_values * mask), ("the zero value head", values * mask))
    for name, v in critics:
        advantages, returns = gae(rewards, v, mask, 1.0, 0.95)
        print(
            f"advantages with {name}: std {advantages[real].std():.3f} (task reward std {scores.std():.3f}), "
            f"explained variance {explained_variance(v, returns, mask):.2f}"
        )
    advantages = whiten(gae(rewards, values * mask, mask, 1.0, 0.95)[0], mask)
    T2 = held_out.response_width
    held_response, held_real = held_out.input_ids[:, -T2:], held_out.attention_mask[:, -T2:].bool()

    def held_out_logprobs() -> torch.Tensor:
        with torch.no_grad():
            logits, _ = learner._forward(held_out.input_ids, held_out.attention_mask, T2)
        return selective_log_softmax(logits, held_response)[held_real]

    held_before = held_out_logprobs()

    # 2. one AdamW step, by variant
    weights = {k: v.clone() for k, v in learner.trainable_state_dict().items()}
    optimizer_state = copy.deepcopy(learner.optimizer.state_dict())
    named = dict(learner.model.named_parameters())

    def one_step(name: str, lr: float, eps: float = 1e-8, freeze: tuple[str, ...] = (), vf_coef: float = 0.1) -> None:
        learner.load_trainable_state_dict(weights)
        learner.optimizer.load_state_dict(optimizer_state)
        for group in learner.optimizer.param_groups:
            group["lr"], group["eps"] = lr, eps
        frozen = [p for n, p in named.items() if any(f in n for f in freeze)]
        for p in frozen:
            p.requires_grad_(False)
        learner.config = dataclasses.replace(learner.config, ppo_epochs=1, vf_coef=vf_coef)
        learner.learn(episode)
        for p in frozen:
            p.requires_grad_(True)
        change = (selective_log_softmax(forward()[0], response) - logprobs)[real]
        ratio = change.exp()
        held = held_out_logprobs() - held_before
        corr = np.corrcoef(change.numpy(), advantages[real].numpy())[0, 1]
        print(
            f"{name:34s} approx_kl {0.5 * float(change.pow(2).mean()):.4f}  ratio {ratio.min():.2f}-{ratio.max():.2f}  "
            f"outside clip {float(((ratio - 1).abs() > 0.2).float().mean()):.2f}  corr(change, advantage) {corr:.2f}  "
            f"held-out batch: approx_kl {0.5 * float(held.pow(2).mean()):.4f}"
        )

    print("one AdamW step on the whole batch (epoch 0's first minibatch), from the same weights:")
    for lr in (args.lr, 1e-5, 3e-6, 1e-6):
        one_step(f"lr {lr:g}", lr)
    one_step(f"lr {args.lr:g}, Adam eps 1e-5", args.lr, eps=1e-5)
    one_step(f"lr {args.lr:g}, embeddings frozen", args.lr, freeze=("embed_tokens", "lm_head"))
    one_step(f"lr {args.lr:g}, vf_coef 0", args.lr, vf_coef=0.0)


if __name__ == "__main__":
    main()
