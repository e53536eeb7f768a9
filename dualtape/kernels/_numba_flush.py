"""The x86 SSE control register (MXCSR) read and written from compiled code (imports numba):
``control()``, ``set_control(value)`` and ``exchange_control(keep, add)``, through LLVM's
``stmxcsr``/``ldmxcsr`` intrinsics. x86-64 only; ``flush`` decides where it runs."""

from __future__ import annotations

from typing import Any

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic


def _call(builder: Any, name: str, slot: Any) -> None:
    function = cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(ir.VoidType(), [slot.type]), name)
    builder.call(function, [slot])


@intrinsic
def _stmxcsr(typingctx: Any) -> Any:
    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        slot = cgutils.alloca_once(builder, ir.IntType(32))
        _call(builder, "llvm.x86.sse.stmxcsr", slot)
        return builder.load(slot)

    return types.uint32(), codegen


@intrinsic
def _ldmxcsr(typingctx: Any, value: Any) -> Any:
    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        slot = cgutils.alloca_once(builder, ir.IntType(32))
        builder.store(args[0], slot)
        _call(builder, "llvm.x86.sse.ldmxcsr", slot)
        return context.get_dummy_value()

    return types.void(types.uint32), codegen


@njit(cache=True)
def control() -> int:
    """This thread's MXCSR."""
    return _stmxcsr()  # type: ignore[call-arg]


@njit(cache=True)
def set_control(value: int) -> None:
    """Set this thread's MXCSR to ``value``."""
    _ldmxcsr(np.uint32(value))  # type: ignore[call-arg]


@njit(cache=True)
def exchange_control(keep: int, add: int) -> int:
    """Set this thread's MXCSR to ``(its bits & keep) | add``; returns the bits it had."""
    saved: int = _stmxcsr()  # type: ignore[call-arg]
    _ldmxcsr((saved & np.uint32(keep)) | np.uint32(add))  # type: ignore[call-arg]
    return saved
