"""On/off switches read from the environment (``DUALTAPE_JIT``, ``DUALTAPE_FUSED``): read at
each call, never at import, so a process may change them between calls; inside one training
call (``held``) each is read once, so the call takes one path throughout, and so is each
choice made from them (``held_choice``)."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Hashable
from contextvars import ContextVar
from typing import Any, TypeVar

OFF = ("0", "false", "off", "no")
ON = ("", "1", "true", "on", "yes")

_HELD: ContextVar[dict[Hashable, Any] | None] = ContextVar("dualtape_switches", default=None)
F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")


def switched_on(name: str) -> bool:
    """Whether the environment variable ``name`` leaves its feature on (unset or empty: on).
    Case and surrounding blanks aside, ``0``/``false``/``off``/``no`` turn it off and
    ``1``/``true``/``on``/``yes`` on; any other value raises ``ValueError`` naming it.
    Within a ``held`` call, the value its first read gave."""
    values = _HELD.get()
    if values is None:
        return _read(name)
    value = values.get(name)
    if value is None:
        value = values[name] = _read(name)
    return value


def held_choice(key: Hashable, choose: Callable[[], T]) -> T:
    """``choose()``, a choice that depends only on the switches and on what ``key`` names
    (a fast path for a dtype and device): within a ``held`` call made once, by the first
    ask for ``key``, and reused for the rest of the call; outside one, made every time."""
    values = _HELD.get()
    if values is None:
        return choose()
    if key not in values:
        values[key] = choose()
    return values[key]


def held(fn: F) -> F:
    """``fn`` with the switches read once per call (by its first read of each, nested ``held``
    calls sharing the outer one's values), and each ``held_choice`` made once: one path for
    the whole call, and one environment lookup per switch instead of one per layer and pass.
    The values go when the call ends."""

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        if _HELD.get() is not None:
            return fn(*args, **kwargs)
        token = _HELD.set({})
        try:
            return fn(*args, **kwargs)
        finally:
            _HELD.reset(token)

    return call  # type: ignore[return-value]


def _read(name: str) -> bool:
    value = os.environ.get(name, "")
    spelled = value.strip().lower()
    if spelled in ON:
        return True
    if spelled in OFF:
        return False
    raise ValueError(f"environment variable {name}={value!r}: use one of "
                     f"{', '.join(OFF)} (off) or {', '.join(ON[1:])} (on), or leave it unset")
