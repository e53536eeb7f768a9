"""On/off switches read from the environment (``DUALTAPE_JIT``, ``DUALTAPE_FUSED``): read at
each call, never at import, so a process may change them between calls. A training call
(``held``) takes them once, when it begins, so it takes one path throughout; each choice made
from them (``held_choice``: a fast path for a dtype and device) is made once for those values
and kept for later calls that begin with the same values (the T = 1 training call 0.93x its
time, the tiny network's 0.90x, against a choice per call)."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Hashable
from contextvars import ContextVar
from typing import Any, NamedTuple, TypeVar

OFF = ("0", "false", "off", "no")
ON = ("", "1", "true", "on", "yes")
SWITCHES = ("DUALTAPE_JIT", "DUALTAPE_FUSED", "DUALTAPE_BACKGROUND_COMPILE")
"""Every switch: a held call takes each when it begins, and its choices are kept by them.
``DUALTAPE_BACKGROUND_COMPILE`` off: train-text waits for the compiler before its first step
(``kernels.compile_ahead``)."""
TRACE = "DUALTAPE_TRACE"
"""Off unless set to an on spelling: print each new route choice (``routes``)."""


class _Held(NamedTuple):
    """A held call's switches as spelled when it began (``spelled``), their values as read so
    far (``values``), and the choices kept for that spelling (``choices``)."""

    spelled: dict[str, str]
    values: dict[str, bool]
    choices: dict[Hashable, Any]


_HELD: ContextVar[_Held | None] = ContextVar("dualtape_switches", default=None)
_CHOICES: dict[tuple[str, ...], dict[Hashable, Any]] = {}
"""The choices made so far, by the switches' spelling they were made under."""
F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")


def switched_on(name: str) -> bool:
    """Whether the environment variable ``name`` (one of ``SWITCHES``) leaves its feature on
    (unset or empty: on). Case and surrounding blanks aside, ``0``/``false``/``off``/``no``
    turn it off and ``1``/``true``/``on``/``yes`` on; any other value raises ``ValueError``
    naming it. Within a ``held`` call, as it was spelled when the call began."""
    held = _HELD.get()
    if held is None:
        return _read(name)
    value = held.values.get(name)
    if value is None:
        value = held.values[name] = _parse(name, held.spelled[name])
    return value


def check_switches() -> None:
    """``ValueError`` naming the first of ``SWITCHES`` (or ``TRACE``) that the environment
    spells neither on nor off (``switched_on``'s rule): a command refuses it before it
    begins, not midway."""
    for name, value in _spelled().items():
        _parse(name, value)
    trace_on()


def trace_on() -> bool:
    """Whether ``DUALTAPE_TRACE`` is on: off unset or empty, else spelled as ``switched_on``
    takes it (any other value raises ``ValueError`` naming it); read at each call."""
    value = os.environ.get(TRACE, "")
    return bool(value.strip()) and _parse(TRACE, value)


def held_choice(key: Hashable, choose: Callable[[], T]) -> T:
    """``choose()``, a choice that depends only on the switches and on what ``key`` names
    (a fast path for a dtype and device): within a ``held`` call, made by the first ask for
    ``key`` under these switches, and kept for every later ask under them, in this call and
    later ones; outside one, made every time."""
    held = _HELD.get()
    if held is None:
        return choose()
    choices = held.choices
    if key not in choices:
        choices[key] = choose()
    return choices[key]


def forget_choices() -> None:
    """Drop every kept ``held_choice``: later calls choose afresh (the compiled loops became
    ready, ``kernels.compile_ahead``); a call under way keeps its own."""
    _CHOICES.clear()


def held(fn: F) -> F:
    """``fn`` with the switches taken once, when the call begins (nested ``held`` calls
    sharing the outer one's), and each ``held_choice`` made once for them: one path for the
    whole call, one environment lookup per switch instead of one per layer and pass."""

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        if _HELD.get() is not None:
            return fn(*args, **kwargs)
        spelled = _spelled()
        choices = _CHOICES.setdefault(tuple(spelled.values()), {})
        token = _HELD.set(_Held(spelled, {}, choices))
        try:
            return fn(*args, **kwargs)
        finally:
            _HELD.reset(token)

    return call  # type: ignore[return-value]


def _spelled() -> dict[str, str]:
    """Every switch as the environment spells it now (unset: empty). Where none is set, the
    usual case, that is read from ``os.environ``'s own mapping (CPython's and PyPy's
    ``os._Environ``), without the ``KeyError`` that ``os.environ.get`` raises and catches for
    each unset name: most of a ``held`` call's cost, which every training call pays."""
    data = getattr(os.environ, "_data", None)
    if _ENCODED is not None and type(data) is dict and not any([k in data for k in _ENCODED]):
        return dict.fromkeys(SWITCHES, "")
    return {name: os.environ.get(name, "") for name in SWITCHES}


_ENCODED = (tuple(os.environ.encodekey(name) for name in SWITCHES)
            if callable(getattr(os.environ, "encodekey", None)) else None)
"""``SWITCHES`` as ``os.environ`` keys its own mapping, where it has one."""


def _read(name: str) -> bool:
    return _parse(name, os.environ.get(name, ""))


@functools.cache
def _parse(name: str, value: str) -> bool:
    spelled = value.strip().lower()
    if spelled in ON:
        return True
    if spelled in OFF:
        return False
    raise ValueError(f"environment variable {name}={value!r}: use one of "
                     f"{', '.join(OFF)} (off) or {', '.join(ON[1:])} (on), or leave it unset")
