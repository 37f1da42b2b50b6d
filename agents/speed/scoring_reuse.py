"""Reuse epoch 0's forward pass as PPO's scoring pass when one minibatch holds the whole batch.

A PPO update scores the batch once without gradients (the "old" log-probs and values), then
runs ``ppo_epochs`` forward passes with gradients over shuffled minibatches
(:class:`~agents.learners.ppo.UpdatePasses`). When one minibatch is the whole batch (the
reproduction's settings: batch 32, mini-batch 32), the first training pass sees the same
weights and inputs as the scoring pass, dropout is off, and only the order differs. So its
detached outputs, put back in the batch's order, are the old ones, and the scoring pass can be
skipped: one forward pass fewer per update (about 1 in 14 forward-equivalents of one; figures in
docs/benchmarks.md). The update agrees with the plain schedule to floating-point rounding
(tests/test_training.py), and the minibatch shuffling draws the same random numbers.

The :class:`~agents.training.trainer.Trainer` switches it on for PPO learners unless
``--no-reuse-scoring-pass``; :func:`reuse_scoring_pass` does it for a learner built by hand.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from agents.learners.ppo import PPOLearner, UpdatePasses


class ReusedScoringPass(UpdatePasses):
    """:class:`~agents.learners.ppo.UpdatePasses` whose scoring pass is epoch 0's training pass
    when a minibatch holds the whole batch (otherwise the plain passes)."""

    def __init__(self, learner: PPOLearner):
        super().__init__(learner)
        self._first: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None

    def score(self, ids: torch.Tensor, attn: torch.Tensor, T: int) -> tuple[torch.Tensor, torch.Tensor]:
        learner = self.learner
        self._first = None
        if learner.config.mini_batch_size != ids.shape[0]:
            return super().score(ids, attn, T)
        learner.model.train()
        order = torch.randperm(ids.shape[0], generator=learner.generator).to(learner.device)  # epoch 0's order
        logits, values = learner._forward(ids[order], attn[order], T)
        self._first = (order, logits, values)  # trained on by the first minibatch
        inverse = torch.argsort(order)
        return logits.detach()[inverse], values.detach()[inverse]

    def minibatches(
        self, ids: torch.Tensor, attn: torch.Tensor, T: int, epochs: int | None = None
    ) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        first, self._first = self._first, None
        epochs = self.learner.config.ppo_epochs if epochs is None else epochs
        if first is not None and epochs > 0:
            yield first
            del first  # freed once the first minibatch is done with it
            epochs -= 1
        yield from super().minibatches(ids, attn, T, epochs)


def reuse_scoring_pass(learner: PPOLearner) -> PPOLearner:
    """Give ``learner`` the scoring schedule of this module (in place; returns it)."""
    learner.passes = ReusedScoringPass(learner)
    return learner
