"""``cblas_?gemm`` and ``cblas_?gemv`` called from compiled code through their addresses, given
as integers (``blas.addresses``), with the arguments of ``blas.GEMM`` and ``blas.GEMV``
(imports numba).

numba's dispatcher unboxes a ctypes function argument through Python (``ctypes.cast``, about
4 µs a call here, 0.76 µs for a call whose 13 arguments are arrays and integers), and a compiled
loop takes the routines as arguments so that its disk cache holds no address of this process:
an integer keeps both. ``call_gemm(address, ...)`` casts each argument to its C type (sizes and
leading dimensions to 64 bits, pointers from the integers ``array.ctypes.data`` gives, the
scalars to the type of ``alpha``: ``float32`` calls ``cblas_sgemm``'s form, ``float64``
``cblas_dgemm``'s) and calls the address. numba's disk cache knows its callers' files, not this
one: a change here that changes their code goes with a change to theirs (or to numba's
version), or their cached code keeps the old calls.
"""

from __future__ import annotations

from typing import Any

from llvmlite import ir
from numba import types
from numba.extending import intrinsic

_INT32, _INT64, _POINTER = ir.IntType(32), ir.IntType(64), ir.IntType(8).as_pointer()
GEMM_ARGUMENTS = ("enum", "enum", "enum", "size", "size", "size", "real", "pointer", "size",
                  "pointer", "size", "real", "pointer", "size")
"""``order, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc``, as ``blas.GEMM``."""
GEMV_ARGUMENTS = ("enum", "enum", "size", "size", "real", "pointer", "size", "pointer", "size",
                  "real", "pointer", "size")
"""``order, trans, m, n, alpha, a, lda, x, incx, beta, y, incy``, as ``blas.GEMV``."""


def _signature(kinds: tuple[str, ...], address: Any, args: tuple[Any, ...]) -> Any:
    """The signature and code generator of a call of a routine of argument ``kinds`` at
    ``address`` with numba-typed ``args``; None (no match) unless ``alpha`` is a float."""
    real = args[kinds.index("real")]
    if real not in (types.float32, types.float64):
        return None
    c_type = {"enum": (types.int32, _INT32), "size": (types.int64, _INT64),
              "pointer": (types.uintp, _POINTER),
              "real": (real, ir.FloatType() if real == types.float32 else ir.DoubleType())}

    def codegen(context: Any, builder: Any, signature: Any, values: Any) -> Any:
        converted = []
        for kind, value, given in zip(kinds, values[1:], signature.args[1:], strict=True):
            numba_type, llvm_type = c_type[kind]
            value = context.cast(builder, value, given, numba_type)
            converted.append(builder.inttoptr(value, llvm_type) if kind == "pointer" else value)
        function = ir.FunctionType(ir.VoidType(), [c_type[k][1] for k in kinds])
        target = context.cast(builder, values[0], signature.args[0], types.uintp)
        builder.call(builder.inttoptr(target, function.as_pointer()), converted)
        return context.get_dummy_value()

    return types.void(address, *args), codegen


def _gemm(typingctx: Any, address: Any, order: Any, trans_a: Any, trans_b: Any, m: Any, n: Any,
          k: Any, alpha: Any, a: Any, lda: Any, b: Any, ldb: Any, beta: Any, c: Any,
          ldc: Any) -> Any:
    """``call_gemm(address, order, ...)``: ``cblas_?gemm`` at the integer ``address``."""
    return _signature(GEMM_ARGUMENTS, address, (order, trans_a, trans_b, m, n, k, alpha, a, lda,
                                                b, ldb, beta, c, ldc))


def _gemv(typingctx: Any, address: Any, order: Any, trans: Any, m: Any, n: Any, alpha: Any,
          a: Any, lda: Any, x: Any, incx: Any, beta: Any, y: Any, incy: Any) -> Any:
    """``call_gemv(address, order, ...)``: ``cblas_?gemv`` at the integer ``address``."""
    return _signature(GEMV_ARGUMENTS, address, (order, trans, m, n, alpha, a, lda, x, incx,
                                                beta, y, incy))


# Typed Any: called from compiled code without the typing context numba passes itself.
call_gemm: Any = intrinsic(_gemm)
call_gemv: Any = intrinsic(_gemv)
