"""Spare arrays: the compiled cells' large tape and scratch arrays, handed out again once
nothing holds them, so a user's own loop does not pay the page faults of fresh ones.

glibc's malloc returns a freed block of a few hundred KiB or more to the system (its ``mmap``
threshold, or its heap trimmed at the top), so a loop that makes the same arrays at every call
touches new pages at every call: at the forecaster's sizes (``StandardLSTM(1, 32)``, T = 52,
B = 64, float32) about 1,200 faults, half of a 4 ms ``backpropagate_sequence``
(``bench/results/2026-12-04-forecaster.md``). ``empty(shape, dtype)`` keeps every numpy array
of at least ``MIN_BYTES`` it makes, up to ``CAP_BYTES`` in all, and hands out a view of a kept
one again only once nothing else refers to it: CPython's reference count of the kept array
counts each user (the array handed out, any view of it, a tape or result kept by the caller),
so an array still in use is never handed out twice, whatever the caller keeps. A new shape
that does not fit under the cap makes room from the kept arrays nobody uses (the oldest
shapes first), else is made as ``np.empty`` makes it. Without ``sys.getrefcount`` (PyPy)
nothing is kept. The memory meters ``suspend`` it while they measure.
``allocator.keep_freed_memory`` does the same for every allocation of the process, and is
opt-in for that reason; this keeps only dualtape's own arrays.
"""

from __future__ import annotations

import math
import sys
import threading
from typing import Any

import numpy as np

MIN_BYTES = 64 << 10
"""Arrays below this are left to malloc (its heap serves them without new pages)."""
CAP_BYTES = 64 << 20
"""The kept arrays' bytes, at most."""

_KEPT: dict[tuple[tuple[int, ...], np.dtype], list[np.ndarray]] = {}
"""The kept arrays by shape and dtype, the oldest shape first."""
_HELD = [0]
"""The kept arrays' bytes."""
_SUSPENDED = [0]
"""How many ``suspend`` calls no ``resume`` has answered yet."""
_LOCK = threading.Lock()
_COUNTED = hasattr(sys, "getrefcount")
"""Whether reference counts can be read (not on PyPy: nothing is kept there)."""


def empty(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """A C-ordered numpy array of ``shape`` (a tuple) and ``dtype`` (a ``np.dtype``), its
    contents undefined as ``np.empty``'s: a kept one nothing refers to, else a new one
    (kept where it is large enough and fits; see the module's docstring)."""
    size = math.prod(shape) * dtype.itemsize
    if size < MIN_BYTES or _SUSPENDED[0] or not _COUNTED:
        return np.empty(shape, dtype)
    for base in _KEPT.get((shape, dtype), ()):
        view = base[...]  # claimed first: of two threads claiming one base, one sees both
        if sys.getrefcount(base) <= _FREE:  # the list, this loop and the view alone hold it
            return view
    with _LOCK:
        return _new(shape, dtype, size)


def suspend() -> None:
    """Make every array anew, keeping none, until as many ``resume`` calls: what the memory
    meters measure (a call's arrays as it makes them, not the kept ones it would reuse)."""
    with _LOCK:
        _SUSPENDED[0] += 1


def resume() -> None:
    """Answer one ``suspend``."""
    with _LOCK:
        if not _SUSPENDED[0]:
            raise RuntimeError("spare.resume without a suspend")
        _SUSPENDED[0] -= 1


def clear() -> None:
    """Let go of every kept array (those in use live on with their users)."""
    with _LOCK:
        _KEPT.clear()
        _HELD[0] = 0


def _new(shape: tuple[int, ...], dtype: np.dtype, size: int) -> np.ndarray:
    """A new array of ``size`` bytes, kept where room can be made for it."""
    _make_room(CAP_BYTES - size)
    if _HELD[0] > CAP_BYTES - size:
        return np.empty(shape, dtype)
    base = np.empty(shape, dtype)
    _KEPT.setdefault((shape, dtype), []).append(base)
    _HELD[0] += size
    return base[...]


def _make_room(limit: int) -> None:
    """Let go of unused kept arrays, the oldest shapes first, until at most ``limit`` bytes
    are kept or none is left unused."""
    for key, bases in list(_KEPT.items()):
        k = 0
        while k < len(bases):
            if _HELD[0] <= limit:
                return
            base = bases[k]
            if sys.getrefcount(base) < _FREE:  # the list and this name alone hold it (no view)
                del bases[k]  # by place: a removal by equality would compare arrays
                _HELD[0] -= base.nbytes
            else:
                k += 1
        if not bases:
            del _KEPT[key]


def _free_count() -> int:
    """The reference count of a kept array nobody uses, as ``empty``'s loop reads it: the
    list that keeps it, the loop's name, the view just made, the call's argument."""
    kept = [np.empty(0)]
    base = kept[0]
    _view = base[...]
    return sys.getrefcount(base)


_FREE = _free_count() if _COUNTED else 0
