"""Subnormal floats flushed to zero inside the fast CPU loops.

A saturated gate (σ of a pre-activation far below zero) and the products it enters are
subnormal floats (below 1.2e-38 in float32, 2.2e-308 in float64), and Intel cores compute
with those through a slow microcode path, many times slower than with normal numbers (AMD's
do not). So on numpy with the fast paths on, a recurrent sequence forwards and back (every
layer of it: the LSTM's compiled and ufunc loops, the standard cells' compiled loops, the
products around them; ``checkpointing.sequence_forward``/``sequence_backward``) runs with the
x86 control bits FTZ (a subnormal result is 0) and DAZ (a subnormal operand is read as 0) set
on the calling thread, restored after (``flushed_for``). Its results then differ from the
generic code's (``DUALTAPE_FUSED=0``, the reference, which keeps IEEE subnormals) only where
that has subnormal values: 0 here, an absolute difference below the dtype's smallest normal
number (``numpy.finfo(dtype).tiny``). BLAS's own threads keep their settings; their inputs
from these loops hold no subnormals. Where the bits cannot be set (not x86-64, or numba
absent or not loading: the ufunc loop without numba) nothing changes (``unavailable`` says
why).
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import platform
from collections.abc import Callable
from typing import Any

import array_api_compat

from ..switches import held_choice

FTZ_DAZ = 0x8040
"""MXCSR's flush-to-zero (bit 15) and denormals-are-zero (bit 6)."""


@functools.cache
def _registers() -> Any:
    """The compiled MXCSR functions, or the reason they cannot run here (a string)."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return f"the CPU is {platform.machine()}, not x86-64"
    if importlib.util.find_spec("numba") is None:
        return "numba is not installed"
    try:
        from . import numba_cache

        module = numba_cache.load("_numba_flush")
        module.set_control(module.control())
    except Exception as exc:  # an llvmlite or numba that does not load on this machine
        return f"numba does not load here: {type(exc).__name__}: {exc}"
    return module


def unavailable() -> str | None:
    """Why subnormals are not flushed here, or None when they are."""
    found = _registers()
    return found if isinstance(found, str) else None


def flushed_for(xp: Any) -> contextlib.AbstractContextManager[None]:
    """``flushed()`` for arrays of ``xp`` on numpy with the fast paths on, else nothing (the
    choice made once per ``held`` call: a training call enters two such blocks)."""
    return held_choice(("flushed_for", xp), lambda: _flushes(xp))()


def _flushes(xp: Any) -> Callable[[], contextlib.AbstractContextManager[None]]:
    from . import _generic_only

    if _generic_only() or not array_api_compat.is_numpy_namespace(xp):
        return contextlib.nullcontext
    return flushed


def flushed() -> contextlib.AbstractContextManager[None]:
    """FTZ and DAZ set on this thread inside the block, its own bits restored after (also on
    an exception); nothing where ``unavailable``."""
    registers = _registers()
    return contextlib.nullcontext() if isinstance(registers, str) else _Flushed(registers)


def control_here() -> int | None:
    """This thread's MXCSR (its flush and rounding bits), None where ``unavailable``: a
    thread that works for this one (``overlap``) runs with the same bits (``under_control``)."""
    registers = _registers()
    return None if isinstance(registers, str) else registers.control()


def under_control(bits: int | None) -> contextlib.AbstractContextManager[None]:
    """``bits`` (``control_here``'s) as this thread's MXCSR inside the block, its own restored
    after; nothing for None."""
    registers = _registers()
    if bits is None or isinstance(registers, str):
        return contextlib.nullcontext()
    return _Flushed(registers, bits)


class _Flushed(contextlib.AbstractContextManager):
    """``flushed``'s block with the compiled MXCSR functions ``registers`` (a class, not a
    generator: entered twice per training call, 0.2 µs a block where a generator's is 1.5);
    with ``bits``, those in place of this thread's own with FTZ and DAZ set."""

    def __init__(self, registers: Any, bits: int | None = None) -> None:
        self.registers = registers
        self.masks = (0xFFFFFFFF, FTZ_DAZ) if bits is None else (0, bits)  # keep, add

    def __enter__(self) -> None:
        self.saved = self.registers.exchange_control(*self.masks)

    def __exit__(self, *exc: object) -> None:
        self.registers.set_control(self.saved)
