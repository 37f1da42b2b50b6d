"""The learners: what updates a policy from the episodes it played.

- :mod:`~agents.learners.base`: the :class:`~agents.learners.base.Learner` interface and the
  :class:`~agents.learners.base.Episode` a learner learns from;
- :mod:`~agents.learners.lm`: what language-model learners share (optimizer, reference, KL,
  acting through :mod:`agents.acting`);
- :mod:`~agents.learners.ppo`: PPO with a value head (:mod:`~agents.learners.value_model`);
- :mod:`~agents.learners.grpo`: the critic-free GRPO and RLOO.

A learner of your own implements the interface (docs/plug-in-your-algorithm.md).
"""
