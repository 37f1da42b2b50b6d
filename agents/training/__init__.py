"""Training: the loop and what a run needs around it.

A run flows one way: :mod:`~agents.training.config` (settings, resolved and checked) ->
:mod:`~agents.training.build` (what the run is made of) -> :mod:`~agents.training.trainer` (the loop).

- :mod:`~agents.training.config`: :class:`~agents.training.config.TrainConfig`, its sections,
  presets, :func:`~agents.training.config.resolve` and the rules of a resume;
- :mod:`~agents.training.sections`: the command line's sections (task, model, game, generation,
  output, speed), of which with the learners' own configs ``TrainConfig`` is made;
- :mod:`~agents.training.registry`: the ``--learner`` factories (``LEARNERS``) and configs;
- :mod:`~agents.training.build`: :func:`~agents.training.build.assemble`: the run's task, devices,
  models, learners and game;
- :mod:`~agents.training.trainer`: the :class:`~agents.training.trainer.Trainer` loop (rollout,
  learn, log, checkpoint);
- :mod:`~agents.training.checkpoint`: safe, atomic checkpoints and resume;
- :mod:`~agents.training.interrupt`: Ctrl-C and SIGTERM stop after the iteration;
- :mod:`~agents.training.metrics`, :mod:`~agents.training.trackers`,
  :mod:`~agents.training.plots`: metrics.csv, experiment trackers, PNG curves;
- :mod:`~agents.training.adapters`: LoRA adapters on one shared base;
- :mod:`~agents.training.export`: the trained policies as Hugging Face models.
"""
