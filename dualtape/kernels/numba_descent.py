"""Plain SGD fused into an LSTM's backward pass, compiled for the CPU: the fast path
``descent.py`` takes for ``train_recurrent`` with ``SGD`` without momentum or regulariser.

From the pre-activation gradients the backward loop leaves (``lstm_sequence``'s blocks
``dfi``, ``da_o``, ``dĉ``), one call computes the input gradient for the layer below and then
moves ``W``, ``U`` and ``b`` by ``−rate`` times their gradients without writing the gradients:
each weight is a BLAS ``gemm`` with ``beta = 1`` into the weight itself (at one row a compiled
rank-1 update: 68 against 115 µs for the seed network's first layer), the bias a sum of rows.
Where the unfused step writes each gradient and reads it back in the update (at the seed
network's 1536 x 512 ``U`` and one step, 3 MB written and read again), the weights are read and
written once. The results differ from the unfused step by rounding: the product is added to the
weight inside BLAS (scaled by ``−rate`` there) instead of rounded to a gradient first.
numpy arrays only, where the compiled LSTM loops run (``kernels.descent_loops`` chooses).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from . import blas

Array = Any


def descend(W: Array, U: Array, b: Array, xs: Array, cells: Array,
            blocks: tuple[Array, Array, Array], dxs: Array | None, rate: float) -> None:
    """``dxs = d W`` when ``dxs`` is given (written first, with the weights as they were),
    then ``W -= rate·dᵀ xs``, ``U -= rate·d_{f,i,o}ᵀ cells``, ``b -= rate·Σ d`` in place, for
    an LSTM of ``o`` cells and ``i`` inputs: ``W`` (4o, i), ``U`` (3o, o), ``b`` (4o,),
    ``xs`` (rows, i), ``cells`` (rows, o) the cells each step began from, ``blocks`` the
    pre-activation gradients ``(dfi (rows, 2o), da_o (rows, o), dĉ (rows, o))``, ``dxs``
    (rows, i). ``ValueError`` unless all are C-contiguous numpy arrays of one dtype, float32
    or float64, of these shapes, the written ones writeable (the compiled code indexes raw
    memory)."""
    dfi, da_o, dg = blocks
    out = (W, U, b) if dxs is None else (W, U, b, dxs)
    arrays = (*out, xs, cells, dfi, da_o, dg)
    dtype = W.dtype if type(W) is np.ndarray else None
    if dtype not in (np.float32, np.float64) or not all(
            [type(a) is np.ndarray and a.dtype == dtype and a.flags.c_contiguous
             for a in arrays]):
        raise ValueError("numba_descent: C-contiguous float32 or float64 numpy arrays of one "
                         "dtype only, got " + ", ".join(
                             f"{getattr(a, 'dtype', type(a).__name__)}" for a in arrays))
    rows, n = da_o.shape if da_o.ndim == 2 else (-1, -1)
    i = W.shape[-1]
    want = ((4 * n, i), (3 * n, n), (4 * n,), (rows, i), (rows, n), (rows, 2 * n), (rows, n),
            (rows, n))
    shapes = (W.shape, U.shape, b.shape, xs.shape, cells.shape, dfi.shape, da_o.shape,
              dg.shape)
    if shapes != want or (dxs is not None and dxs.shape != (rows, i)):
        raise ValueError(f"numba_descent: shapes W {W.shape}, U {U.shape}, b {b.shape}, xs "
                         f"{xs.shape}, cells {cells.shape}, blocks {dfi.shape} {da_o.shape} "
                         f"{dg.shape}, dxs {None if dxs is None else dxs.shape}")
    if not all([a.flags.writeable for a in out]):
        raise ValueError("numba_descent: W, U, b and dxs must be writeable")
    _compiled().descend(blas.addresses(dtype)[0], W, U, b, xs, cells, dfi, da_o, dg,
                        W if dxs is None else dxs, dxs is not None, dtype.type(rate),
                        dtype.type(1))


def check_compiled(loops: Any, like: Array) -> str | None:
    """How ``loops.descend`` disagrees with numpy's products and sums (the unfused step's
    maths) on a small LSTM of ``like``'s dtype beyond rounding, at 5 rows and at one (its
    rank-1 updates), or None."""
    for rows in (5, 1):
        problem = _check_rows(loops, like, rows)
        if problem is not None:
            return problem
    return None


def _check_rows(loops: Any, like: Array, rows: int) -> str | None:
    rng = np.random.default_rng(rows)
    n, i, rate = 3, 4, 0.25
    W, U, b, xs, cells, d = (rng.standard_normal(shape).astype(like.dtype) for shape in (
        (4 * n, i), (3 * n, n), (4 * n,), (rows, i), (rows, n), (rows, 4 * n)))
    blocks = tuple(np.ascontiguousarray(d[:, s]) for s in (
        slice(0, 2 * n), slice(2 * n, 3 * n), slice(3 * n, None)))
    want = {"dxs": d @ W, "W": W - rate * (d.T @ xs), "U": U - rate * (d[:, : 3 * n].T @ cells),
            "b": b - rate * d.sum(axis=0)}
    sizes = {"dxs": abs(d) @ abs(W), "W": abs(W) + rate * (abs(d).T @ abs(xs)),
             "U": abs(U) + rate * (abs(d[:, : 3 * n]).T @ abs(cells)),
             "b": abs(b) + rate * abs(d).sum(axis=0)}
    got = {"dxs": np.empty((rows, i), like.dtype), "W": W.copy(), "U": U.copy(), "b": b.copy()}
    loops.descend(got["W"], got["U"], got["b"], xs, cells, blocks, got["dxs"], rate)
    eps = 8 * rows * np.finfo(like.dtype).eps
    for name, value in want.items():
        if not (np.abs(got[name] - value) <= eps * sizes[name]).all():
            return (f"the fused SGD step's {name} differs from numpy's beyond rounding at "
                    f"{rows} row(s)")
    return None


class StepBuffers:
    """``train_step``'s buffers for one stack of LSTMs at one input form: the arrays of every
    layer's forward tape (cells, gates, outputs), then scratch shared by the layers (one
    layer's projection, recurrent product and ``U_fiᵀ``, the output gradient, the backward
    blocks and carries of ``descent._scratch``, one input gradient), in one ``flat`` array at
    the offsets ``at``. ``weights`` are the layers' ``(W, U, b)``: C-contiguous, writeable
    numpy arrays of one dtype, float32 or float64 (the caller checks; the compiled code
    indexes raw memory)."""

    def __init__(self, weights: list[tuple[Array, Array, Array]], steps: int,
                 batch: int) -> None:
        self.Ws, self.Us, self.bs = (tuple(group) for group in zip(*weights, strict=True))
        self.dtype, self.steps, self.batch = self.Ws[0].dtype, steps, batch
        rows, sizes = steps * batch, [U.shape[1] for U in self.Us]
        cells, below = max(sizes), max(sizes[:-1], default=0)
        shared = [rows * 4 * cells, batch * 2 * cells, 2 * cells * cells, rows * sizes[-1],
                  (5 * rows + 3 * batch) * cells, rows * below]
        tapes = [size for n in sizes for size in ((steps + 1) * batch * n, rows * 4 * n, rows * n)]
        self.at = np.cumsum([0, *shared, *tapes[:-1]], dtype=np.int64)
        self.flat = np.empty(int(self.at[-1]) + tapes[-1], dtype=self.dtype)
        self.one = self.dtype.type(1)
        self.gemm, self.gemv = blas.addresses(self.dtype)
        self._kept = [(batch * sum(sizes[:k]), batch * n, n) for k, n in enumerate(sizes)]

    def step(self, xs: Array, targets: Array, rate: float) -> tuple[float, list[Array]]:
        """``train_step`` over ``xs`` (T, B, i) against ``targets`` (T, B, o), C-contiguous
        numpy arrays of this dtype and form (the caller checks): the loss (NaN, no weight
        moved, where ``xs`` holds NaN or inf; the loss where it is not finite, no weight
        moved) and each layer's last cells (B, o), new arrays."""
        last = np.empty(self._kept[-1][0] + self._kept[-1][1], dtype=self.dtype)
        loss = _compiled().train_step(self.gemm, self.gemv, self.Ws, self.Us, self.bs, xs,
                                      targets, self.flat, self.at, last, self.dtype.type(rate),
                                      self.one)
        return loss, [last[at : at + size].reshape(-1, n) for at, size, n in self._kept]


def check_step(loops: Any, like: Array) -> str | None:
    """How ``loops.StepBuffers``'s step of two small LSTMs of ``like``'s dtype disagrees
    with the same step in numpy (the ufunc cell's loops, numpy's products) beyond rounding,
    at 3 steps of 2 rows and at one of one (the loops' gemv and rank-1 forms), or None."""
    for steps, batch in ((3, 2), (1, 1)):
        rng = np.random.default_rng(steps)
        weights: list[tuple[Array, Array, Array]] = [
            (rng.uniform(-0.5, 0.5, (4 * n, i)).astype(like.dtype),
             rng.uniform(-0.5, 0.5, (3 * n, n)).astype(like.dtype),
             rng.uniform(-0.5, 0.5, 4 * n).astype(like.dtype)) for i, n in ((3, 4), (4, 2))]
        xs, targets = (rng.standard_normal((steps, batch, i)).astype(like.dtype)
                       for i in (3, 2))
        want = _numpy_step([(W.copy(), U.copy(), b.copy()) for W, U, b in weights], xs,
                           targets, 0.25)
        got = loops.StepBuffers(weights, steps, batch).step(xs, targets, 0.25)
        eps = 64 * np.finfo(like.dtype).eps
        for a, b in zip(_arrays(got[0], got[1], weights), _arrays(*want), strict=True):
            if not (np.abs(a - b) <= eps * (1 + np.abs(b))).all():
                return (f"the compiled SGD training step differs from numpy's beyond rounding "
                        f"at {steps} step(s) of {batch} row(s)")
    return None


def _arrays(loss: float, states: list[Array], weights: list[tuple[Array, Array, Array]]
            ) -> list[Array]:
    """A step's results, to compare one by one."""
    return [np.atleast_1d(loss), *states, *(w for group in weights for w in group)]


def _numpy_step(weights: list[tuple[Array, Array, Array]], xs: Array, targets: Array,
                rate: float) -> tuple[float, list[Array], list[tuple[Array, Array, Array]]]:
    """``check_step``'s reference: the loss, last cells and moved ``weights`` (in place)."""
    from .lstm_sequence import backward_sequence, forward_sequence
    from .numpy_lstm import NumpyLSTM

    cell, (steps, batch, _), h, tapes = NumpyLSTM(), xs.shape, xs, []
    for W, U, b in weights:
        zeros = np.zeros((batch, U.shape[1]), xs.dtype)
        cells, gates, hs = forward_sequence(np, cell, U, zeros, h @ W.T + b)
        tapes.append((h, cells, gates, zeros))
        h = hs
    diff = h - targets
    dys = diff / batch
    for (W, U, b), (inputs, cells, gates, zeros) in zip(weights[::-1], tapes[::-1], strict=True):
        blocks, _ = backward_sequence(np, cell, U, cells, gates, dys, zeros, False)
        d = np.concatenate(blocks, axis=-1).reshape(steps * batch, -1)
        dys = (d @ W).reshape(steps, batch, -1)
        W -= rate * (d.T @ inputs.reshape(steps * batch, -1))
        U -= rate * (d[:, : U.shape[0]].T @ cells[:-1].reshape(steps * batch, -1))
        b -= rate * d.sum(axis=0)
    return (float((0.5 * (diff * diff).sum()) / batch), [c[-1] for _, c, _, _ in tapes],
            weights)


@functools.cache
def _compiled() -> Any:
    """The compiled function (numba imported here, on first use, the disk cache folder checked
    first: ``numba_cache.load``)."""
    from . import numba_cache

    return numba_cache.load("_numba_descent")
