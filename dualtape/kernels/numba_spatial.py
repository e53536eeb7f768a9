"""Convolution, Deconvolution and max pooling on numpy with compiled window loops (numba).

Measured on AMD EPYC (float32, one thread; bench/results/2026-12-02-conv.md), the generic
convolution spends most of its time outside the matrix products: numpy's copy of the
transposed window view into the (C·kernel, B·rows·cols) matrix, the transposes around that
matrix, and a col2im of k·k strided adds whose inner loop is one image row long; pooling
spends it in reductions over windows of four. Here each pass of a filter layer is one compiled
call that goes image by image (``_numba_spatial``): a compiled loop unfolds the image's windows
into one C-contiguous (C·kernel, rows·cols) matrix, numpy's own ``cblas_?gemm`` multiplies it
(the result already the image's (C_out, rows, cols)), the weight gradient is summed over the
images by the products themselves, and the input gradient's fold is a compiled loop of row
adds. One image's matrix (195 KB for the benchmark's layer) stays in the core's cache, where
the whole batch's (6 MB) went through memory: forwards and back 0.7x the time of that
(bench/results/2026-12-03-conv-per-image.md). Max pooling is one compiled pass each way. The
windows and the input gradient's products are written into buffers each thread keeps for its
next call of the same shape (``_scratch``). Float32/float64 numpy arrays of one dtype, copied to
C order where they are not; ``kernels.spatial_loops`` chooses this module after the layer's
self-check against the generic code, once per layer kind and dtype.
"""

from __future__ import annotations

import functools
import threading
from typing import Any

import numpy as np

from . import blas

Array = Any
Pair = tuple[int, int]


def convolution_forward(x: Array, W: Array, b: Array, stride: Pair) -> Array:
    """``Convolution``'s output (B, O, rows, cols) for images ``x``, weights ``W`` (O, C,
    kernel rows, kernel cols) and bias ``b`` (O,)."""
    x, W2, b = _operands(x, _flat(W), b)
    _expect(x.shape, (x.shape[0], W.shape[1], *x.shape[2:4]), "x")
    _expect(b.shape, W.shape[:1], "b")
    counts = _counts(x.shape, W.shape[2:], stride)
    y = np.empty((x.shape[0], W.shape[0], counts[0] * counts[1]), x.dtype)
    _compiled().convolution_forward(_gemm(x), x, W2, b, *stride,
                                    _windows(x.shape[1], W.shape[2:], counts, x.dtype), y)
    return np.reshape(y, (*y.shape[:2], *counts))


def convolution_backward(x: Array, W: Array, dy: Array, stride: Pair
                         ) -> tuple[Array, Array, Array]:
    """``Convolution``'s ``(dW, db, dx)`` from its input ``x``, weights ``W`` and the output's
    gradient ``dy``."""
    x, W2, dy = _operands(x, _flat(W), dy)
    _expect(x.shape, (x.shape[0], W.shape[1], *x.shape[2:4]), "x")
    counts = _counts(x.shape, W.shape[2:], stride)
    _expect(dy.shape, (x.shape[0], W.shape[0], *counts), "dy")
    d = np.reshape(dy, (*dy.shape[:2], counts[0] * counts[1]))
    windows = _windows(x.shape[1], W.shape[2:], counts, x.dtype)
    dW, db, dx = np.zeros(W2.shape, x.dtype), np.zeros(W.shape[0], x.dtype), np.zeros_like(x)
    # db by gemv against ones: 3x numpy's sum here
    _compiled().convolution_backward(*blas.addresses(x.dtype), x, W2, d, *stride, windows,
                                     _scratch("products", windows.shape, x.dtype),
                                     np.ones(d.shape[2], x.dtype), dW, db, dx)
    return np.reshape(dW, W.shape), db, dx


def deconvolution_forward(x: Array, W: Array, b: Array, shape: tuple[int, ...],
                          stride: Pair) -> Array:
    """``Deconvolution``'s output of ``shape`` (B, O, H, W) for images ``x`` (B, C, h, w),
    weights ``W`` (C, O, kernel rows, kernel cols) and bias ``b`` (O,): the fold of
    ``Wᵀ x`` per image."""
    x, W2, b = _operands(x, _flat(W), b)
    _expect(tuple(shape[1:2]), W.shape[1:2], "the output's channels")
    _expect(b.shape, W.shape[1:2], "b")
    _expect(x.shape, (shape[0], W.shape[0], *_counts(shape, W.shape[2:], stride)), "x")
    y = np.zeros(shape, x.dtype)
    products = _scratch("products", (*W.shape[1:], *x.shape[2:]), x.dtype)
    _compiled().deconvolution_forward(_gemm(x), _rows(x), W2, b,
                                      *stride, products, y)
    return y


def deconvolution_backward(x: Array, W: Array, dy: Array, stride: Pair
                           ) -> tuple[Array, Array, Array]:
    """``Deconvolution``'s ``(dW, db, dx)`` from its input ``x``, weights ``W`` and the
    output's gradient ``dy``: the convolution of ``dy``."""
    x, W2, dy = _operands(x, _flat(W), dy)
    _expect(dy.shape[1:2], W.shape[1:2], "dy's channels")
    _expect(x.shape, (dy.shape[0], W.shape[0], *_counts(dy.shape, W.shape[2:], stride)), "x")
    windows = _windows(W.shape[1], W.shape[2:], x.shape[2:], x.dtype)
    dW, dx = np.zeros(W2.shape, x.dtype), np.empty_like(x)
    _compiled().deconvolution_backward(_gemm(x), _rows(x), W2, dy,
                                       *stride, windows, dW,
                                       _rows(dx))
    return np.reshape(dW, W.shape), np.sum(dy, axis=(0, 2, 3)), dx


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


def _operands(x: Array, *others: Array) -> tuple[Array, ...]:
    """``x`` and ``others`` in C order (copies where they are not), all of ``x``'s dtype, else
    ``TypeError``: compiled code reads them through raw pointers."""
    if any(a.dtype != x.dtype for a in others):
        raise TypeError(f"numba_spatial: operands of one dtype, got "
                        f"{[str(a.dtype) for a in (x, *others)]}")
    return tuple(np.ascontiguousarray(a) for a in (x, *others))


def _expect(shape: tuple[int, ...], expected: tuple[int, ...], name: str) -> None:
    """``ValueError`` unless ``shape`` is ``expected`` (compiled code indexes unchecked)."""
    if tuple(shape) != tuple(expected):
        raise ValueError(f"numba_spatial: {name} must have shape {tuple(expected)}, "
                         f"got {tuple(shape)}")


def _rows(images: Array) -> Array:
    """Images (B, C, H, W) as (B, C, H·W), a view."""
    return np.reshape(images, (*images.shape[:2], images.shape[2] * images.shape[3]))


def _flat(W: Array) -> Array:
    """Filters (O, C, kernel rows, kernel cols) as a matrix (O, C·kernel)."""
    return np.reshape(W, (W.shape[0], -1))


def _gemm(x: Array) -> int:
    """The address of numpy's ``cblas_?gemm`` for ``x``'s dtype."""
    return blas.addresses(x.dtype)[0]


def _windows(channels: int, kernel: tuple[int, ...], counts: tuple[int, ...], dtype: Any
             ) -> Array:
    """This thread's buffer for one image's windows (channels, kernel rows, kernel cols,
    rows, cols)."""
    return _scratch("windows", (channels, *kernel, *counts), dtype)


_SCRATCH = threading.local()


def _scratch(role: str, shape: tuple[int, ...], dtype: Any) -> Array:
    """This thread's buffer of ``shape`` and ``dtype`` for the temporary ``role``, kept for the
    next call of the same shape (one per role: a new shape replaces it). A fresh array of a
    few hundred KB (one image's windows: 195 KB for the benchmark's layer) may be mapped anew
    by malloc and cost a page fault per 4 KiB on first touch (for the whole batch's 6 MB,
    1,477 a backward pass, 1.3 of its 3.3 ms on an Intel Xeon)."""
    kept = getattr(_SCRATCH, role, None)
    if kept is None or kept.shape != shape or kept.dtype != dtype:
        kept = np.empty(shape, dtype)
        setattr(_SCRATCH, role, kept)
    return kept


def _counts(shape: tuple[int, ...], kernel: Pair, stride: Pair) -> Pair:
    """How many whole windows fit down and across images of ``shape`` (B, C, H, W);
    ``ValueError`` where not one does."""
    counts = ((shape[2] - kernel[0]) // stride[0] + 1, (shape[3] - kernel[1]) // stride[1] + 1)
    if min(counts) < 1:
        raise ValueError(f"numba_spatial: a kernel {tuple(kernel)} does not fit images "
                         f"{tuple(shape[2:])}")
    return counts


@functools.cache
def _compiled() -> Any:
    """The compiled loops (numba is imported here, on first use; ``numba_cache`` refuses an
    unsafe disk cache folder before any is loaded)."""
    from . import numba_cache

    return numba_cache.load("_numba_spatial")
