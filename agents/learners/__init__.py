"""The learners: what updates a policy from the episodes it played.

- :mod:`~agents.learners.base`: the :class:`~agents.learners.base.Learner` interface and the
  :class:`~agents.learners.base.Episode` a learner learns from;
- :mod:`~agents.learners.lm`: what language-model learners share (optimizer, reference, KL,
  acting through :mod:`agents.acting`);
- :mod:`~agents.learners.ppo`: PPO with a value head (:mod:`~agents.learners.value_model`);
- :mod:`~agents.learners.grpo`: the critic-free GRPO and RLOO;
- :mod:`~agents.learners.team`: the team-level interface (one learner for all the agents, from
  the whole team's episodes), and :class:`~agents.learners.team.IndependentLearners`;
- :mod:`~agents.learners.happo`, :mod:`~agents.learners.difference`: two multi-agent team learners.

A learner of your own implements either interface (docs/plug-in-your-algorithm.md).
"""
