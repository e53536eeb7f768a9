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
from ._numba_lstm import backward_sequence, forward_sequence
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
def train_step(gemm: Any, gemv: Any, Ws: Any, Us: Any, bs: Any, xs: Array, targets: Array,
               flat: Array, at: Array, last: Array, rate: Any,
               one: Any) -> float:  # pragma: no cover - compiled
    """One SGD step of a stack of LSTMs (weights ``Ws``, ``Us``, ``bs``, a tuple each) from
    zero states over ``xs`` (T, B, i) under the squared error against ``targets`` (T, B, o):
    each layer's projection (BLAS) and ``tanh`` of its candidates, its forward loop
    (``_numba_lstm.forward_sequence``), the loss and its gradient ``(y − t)/B``, then from the
    top each layer's backward loop and ``descend``, as ``descent._descend`` runs them. ``flat``
    holds every buffer at the offsets ``at`` (``descent.StepPlan``'s layout); the last cells
    go to ``last``. Returns the loss, or, having moved no weight, NaN where ``xs`` holds NaN
    or inf and the loss itself where it is not finite."""
    steps, batch, n_in = xs.shape
    rows = steps * batch
    zero = one - one
    for v in xs.ravel():
        if not np.isfinite(v):
            return np.nan
    h = xs.reshape(rows, n_in)
    kept = 0
    for k in range(len(Ws)):
        W, U, b = Ws[k], Us[k], bs[k]
        n, n_in = U.shape[1], W.shape[1]
        cells_at, gates_at, hs_at = at[6 + 3 * k], at[7 + 3 * k], at[8 + 3 * k]
        projected = flat[at[0] : at[0] + rows * 4 * n].reshape(steps, batch, 4 * n)
        call_gemm(gemm, ROW_MAJOR, NO_TRANS, TRANS, rows, 4 * n, n_in, one, h.ctypes.data,
                  n_in, W.ctypes.data, n_in, zero, projected.ctypes.data, 4 * n)
        cells = flat[cells_at : cells_at + (steps + 1) * batch * n].reshape(steps + 1, batch, n)
        gates = flat[gates_at : gates_at + rows * 4 * n].reshape(steps, batch, 4 * n)
        hs = flat[hs_at : hs_at + rows * n].reshape(steps, batch, n)
        for t in range(steps):
            for r in range(batch):
                a, g = projected[t, r], gates[t, r]
                for j in range(4 * n):
                    a[j] += b[j]
                for j in range(3 * n, 4 * n):
                    g[j] = np.tanh(a[j])
        cells[0] = zero
        U_fi_t = U
        if batch > 1:
            U_fi_t = flat[at[2] : at[2] + 2 * n * n].reshape(n, 2 * n)
            for i in range(2 * n):
                for j in range(n):
                    U_fi_t[j, i] = U[i, j]
        forward_sequence(gemm, gemv, U, U_fi_t, projected,
                         flat[at[1] : at[1] + 2 * batch * n].reshape(batch, 2 * n), cells, gates,
                         hs, one)
        last[kept : kept + batch * n] = cells[steps].ravel()
        kept += batch * n
        h = hs.reshape(rows, n)
    n = h.shape[1]
    dys = flat[at[3] : at[3] + rows * n].reshape(steps, batch, n)
    ys, ts, ds = h.ravel(), targets.ravel(), dys.ravel()
    count = np.empty(1, dtype=flat.dtype)
    count[0] = batch
    total, half = zero, one / (one + one)
    for r in range(rows):
        square = zero
        for j in range(r * n, (r + 1) * n):
            diff = ys[j] - ts[j]
            square += diff * diff
            ds[j] = diff / count[0]
        total += half * square
    loss = total / count[0]
    if not np.isfinite(loss):
        return loss
    for k in range(len(Ws) - 1, -1, -1):
        W, U, b = Ws[k], Us[k], bs[k]
        n, n_in = U.shape[1], W.shape[1]
        cells_at, gates_at = at[6 + 3 * k], at[7 + 3 * k]
        cells = flat[cells_at : cells_at + (steps + 1) * batch * n].reshape(steps + 1, batch, n)
        gates = flat[gates_at : gates_at + rows * 4 * n].reshape(steps, batch, 4 * n)
        block, carry_size = rows * n, batch * n
        back = at[4]
        dfi = flat[back : back + 2 * block].reshape(rows, 2 * n)
        da_o = flat[back + 2 * block : back + 3 * block].reshape(rows, n)
        dg = flat[back + 3 * block : back + 4 * block].reshape(rows, n)
        dc = flat[back + 4 * block : back + 5 * block].reshape(steps, batch, n)
        carried = back + 5 * block
        carry = flat[carried : carried + carry_size].reshape(batch, n)
        rec = flat[carried + carry_size : carried + 2 * carry_size].reshape(batch, n)
        first = flat[carried + 2 * carry_size : carried + 3 * carry_size].reshape(batch, n)
        carry[...] = zero
        backward_sequence(gemm, gemv, U, gates, cells, dys, dg.reshape(steps, batch, n),
                          da_o.reshape(steps, batch, n), dfi.reshape(steps, batch, 2 * n), dc,
                          carry, rec, first, False, one)
        began = flat[cells_at : cells_at + block].reshape(rows, n)  # the cells before each step
        if k == 0:
            descend(gemm, W, U, b, xs.reshape(rows, n_in), began, dfi, da_o, dg, W, False, rate,
                    one)
        else:
            below = at[8 + 3 * (k - 1)]
            dxs = flat[at[5] : at[5] + rows * n_in].reshape(rows, n_in)
            descend(gemm, W, U, b, flat[below : below + rows * n_in].reshape(rows, n_in), began,
                    dfi, da_o, dg, dxs, True, rate, one)
            dys = dxs.reshape(steps, batch, n_in)
    return loss
