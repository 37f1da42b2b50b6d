"""Other RL libraries on the environment.

- :mod:`~agents.integrations.sb3`: Stable-Baselines3's PPO on one role (``cory_env.RoleEnv``);
- :mod:`~agents.integrations.torchrl`: TorchRL modules for its ``PettingZooWrapper``;
- :mod:`~agents.integrations.tianshou`: the action mask Tianshou's multi-agent stack needs.

See docs/other-algorithms.md.
"""
