"""Plain SGD of one LSTM by its pre-activation gradients, compiled for the CPU behind
``numba_descent`` (imports numba).

``gemm`` is the address of ``cblas_?gemm`` as an integer (``blas.addresses``), called through
``_numba_blas`` as in ``_numba_lstm``; ``one`` is 1 in the arrays' dtype, so float32 stays
float32.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

from ._numba_blas import call_gemm
from ._numba_lstm import layer_backward
from .blas import NO_TRANS, ROW_MAJOR, TRANS

Array = Any


@njit(cache=True, nogil=True, boundscheck=False, error_model="numpy")
def add_outer(M: Array, scale: Any, a: Array, b: Array) -> None:  # pragma: no cover - compiled
    """``M += (scale·a) bᵀ`` in place, a row at a time (each a loop LLVM vectorizes)."""
    for j in range(M.shape[0]):
        factor = scale * a[j]
        row = M[j]
        for k in range(M.shape[1]):
            row[k] += factor * b[k]


@njit(cache=True, nogil=True, boundscheck=False, error_model="numpy")
def descend(gemm: Any, W: Array, U: Array, b: Array, xs: Array, cells: Array, dfi: Array,
            da_o: Array, dg: Array, dxs: Array, need_dxs: bool, rate: Any,
            one: Any) -> None:  # pragma: no cover - compiled
    """With ``need_dxs`` first the input gradient ``dxs = dfi W_fi + da_o W_o + dg W_ĉ``
    (rows, i), then ``W -= rate·dᵀ xs``, ``U -= rate·d_fioᵀ cells`` (BLAS, ``beta = 1``: the
    gradients are never written; at one row a rank-1 update in place, ``add_outer``) and
    ``b -= rate·Σ_rows d``, the column sums added row by row.
    ``xs`` (rows, i) the inputs, ``cells`` (rows, o) the cells each step began from; the
    blocks of ``d``: ``dfi`` (rows, 2o), ``da_o`` and ``dg`` (rows, o)."""
    rows, n = da_o.shape
    n_in = xs.shape[1]
    zero = one - one
    if need_dxs:
        call_gemm(gemm, ROW_MAJOR, NO_TRANS, NO_TRANS, rows, n_in, 2 * n, one, dfi.ctypes.data,
                  2 * n, W.ctypes.data, n_in, zero, dxs.ctypes.data, n_in)
        call_gemm(gemm, ROW_MAJOR, NO_TRANS, NO_TRANS, rows, n_in, n, one, da_o.ctypes.data, n,
                  W[2 * n :].ctypes.data, n_in, one, dxs.ctypes.data, n_in)
        call_gemm(gemm, ROW_MAJOR, NO_TRANS, NO_TRANS, rows, n_in, n, one, dg.ctypes.data, n,
                  W[3 * n :].ctypes.data, n_in, one, dxs.ctypes.data, n_in)
    step = zero - rate
    for block, first, width in ((dfi, 0, 2 * n), (da_o, 2 * n, n), (dg, 3 * n, n)):
        if rows == 1:  # a rank-1 update: 2x faster than BLAS's gemm of inner size 1
            add_outer(W[first : first + width], step, block[0], xs[0])
            if first < 3 * n:  # U has no ĉ rows
                add_outer(U[first : first + width], step, block[0], cells[0])
            continue
        call_gemm(gemm, ROW_MAJOR, TRANS, NO_TRANS, width, n_in, rows, step, block.ctypes.data,
                  width, xs.ctypes.data, n_in, one, W[first:].ctypes.data, n_in)
        if first < 3 * n:
            call_gemm(gemm, ROW_MAJOR, TRANS, NO_TRANS, width, n, rows, step,
                      block.ctypes.data, width, cells.ctypes.data, n, one,
                      U[first:].ctypes.data, n)
    sums = np.zeros(4 * n, dtype=b.dtype)
    for r in range(rows):  # row by row: each inner loop is contiguous, so LLVM vectorizes it
        for j in range(2 * n):
            sums[j] += dfi[r, j]
        for j in range(n):
            sums[2 * n + j] += da_o[r, j]
            sums[3 * n + j] += dg[r, j]
    for j in range(4 * n):
        b[j] -= rate * sums[j]


@njit(cache=True, nogil=True, boundscheck=False, error_model="numpy")
def descend_stack(gemm: Any, gemv: Any, Ws: Any, Us: Any, bs: Any, inputs: Any, cells: Any,
                  gates: Any, dys: Array, flat: Array, at: Array, rate: Any,
                  one: Any) -> bool:  # pragma: no cover - compiled
    """Plain SGD of a stack of LSTMs (weights ``Ws``, ``Us``, ``bs``, a tuple each) from
    their forward tapes (``inputs`` (T, B, ·), ``cells``, ``gates``: a tuple each, the first
    input the network's) and the top's output gradient ``dys`` (T, B, o): from the top,
    each layer's backward loop (``_numba_lstm.layer_backward``) and
    ``descend``, the input gradient becoming the next layer's ``dys``. ``flat`` holds the
    blocks and carries of one layer at ``at[0]`` (``layer_backward``'s layout) and one
    input gradient at ``at[1]``. Returns False, having moved no weight, where
    the network's input holds NaN or inf."""
    steps, batch = dys.shape[:2]
    rows = steps * batch
    for v in inputs[0].ravel():
        if not np.isfinite(v):
            return False
    for k in range(len(Ws) - 1, -1, -1):
        W, U, b = Ws[k], Us[k], bs[k]
        n, n_in = U.shape[1], W.shape[1]
        dfi, da_o, dg = layer_backward(gemm, gemv, U, gates[k], cells[k], dys, flat[at[0]:],
                                       one)
        began = cells[k].reshape((steps + 1) * batch, n)[:rows]  # the cells before each step
        xs = inputs[k].reshape(rows, n_in)
        if k == 0:
            descend(gemm, W, U, b, xs, began, dfi, da_o, dg, W, False, rate, one)
        else:
            dxs = flat[at[1] : at[1] + rows * n_in].reshape(rows, n_in)
            descend(gemm, W, U, b, xs, began, dfi, da_o, dg, dxs, True, rate, one)
            dys = dxs.reshape(steps, batch, n_in)
    return True
