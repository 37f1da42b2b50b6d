"""Training: the loop and what a run needs around it.

A run flows one way: :mod:`~cory_agents.training.config` (settings, resolved and checked) ->
:mod:`~cory_agents.training.build` (what the run is made of) -> :mod:`~cory_agents.training.trainer` (the loop).

- :mod:`~cory_agents.training.config`: :class:`~cory_agents.training.config.TrainConfig`, its sections,
  presets, :func:`~cory_agents.training.config.resolve` and the rules of a resume;
- :mod:`~cory_agents.training.sections`: the command line's sections (task, model, game, generation,
  output, speed), of which with the learners' own configs ``TrainConfig`` is made;
- :mod:`~cory_agents.training.registry`: the ``--learner`` registry (``LearnerSpec``: factory, config, capabilities;
  installed packages' entry points), with :mod:`~cory_agents.training.capabilities`;
- :mod:`~cory_agents.training.build`: :func:`~cory_agents.training.build.assemble`: the run's task, devices,
  models, learners and game, with :mod:`~cory_agents.training.chat_settings` (``--chat``: the game in chat form);
- :mod:`~cory_agents.training.trainer`: the :class:`~cory_agents.training.trainer.Trainer` loop (rollout,
  learn, log, checkpoint);
- :mod:`~cory_agents.training.checkpoint`: safe, atomic checkpoints and resume;
- :mod:`~cory_agents.training.provenance`: which code (version, git commit) trained each session of a run;
- :mod:`~cory_agents.training.interrupt`: Ctrl-C and SIGTERM stop after the iteration;
- :mod:`~cory_agents.training.metrics`, :mod:`~cory_agents.training.trackers`,
  :mod:`~cory_agents.training.plots`: metrics.csv, experiment trackers, PNG curves;
- :mod:`~cory_agents.training.adapters`: LoRA adapters on one shared base;
- :mod:`~cory_agents.training.export`: the trained policies as Hugging Face models.
"""
