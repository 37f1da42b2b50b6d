"""Reuse epoch 0's forward pass as PPO's scoring pass when one minibatch holds the whole batch.

A PPO update scores the batch once without gradients (the "old" log-probs and values), then
runs ``ppo_epochs`` forward passes with gradients over shuffled minibatches
(:class:`~cory_agents.learners.ppo.UpdatePasses`). When one minibatch is the whole batch (as with
``--preset paper-imdb``: batch 256, mini-batch 256), the first training pass sees the same
weights and inputs as the scoring pass, and only the order differs. With dropout off its
detached outputs, put back in the batch's order, are the old ones, so the scoring pass can be
skipped: one forward pass fewer per update, out of about 14 forward-equivalents with 4 epochs
(the reference's pass, the scoring pass, then per epoch a forward and a backward of about two)
or 5 with one. The update agrees with the plain schedule to floating-point rounding
(tests/agents/training/test_training.py) and the minibatch shuffling draws the same random numbers. ``benchmarks/iteration.py
--scoring-reuse-ablation`` times both (docs/benchmarks.md).

The ``ppo`` learner factory (:mod:`cory_agents.training.registry`) switches it on unless
``--no-reuse-scoring-pass``; :func:`reuse_scoring_pass` does it for a learner built by hand. A
model with active dropout keeps the separate scoring pass, whose eval-mode outputs differ.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from cory_agents.learners.dropout import has_dropout
from cory_agents.learners.ppo import PPOLearner, UpdatePasses


class ScoringReusePasses(UpdatePasses):
    """:class:`~cory_agents.learners.ppo.UpdatePasses` whose scoring pass is epoch 0's training pass
    when a minibatch holds the whole batch and dropout is off (otherwise the plain passes).

    The training pass is held from :meth:`score` to the first minibatch of the
    :meth:`minibatches` that follows it, over the same batch, as ``PPOLearner.learn`` calls them."""

    def __init__(self) -> None:
        self._first: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None

    def score(
        self, learner: PPOLearner, ids: torch.Tensor, attn: torch.Tensor, T: int, turns: int = 1
    ) -> tuple[torch.Tensor, torch.Tensor]:
        self._first = None
        if learner.config.mini_batch(ids.shape[0]) != ids.shape[0] or has_dropout(learner.model):
            return super().score(learner, ids, attn, T, turns)
        learner.model.train()
        order = learner._epoch_order(ids.shape[0], turns).to(learner.device)  # epoch 0's order
        logits, values = learner._forward(ids[order], attn[order], T)
        self._first = (order, logits, values)  # trained on by the first minibatch
        inverse = torch.argsort(order)
        return logits.detach()[inverse], values.detach()[inverse]

    def minibatches(
        self,
        learner: PPOLearner,
        ids: torch.Tensor,
        attn: torch.Tensor,
        T: int,
        epochs: int | None = None,
        turns: int = 1,
    ) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        first, self._first = self._first, None
        epochs = learner.config.ppo_epochs if epochs is None else epochs
        if first is not None and epochs > 0:
            if first[0].shape[0] != ids.shape[0]:
                raise RuntimeError("minibatches() over another batch than the score() before it")
            yield first
            del first  # freed once the first minibatch is done with it
            epochs -= 1
        yield from super().minibatches(learner, ids, attn, T, epochs, turns)


def reuse_scoring_pass(learner: PPOLearner) -> PPOLearner:
    """Give ``learner`` the schedule of passes of this module (in place; returns it)."""
    learner.passes = ScoringReusePasses()
    return learner
