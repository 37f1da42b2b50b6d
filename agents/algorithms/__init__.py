"""The algorithms' math, as pure functions of tensors: no model, no optimizer, no I/O.

- :mod:`~cory_agents.algorithms.advantages`: GAE, whitening, masked statistics, explained variance;
- :mod:`~cory_agents.algorithms.losses`: PPO's clipped policy and value losses;
- :mod:`~cory_agents.algorithms.kl`: per-token KL estimators, the KL penalty as per-token rewards,
  and the fixed and adaptive KL controllers;
- :mod:`~cory_agents.algorithms.value_norm`: MAPPO's running normalisation of value targets.

Each is checked by hand-computed tests (tests/agents/algorithms/test_ppo_math.py).
"""
