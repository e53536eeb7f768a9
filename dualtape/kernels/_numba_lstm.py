"""The compiled LSTM loops and the vectorizable ``exp`` behind ``numba_lstm`` (imports numba).

The loops keep ``NumpyLSTM``'s order of operations (``lstm_sequence.Cell`` states the contract);
``gemm`` and ``gemv`` are the addresses of ``cblas_?gemm``/``cblas_?gemv`` as integers
(``blas.addresses``; ``gemv`` at batch 1), called through ``_numba_blas`` and passed in at each
call, so the compiled code caches on disk without a process-specific address in it, and
``one`` is 1 in the arrays' dtype, so float32 arithmetic stays float32.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit, types
from numba.extending import intrinsic, overload

from ._numba_blas import call_gemm, call_gemv
from .blas import NO_TRANS, ROW_MAJOR, TRANS

# Cephes's constants: the split of ln 2 for the range reduction, and exp(r) on |r| <= ln2/2
LOG2E = 1.4426950408889634
LN2_HI32, LN2_LO32 = 0.693359375, -2.12194440e-4
EXP32 = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
         1.6666665459e-1, 5.0000001201e-1)
LN2_HI64, LN2_LO64 = 6.93145751953125e-1, 1.42860682030941723212e-6
EXP64_P = (1.26177193074810590878e-4, 3.02994407707441961300e-2, 9.99999999999999999910e-1)
EXP64_Q = (3.00198505138664455042e-6, 2.52448340349684104192e-3, 2.27265548208155028766e-1,
           2.00000000000000000009e0)


@intrinsic
def _bits_as_float(typingctx: Any, bits: Any) -> Any:
    """The float whose bits are ``bits`` (int32 -> float32, int64 -> float64): LLVM's
    bitcast, which vectorizes (numba has no scalar ``view``)."""
    target: Any = {types.int32: types.float32, types.int64: types.float64}.get(bits)
    if target is None:
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        return builder.bitcast(args[0], context.get_value_type(target))

    return target(bits), codegen


def fast_exp(x: float) -> float:
    """``exp(x)`` in ``x``'s precision, in compiled code only (see the overload below)."""
    raise NotImplementedError("fast_exp runs only inside numba-compiled code")


@overload(fast_exp, inline="always")
def _fast_exp(x: Any) -> Any:
    if x == types.float32:
        f = x.cast_python_value
        low, high, log2e, magic = f(-87.33), f(88.3), f(LOG2E), f(1.5 * 2**23)
        hi, lo, c = f(LN2_HI32), f(LN2_LO32), tuple(f(k) for k in EXP32)
        one = f(1.0)

        def exp32(x: Any) -> Any:
            above = x if not x < low else low  # NaN stays NaN
            y = above if not above > high else high
            n = (y * log2e + magic) - magic  # round to nearest
            r = y - n * hi - n * lo
            p = (((((c[0] * r + c[1]) * r + c[2]) * r + c[3]) * r + c[4]) * r + c[5]) * r * r
            # numba widens int32 sums; numba passes typingctx itself (mypy sees the Python
            # signature of the intrinsic)
            bits = np.int32((np.int32(n) + 127) << 23)
            scale: Any = _bits_as_float(bits)  # type: ignore[call-arg]
            return (p + r + one) * scale

        return exp32
    if x == types.float64:
        low, high, magic = -708.3, 709.0, 1.5 * 2.0**52
        p0, p1, p2 = EXP64_P
        q0, q1, q2, q3 = EXP64_Q

        def exp64(x: Any) -> Any:
            above = x if not x < low else low  # NaN stays NaN
            y = above if not above > high else high
            n = (y * LOG2E + magic) - magic  # round to nearest
            r = y - n * LN2_HI64 - n * LN2_LO64
            rr = r * r
            px = r * ((p0 * rr + p1) * rr + p2)
            e = 1.0 + 2.0 * px / ((((q0 * rr + q1) * rr + q2) * rr + q3) - px)
            # numba passes typingctx itself (mypy sees the Python signature)
            return e * _bits_as_float((np.int64(n) + 1023) << 52)  # type: ignore[call-arg]

        return exp64
    return None


@njit(cache=True, nogil=True, boundscheck=False, error_model="numpy")
def forward_loop(gemm: Any, gemv: Any, U_fi: Any, U_fi_t: Any, projected: Any, r: Any,
                 cells: Any, gates: Any, one: Any) -> None:
    """Every step forwards: ``r = c_t U_fiᵀ``, ``f, i = σ(a + r)``, ``c_{t+1} = f c_t + i ĉ``.
    ``U_fi_t`` is ``U_fiᵀ`` in C order, read only at batch > 1 (a gemm with both operands
    untransposed: 2.2x faster than one reading ``U_fi`` transposed at 32 x 80 x 160 with
    OpenBLAS's SkylakeX kernels); at batch 1 the product is a gemv on ``U_fi``."""
    steps, batch, four_n = gates.shape
    n = four_n // 4
    for t in range(steps):
        forward_product(gemm, gemv, U_fi, U_fi_t, cells[t], r, one)
        for b in range(batch):
            a, rb, g = projected[t, b], r[b], gates[t, b]
            for j in range(2 * n):  # f and i: few operands, so LLVM vectorizes it
                g[j] = one / (one + fast_exp(-(a[j] + rb[j])))
            c, c_next = cells[t, b], cells[t + 1, b]
            for j in range(n):
                c_next[j] = g[j] * c[j] + g[n + j] * g[3 * n + j]


@njit(cache=True, nogil=True, boundscheck=False, error_model="numpy")
def backward_loop(gemm: Any, gemv: Any, U_fi: Any, gates: Any, rec: Any, q: Any, carry: Any,
                  dfi: Any, dc: Any, one: Any) -> None:
    """Every step back, t = T-1 … 0: ``d = carry + rec + q_t``, ``dfi_t *= d``, ``carry = d f``,
    and for t > 0 ``rec = dfi_t U_fi``."""
    steps, batch, n = dc.shape
    for t in range(steps - 1, -1, -1):
        for b in range(batch):  # loops of few operands each, so LLVM vectorizes them
            d, q_t, rb, carry_b = dc[t, b], q[t, b], rec[b], carry[b]
            for j in range(n):
                d[j] = carry_b[j] + rb[j] + q_t[j]
            factors = dfi[t, b]
            for j in range(n):
                factors[j] *= d[j]
                factors[n + j] *= d[j]
            f = gates[t, b]
            for j in range(n):
                carry_b[j] = d[j] * f[j]
        if t:
            backward_product(gemm, gemv, U_fi, dfi[t], rec, one)


@njit(cache=True, nogil=True, boundscheck=False, error_model="numpy", inline="always")
def forward_product(gemm: Any, gemv: Any, U_fi: Any, U_fi_t: Any, c: Any, r: Any,
                    one: Any) -> None:
    """``r = c U_fiᵀ`` for one step's cells ``c`` (B, o): a gemv on ``U_fi`` at batch 1, else a
    gemm on ``U_fi_t`` (``forward_loop``'s reasons)."""
    batch, n = c.shape
    zero = one - one
    if batch == 1:
        call_gemv(gemv, ROW_MAJOR, NO_TRANS, 2 * n, n, one, U_fi.ctypes.data, n, c.ctypes.data,
                  1, zero, r.ctypes.data, 1)
    else:
        call_gemm(gemm, ROW_MAJOR, NO_TRANS, NO_TRANS, batch, 2 * n, n, one, c.ctypes.data, n,
                  U_fi_t.ctypes.data, 2 * n, zero, r.ctypes.data, 2 * n)


@njit(cache=True, nogil=True, boundscheck=False, error_model="numpy", inline="always")
def backward_product(gemm: Any, gemv: Any, U_fi: Any, d: Any, rec: Any, one: Any) -> None:
    """``rec = d U_fi`` for one step's factors ``d`` (B, 2o): a gemv at batch 1, else a
    gemm."""
    batch, n = rec.shape
    zero = one - one
    if batch == 1:
        call_gemv(gemv, ROW_MAJOR, TRANS, 2 * n, n, one, U_fi.ctypes.data, n, d.ctypes.data, 1,
                  zero, rec.ctypes.data, 1)
    else:
        call_gemm(gemm, ROW_MAJOR, NO_TRANS, NO_TRANS, batch, n, 2 * n, one, d.ctypes.data,
                  2 * n, U_fi.ctypes.data, n, zero, rec.ctypes.data, n)


@njit(cache=True, nogil=True, boundscheck=False, error_model="numpy")
def recurrent_products(gemm: Any, gemv: Any, U_fi: Any, U_fi_t: Any, cells: Any, r: Any,
                       dfi: Any, rec: Any, one: Any) -> None:
    """The products of ``forward_loop`` and ``backward_loop`` alone, in their forms and order,
    without their pointwise work: ``r = c_t U_fiᵀ`` for every step, then ``rec = dfi_t U_fi``
    for t = T-1 … 1. The structural bound's per-step products (``benchmarks/bound.py``)."""
    for t in range(dfi.shape[0]):
        forward_product(gemm, gemv, U_fi, U_fi_t, cells[t], r, one)
    for t in range(dfi.shape[0] - 1, 0, -1):
        backward_product(gemm, gemv, U_fi, dfi[t], rec, one)


@njit(cache=True, nogil=True, boundscheck=False, error_model="numpy")
def output_gate(gates: Any, projected: Any, cells: Any, hs: Any, one: Any) -> None:
    """Every step's ``o = σ(c_t U_oᵀ + projected_o)`` in ``gates``' o block (which holds the
    product) and ``h = o c_{t+1}`` into ``hs``: one pass."""
    steps, batch, four_n = gates.shape
    n = four_n // 4
    for t in range(steps):
        for b in range(batch):
            g, a, c, h = gates[t, b], projected[t, b], cells[t + 1, b], hs[t, b]
            for j in range(n):
                o = one / (one + fast_exp(-(g[2 * n + j] + a[2 * n + j])))
                g[2 * n + j] = o
                h[j] = o * c[j]


@njit(cache=True, nogil=True, boundscheck=False, error_model="numpy")
def gate_factors(gates: Any, cells: Any, dhs: Any, q: Any, da_o: Any, dfi: Any,
                 one: Any) -> None:
    """Every step's ``q = dh o``, ``da_o = q c_{t+1} (1-o)`` and ``dfi = [c_t f(1-f),
    ĉ i(1-i)]``: one pass."""
    steps, batch, four_n = gates.shape
    n = four_n // 4
    for t in range(steps):
        for b in range(batch):
            g, dh, c_next, q_b, d_o = gates[t, b], dhs[t, b], cells[t + 1, b], q[t, b], da_o[t, b]
            for j in range(n):
                o = g[2 * n + j]
                q_b[j] = dh[j] * o
                d_o[j] = q_b[j] * c_next[j] * (one - o)
            c, factors = cells[t, b], dfi[t, b]
            for j in range(n):
                factors[j] = (one - g[j]) * g[j] * c[j]
                factors[n + j] = (one - g[n + j]) * g[n + j] * g[3 * n + j]


@njit(cache=True, nogil=True, boundscheck=False, error_model="numpy")
def candidate_gradient(gates: Any, dc: Any, out: Any, one: Any) -> None:
    """Every step's ``da_ĉ = (1-ĉ²) i dc`` into ``out``: one pass."""
    steps, batch, four_n = gates.shape
    n = four_n // 4
    for t in range(steps):
        for b in range(batch):
            g, d, da = gates[t, b], dc[t, b], out[t, b]
            for j in range(n):
                da[j] = (one - g[3 * n + j] * g[3 * n + j]) * g[n + j] * d[j]


@njit(cache=True, nogil=True, boundscheck=False, error_model="numpy")
def backward_sequence(gemm: Any, gemv: Any, U: Any, gates: Any, cells: Any, dhs: Any, q: Any,
                      da_o: Any, dfi: Any, dc: Any, carry: Any, rec: Any, carried_0: Any,
                      need_dc0: bool, one: Any) -> None:
    """``lstm_sequence.backward_sequence`` in one call, in its order of operations: the gate
    factors, the o rows' product ``dc = da_o U_o`` for every step (BLAS), the steps' carries
    ``q_t += (da_o U_o)_{t+1}``, the time loop from ``carry`` (``dc_T`` on entry), ĉ's gradient
    into ``q``, and with ``need_dc0`` the first cell's gradient into ``carry``."""
    steps, batch, n = dc.shape
    zero = one - one
    gate_factors(gates, cells, dhs, q, da_o, dfi, one)
    first = 0 if need_dc0 or steps > 1 else 1  # the first step of the U_o product
    if steps > first:
        call_gemm(gemm, ROW_MAJOR, NO_TRANS, NO_TRANS, (steps - first) * batch, n, n, one,
                  da_o[first:].ctypes.data, n, U[2 * n:].ctypes.data, n, zero,
                  dc[first:].ctypes.data, n)
        for t in range(steps - 1):
            q_t, carried = q[t], dc[t + 1]
            for b in range(batch):
                for j in range(n):
                    q_t[b, j] += carried[b, j]
        if need_dc0:
            carried_0[:] = dc[0]
    rec[:] = zero
    backward_loop(gemm, gemv, U, gates, rec, q, carry, dfi, dc, one)
    candidate_gradient(gates, dc, q, one)  # q is free again
    if need_dc0:
        call_gemm(gemm, ROW_MAJOR, NO_TRANS, NO_TRANS, batch, n, 2 * n, one,
                  dfi[0].ctypes.data, 2 * n, U.ctypes.data, n, zero, rec.ctypes.data, n)
        for b in range(batch):
            for j in range(n):
                carry[b, j] = (carry[b, j] + rec[b, j]) + carried_0[b, j]


@njit(cache=True, nogil=True)
def layer_scratch(rows: int, batch: int, n: int) -> int:  # pragma: no cover - compiled
    """The elements ``layer_backward`` takes of its scratch for ``rows`` (steps × batch) of
    ``n`` cells: the blocks ``dfi`` (2 per cell and row), ``da_o`` and ``dĉ``, the cell
    gradients ``dc`` (1 each), then three carries of batch × cells."""
    return (5 * rows + 3 * batch) * n


@njit(cache=True, nogil=True, boundscheck=False, error_model="numpy")
def layer_backward(gemm: Any, gemv: Any, U: Any, gates: Any, cells: Any, dys: Any, flat: Any,
                   one: Any) -> Any:  # pragma: no cover - compiled
    """One layer's ``backward_sequence`` from its output gradient ``dys`` (T, B, n), the last
    cell's gradient zero and the first one's not wanted, in ``flat`` (the one home of a stack
    pass's per-layer scratch layout, ``layer_scratch`` elements): returns the pre-activation
    gradients ``dfi`` (rows, 2n), ``da_o`` and ``dĉ`` (rows, n), views of ``flat``."""
    steps, batch, n = dys.shape
    rows = steps * batch
    block, carried = rows * n, 5 * rows * n
    dfi = flat[: 2 * block].reshape(steps, batch, 2 * n)
    da_o = flat[2 * block : 3 * block].reshape(steps, batch, n)
    dg = flat[3 * block : 4 * block].reshape(steps, batch, n)
    dc = flat[4 * block : carried].reshape(steps, batch, n)
    carries = flat[carried : carried + 3 * batch * n].reshape(3, batch, n)
    carries[0] = one - one
    backward_sequence(gemm, gemv, U, gates, cells, dys, dg, da_o, dfi, dc, carries[0],
                      carries[1], carries[2], False, one)
    return dfi.reshape(rows, 2 * n), da_o.reshape(rows, n), dg.reshape(rows, n)


@njit(cache=True, nogil=True, boundscheck=False, error_model="numpy")
def forward_sequence(gemm: Any, gemv: Any, U: Any, U_fi_t: Any, projected: Any, r: Any,
                     cells: Any, gates: Any, hs: Any, one: Any) -> None:
    """``lstm_sequence.forward_sequence`` after its tanh, in one call in its order of
    operations: the time loop, the o rows' product ``c_t U_oᵀ`` of every step into ``gates``'
    o block (BLAS, its rows ``4o`` apart), then ``output_gate``."""
    steps, batch, four_n = gates.shape
    n = four_n // 4
    forward_loop(gemm, gemv, U, U_fi_t, projected, r, cells, gates, one)
    call_gemm(gemm, ROW_MAJOR, NO_TRANS, TRANS, steps * batch, n, n, one, cells.ctypes.data, n,
              U[2 * n:].ctypes.data, n, one - one, gates[:, :, 2 * n:].ctypes.data, four_n)
    output_gate(gates, projected, cells, hs, one)
