"""Convolution, Deconvolution and max pooling on numpy with compiled window loops (numba).

Measured on AMD EPYC (float32, one thread; bench/results/2026-12-02-conv.md), the generic
convolution spends most of its time outside the matrix products: numpy's copy of the
transposed window view into the (C·kernel, B·rows·cols) matrix, the transposes around that
matrix, and a col2im of k·k strided adds whose inner loop is one image row long; pooling
spends it in reductions over windows of four. Here the windows are unfolded by a compiled
loop straight into one C-contiguous (C·kernel, rows·cols) matrix per image
(``_numba_spatial.unfold``), so each product is a per-image ``matmul`` whose result is
already (B, C_out, rows, cols); the weight gradient is one batched product on the same
buffer, summed over the batch; the input gradient's fold is a compiled loop of row adds; max
pooling is one compiled pass each way. The unfolded windows and the input gradient's
products are temporaries written into buffers each thread keeps for its next call of the same
shape (``_scratch``: for the benchmark's layer two of 6 MB each, held until a call of another
shape replaces them or the thread ends). Only C-contiguous float32/float64 numpy arrays (others
are copied to it); ``kernels.spatial_loops`` chooses this module after the layer's self-check
against the generic code, once per layer kind and dtype.
"""

from __future__ import annotations

import functools
import threading
from typing import Any

import numpy as np

Array = Any
Pair = tuple[int, int]


def convolution_forward(x: Array, W: Array, b: Array, stride: Pair) -> Array:
    """``Convolution``'s output (B, O, rows, cols) for images ``x``, weights ``W`` (O, C,
    kernel rows, kernel cols) and bias ``b`` (O,)."""
    cols = _unfold(x, W.shape[2:], stride)
    y = np.matmul(np.reshape(W, (W.shape[0], -1)), _matrices(cols))
    y += np.reshape(b, (-1, 1))
    return np.reshape(y, (x.shape[0], W.shape[0], *cols.shape[4:]))


def convolution_backward(x: Array, W: Array, dy: Array, stride: Pair
                         ) -> tuple[Array, Array, Array]:
    """``Convolution``'s ``(dW, db, dx)`` from its input ``x``, weights ``W`` and the output's
    gradient ``dy``."""
    cols = _matrices(_unfold(x, W.shape[2:], stride))
    d = np.reshape(np.ascontiguousarray(dy), (dy.shape[0], dy.shape[1], -1))
    dW = np.reshape(np.sum(np.matmul(d, np.matrix_transpose(cols)), axis=0), W.shape)
    db = np.sum(d @ np.ones(d.shape[2], d.dtype), axis=0)  # gemv: 3x numpy's sum here
    W_t = np.matrix_transpose(np.reshape(W, (W.shape[0], -1)))
    grads = np.matmul(W_t, d, out=_scratch("grads", (d.shape[0], W_t.shape[0], d.shape[2]),
                                           d.dtype))
    return dW, db, _fold(grads, tuple(x.shape), W.shape[2:], stride)


def deconvolution_forward(x: Array, W: Array, b: Array, shape: tuple[int, ...],
                          stride: Pair) -> Array:
    """``Deconvolution``'s output of ``shape`` (B, O, H, W) for images ``x`` (B, C, h, w),
    weights ``W`` (C, O, kernel rows, kernel cols) and bias ``b`` (O,): the fold of
    ``Wᵀ x`` per image."""
    rows = np.reshape(np.ascontiguousarray(x), (x.shape[0], x.shape[1], -1))
    grads = np.matmul(np.matrix_transpose(np.reshape(W, (W.shape[0], -1))), rows)
    y = _fold(grads, shape, W.shape[2:], stride)
    y += np.reshape(b, (-1, 1, 1))
    return y


def deconvolution_backward(x: Array, W: Array, dy: Array, stride: Pair
                           ) -> tuple[Array, Array, Array]:
    """``Deconvolution``'s ``(dW, db, dx)`` from its input ``x``, weights ``W`` and the
    output's gradient ``dy``: the convolution of ``dy``."""
    cols = _matrices(_unfold(dy, W.shape[2:], stride))
    rows = np.reshape(np.ascontiguousarray(x), (x.shape[0], x.shape[1], -1))
    dW = np.reshape(np.sum(np.matmul(rows, np.matrix_transpose(cols)), axis=0), W.shape)
    dx = np.matmul(np.reshape(W, (W.shape[0], -1)), cols)
    return dW, np.sum(dy, axis=(0, 2, 3)), np.reshape(dx, x.shape)


def max_pool(x: Array, kernel: Pair, stride: Pair, small: Any) -> tuple[Array, Array]:
    """Max pooling's output (B, C, rows, cols) and the position of each maximum in its
    window (row-major, first wins, NaN first), in the integer dtype ``small``."""
    x = np.ascontiguousarray(x)
    shape = (*x.shape[:2], *_counts(x.shape, kernel, stride))
    y, argmax = np.empty(shape, x.dtype), np.empty(shape, small)
    _compiled().max_pool(x, *kernel, *stride, y, argmax)
    return y, argmax


def max_pool_back(dy: Array, argmax: Array, shape: tuple[int, ...], kernel: Pair,
                  stride: Pair) -> Array:
    """Max pooling's input gradient of ``shape`` from the output's gradient ``dy`` and the
    positions ``argmax``."""
    dx = np.zeros(shape, dy.dtype)
    _compiled().max_pool_back(np.ascontiguousarray(dy), argmax, kernel[1], *stride, dx)
    return dx


def _unfold(x: Array, kernel: Pair, stride: Pair) -> Array:
    """The windows of ``x`` (B, C, H, W) as an array (B, C, kernel rows, kernel cols, rows,
    cols): this thread's scratch buffer, overwritten by the next call (every caller uses it up
    before returning)."""
    x = np.ascontiguousarray(x)
    out = _scratch("windows", (*x.shape[:2], *kernel, *_counts(x.shape, kernel, stride)),
                   x.dtype)
    _compiled().unfold(x, *stride, out)
    return out


_SCRATCH = threading.local()


def _scratch(role: str, shape: tuple[int, ...], dtype: Any) -> Array:
    """This thread's buffer of ``shape`` and ``dtype`` for the temporary ``role``, kept for the
    next call of the same shape (one per role: a new shape replaces it). The windows of the
    benchmark's layer are 6 MB, and a fresh array that size costs a page fault per 4 KiB on
    first touch: 1,477 a backward pass, 1.3 of its 3.3 ms on an Intel Xeon."""
    kept = getattr(_SCRATCH, role, None)
    if kept is None or kept.shape != shape or kept.dtype != dtype:
        kept = np.empty(shape, dtype)
        setattr(_SCRATCH, role, kept)
    return kept


def _fold(grads: Array, shape: tuple[int, ...], kernel: Pair, stride: Pair) -> Array:
    """The images of ``shape`` (B, C, H, W) summing the windows' gradient ``grads`` (B,
    C·kernel, rows·cols) where ``_unfold`` took each entry from."""
    batch, channels = shape[:2]
    six = np.reshape(grads, (batch, channels, *kernel, *_counts(shape, kernel, stride)))
    dx = np.zeros(shape, grads.dtype)
    _compiled().fold(six, *stride, dx)
    return dx


def _matrices(windows: Array) -> Array:
    """Unfolded windows (B, C, kh, kw, rows, cols) as B matrices (C·kh·kw, rows·cols)."""
    batch, channels, kh, kw, rows, cols = windows.shape
    return np.reshape(windows, (batch, channels * kh * kw, rows * cols))


def _counts(shape: tuple[int, ...], kernel: Pair, stride: Pair) -> Pair:
    """How many whole windows fit down and across images of ``shape`` (B, C, H, W)."""
    return ((shape[2] - kernel[0]) // stride[0] + 1, (shape[3] - kernel[1]) // stride[1] + 1)


@functools.cache
def _compiled() -> Any:
    """The compiled loops (numba is imported here, on first use; ``numba_cache`` refuses an
    unsafe disk cache folder before any is loaded)."""
    from . import numba_cache

    return numba_cache.load("_numba_spatial")
