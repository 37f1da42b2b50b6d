"""The learning agents and everything around their training, one subpackage per concept.

=================  ==================================================================
``algorithms``     the math: advantages, losses, KL estimators and controllers
``learners``       the ``Learner`` and ``TeamLearner`` interfaces, PPO, GRPO/RLOO, HAPPO, difference rewards
``acting``         the KV-cache actor that plays a policy in the environment
``training``       config, the loop, checkpoints, metrics, trackers, plots, export
``speed``          mechanisms a run switches on (padding-free passes, CPU layout, ...)
``distributed``    data parallel, FSDP and DeepSpeed ZeRO
``evaluation``     held-out evaluation and the reward benchmark
``integrations``   Stable-Baselines3, TorchRL, Tianshou
=================  ==================================================================

docs/architecture.md follows one training iteration through them. CHANGELOG.md lists where the
modules of cory-env 0.1's flat ``agents/`` went (``agents.ppo`` is ``cory_agents.learners.ppo``, ...).
"""
