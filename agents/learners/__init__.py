"""The learners: what updates a policy from the episodes it played.

- :mod:`~cory_agents.learners.base`: the :class:`~cory_agents.learners.base.Learner` interface and the
  :class:`~cory_agents.learners.base.Episode` a learner learns from;
- :mod:`~cory_agents.learners.lm`: what language-model learners share (optimizer, reference, KL,
  acting through :mod:`cory_agents.acting`);
- :mod:`~cory_agents.learners.ppo`: PPO with a value head (:mod:`~cory_agents.learners.value_model`);
- :mod:`~cory_agents.learners.dropout`: dropout off everywhere a model keeps it (layers, rates, configs);
- :mod:`~cory_agents.learners.grpo`: the critic-free GRPO and RLOO;
- :mod:`~cory_agents.learners.team`: the team-level interface (one learner for all the agents, from
  the whole team's episodes), and :class:`~cory_agents.learners.team.IndependentLearners`;
- :mod:`~cory_agents.learners.happo`, :mod:`~cory_agents.learners.difference`: two multi-agent team learners.

A learner of your own implements either interface (docs/plug-in-your-algorithm.md).
"""
