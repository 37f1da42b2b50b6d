"""PettingZoo's order enforcing, stricter about stepping a finished episode."""

from __future__ import annotations

from typing import Any

from pettingzoo.utils import wrappers

from cory_env.wrappers.state import forward_state


class OrderEnforcingWrapper(wrappers.OrderEnforcingWrapper):
    """PettingZoo's order enforcing, except that a step after the episode ended raises (as the
    environment itself does) instead of logging a warning and doing nothing: a loop that steps a
    finished episode has a bug, and a warning lets it run on and train on nothing."""

    def step(self, action: Any) -> None:
        if self._has_reset and not self.agents:
            self.env.step(action)  # RuntimeError: the episode is over, call reset()
        super().step(action)


def _checked_reader(name: str) -> Any:
    def read(self: OrderEnforcingWrapper) -> Any:
        if not self._has_reset and name != "_cumulative_rewards":
            raise AttributeError(f"{name} cannot be accessed before reset")  # as PettingZoo's __getattr__ says
        return getattr(self.env, name)

    return read


# The AEC state read at once, not through __getattr__ (cory_env.wrappers.state), still refused before reset.
forward_state(OrderEnforcingWrapper, _checked_reader)
