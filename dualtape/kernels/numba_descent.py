"""Plain SGD fused into an LSTM's backward pass, compiled for the CPU: the whole step
``planned_backprop.planned_descent`` takes for ``train_recurrent`` with ``SGD`` without
momentum or regulariser.

From the pre-activation gradients the backward loop leaves (``lstm_sequence``'s blocks
``dfi``, ``da_o``, ``dĉ``), one call computes the input gradient for the layer below and then
moves ``W``, ``U`` and ``b`` by ``−rate`` times their gradients without writing the gradients:
each weight is a BLAS ``gemm`` with ``beta = 1`` into the weight itself (at one row a compiled
rank-1 update: 68 against 115 µs for the seed network's first layer), the bias a sum of rows.
Where the unfused step writes each gradient and reads it back in the update (at the seed
network's 1536 x 512 ``U`` and one step, 3 MB written and read again), the weights are read and
written once. The results differ from the unfused step by rounding: the product is added to the
weight inside BLAS (scaled by ``−rate`` there) instead of rounded to a gradient first.
numpy arrays only, where the compiled LSTM loops run.

``descend_stack`` runs the backward loop (``_numba_lstm.layer_backward``) and ``descend`` of
every layer of a stack in one compiled call, for the route ``whole-step``
(``kernels.stack_loops`` chooses, after ``check_stack``); ``descend`` alone is the per-layer
call ``benchmarks.bound`` times.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from . import blas
from .lstm_sequence import backward_sequence, forward_sequence
from .numba_lstm import layer_scratch
from .numpy_lstm import NumpyLSTM

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


def stack_scratch(sizes: list[tuple[int, int]], steps: int, batch: int, dtype: Any
                  ) -> tuple[Array, int]:
    """One buffer for the backward pass through LSTMs of ``sizes`` ``(inputs, cells)`` over
    ``steps`` x ``batch``, and where its input gradient begins: first one layer's blocks and
    carries (``_numba_lstm.layer_backward``'s layout), sized for the largest, then the input
    gradient, which becomes the layer below's output gradient (that layer's loop reads it
    before its own input gradient is written over it)."""
    rows = steps * batch
    at = max(layer_scratch(rows, batch, n) for _, n in sizes)
    inputs = max([i for i, _ in sizes[1:]], default=0)
    return np.empty(at + rows * inputs, dtype=dtype), at


def descend_stack(weights: list[tuple[Array, Array, Array]],
                  tapes: list[tuple[Array, Array, Array]], dys: Array,
                  scratch: tuple[Array, int], rate: float) -> bool:
    """Plain SGD of a stack of LSTMs in one compiled call, from their forward tapes: from the
    top, each layer's backward loop and ``descend`` (its input gradient the next layer's
    output gradient). ``weights`` the layers' ``(W, U, b)``, ``tapes`` their ``(inputs,
    cells, gates)`` (T, B, ·), the first layer's inputs the network's, ``dys`` (T, B, o) the
    top's output gradient, ``scratch`` ``stack_scratch``'s buffer and offset. Unchecked:
    C-contiguous writeable numpy arrays of one dtype, float32 or float64 (the callers check
    them: ``planned_backprop``). Returns False, having moved no weight, where the network's input
    holds NaN or inf."""
    W0, flat = weights[0][0], scratch[0]
    return _compiled().descend_stack(
        *blas.addresses(W0.dtype), *(tuple(group) for group in zip(*weights, strict=True)),
        *(tuple(group) for group in zip(*tapes, strict=True)), dys, flat,
        np.array([0, scratch[1]], dtype=np.int64), W0.dtype.type(rate), W0.dtype.type(1))


def check_stack(loops: Any, like: Array) -> str | None:
    """How ``loops.descend_stack`` on two small LSTMs of ``like``'s dtype disagrees with the
    same step in numpy (numpy's products and sums from the ufunc cell's blocks) beyond
    rounding, at 3 steps of 2 rows and at one of one (the loops' gemv and rank-1 forms), or
    None."""
    for steps, batch in ((3, 2), (1, 1)):
        rng = np.random.default_rng(steps)
        weights = [(rng.uniform(-0.5, 0.5, (4 * n, i)).astype(like.dtype),
                    rng.uniform(-0.5, 0.5, (3 * n, n)).astype(like.dtype),
                    rng.uniform(-0.5, 0.5, 4 * n).astype(like.dtype)) for i, n in ((3, 4), (4, 2))]
        xs, dys = (rng.standard_normal((steps, batch, i)).astype(like.dtype) for i in (3, 2))
        h, tapes = xs, []
        for W, U, b in weights:
            zeros = np.zeros((batch, U.shape[1]), like.dtype)
            cells, gates, hs = forward_sequence(np, NumpyLSTM(), U, zeros, h @ W.T + b)
            tapes.append((h, cells, gates))
            h = hs
        want = _numpy_descent([(W.copy(), U.copy(), b.copy()) for W, U, b in weights], tapes,
                              dys, 0.25)
        scratch = stack_scratch([(3, 4), (4, 2)], steps, batch, like.dtype)
        loops.descend_stack(weights, tapes, dys, scratch, 0.25)
        eps = 64 * np.finfo(like.dtype).eps
        for got, wanted in zip(weights, want, strict=True):
            for a, b in zip(got, wanted, strict=True):
                if not (np.abs(a - b) <= eps * (1 + np.abs(b))).all():
                    return (f"the compiled SGD step of a stack differs from numpy's beyond "
                            f"rounding at {steps} step(s) of {batch} row(s)")
    return None


def _numpy_descent(weights: list[tuple[Array, Array, Array]],
                   tapes: list[tuple[Array, Array, Array]], dys: Array,
                   rate: float) -> list[tuple[Array, Array, Array]]:
    """``check_stack``'s reference: ``weights`` moved in place, returned."""
    steps, batch = dys.shape[:2]
    for (W, U, b), (x, cells, gates) in zip(weights[::-1], tapes[::-1], strict=True):
        zeros = np.zeros((batch, U.shape[1]), dys.dtype)
        blocks, _ = backward_sequence(np, NumpyLSTM(), U, cells, gates, dys, zeros, False)
        d = np.concatenate(blocks, axis=-1).reshape(steps * batch, -1)
        dys = (d @ W).reshape(steps, batch, -1)
        W -= rate * (d.T @ x.reshape(steps * batch, -1))
        U -= rate * (d[:, : U.shape[0]].T @ cells[:-1].reshape(steps * batch, -1))
        b -= rate * d.sum(axis=0)
    return weights


@functools.cache
def _compiled() -> Any:
    """The compiled function (numba imported here, on first use, the disk cache folder checked
    first: ``numba_cache.load``)."""
    from . import numba_cache

    return numba_cache.load("_numba_descent")
