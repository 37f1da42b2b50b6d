"""Other RL libraries on the environment.

- :mod:`~cory_agents.integrations.sb3`: Stable-Baselines3's PPO on one role (``cory_env.RoleEnv``);
- :mod:`~cory_agents.integrations.torchrl`: TorchRL modules for its ``PettingZooWrapper``;
- :mod:`~cory_agents.integrations.tianshou`: the action mask Tianshou's multi-agent stack needs.

See docs/other-algorithms.md.
"""
