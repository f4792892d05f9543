"""`Registry`: the one list of implementations a setting chooses from, filled where they are defined.

    ESTIMATORS = Registry("lead.advantage_estimator")

    @ESTIMATORS.register("grpo")
    def grpo_advantage(R, groups, s): ...

A registry is a dict {name: implementation} that knows its setting's key: an unknown name raises a
ValueError naming the key and the known names, and a name registered twice is refused. The algorithm modules
import only this module, never `LeadConfig`; `algorithms/config.py` imports them and derives each setting's
accepted values from their registries (`names`), so a new entry is accepted, listed in the config reference
and validated without editing the config.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

F = TypeVar("F")


class Registry(dict):
    """{name: implementation} for the setting `key` (e.g. "lead.advantage_estimator")."""

    def __init__(self, key: str):
        super().__init__()
        self.key = key

    def register(self, name: str) -> Callable[[F], F]:
        """Decorator: register the decorated function (or value) under `name`; returns it unchanged."""

        def add(impl: F) -> F:
            if name in self:
                raise ValueError(f"{self.key}: {name!r} is registered twice ({self[name]!r} and {impl!r})")
            self[name] = impl
            return impl

        return add

    @property
    def names(self) -> tuple[str, ...]:
        """The accepted names, in registration order."""
        return tuple(self)

    def check(self, name: str) -> None:
        """Raise ValueError `key='name' is not one of [...]` unless `name` is registered."""
        if name not in self:
            raise ValueError(f"{self.key}={name!r} is not one of {list(self)}")

    def __missing__(self, name: str):
        self.check(name)
