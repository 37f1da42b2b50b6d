"""The AEC state a wrapper forwards: properties that read the wrapped environment's directly.

PettingZoo's ``BaseWrapper`` forwards what it does not define through ``__getattr__``, which Python
calls only after the normal lookup failed (an ``AttributeError`` raised and caught inside the
interpreter): about a microsecond an access, and a token step reads the AEC state (``agents``,
``agent_selection``, ``terminations``, ...) some ten times through each wrapper. :func:`forward_state`
gives a wrapper class properties that return the wrapped environment's attribute at once: the same
values, read without the failed lookup.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: The attributes of the AEC state a token step reads.
STATE = ("agents", "agent_selection", "terminations", "truncations", "rewards", "infos", "_cumulative_rewards")


def forward_state(cls: type, reader: Callable[[str], Callable[[Any], Any]] | None = None) -> type:
    """Give ``cls`` (a wrapper with ``self.env``) a read-only property for each of :data:`STATE` it does not define;
    ``reader(name)`` makes each getter (default: one that returns the wrapped environment's attribute)."""
    for name in STATE:
        if name not in cls.__dict__:
            setattr(cls, name, property((reader or _reader)(name), doc=f"The wrapped environment's ``{name}``."))
    return cls


def _reader(name: str) -> Any:
    def read(self: Any) -> Any:
        return getattr(self.env, name)

    return read
