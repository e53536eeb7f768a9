"""The compiled window loops behind ``numba_spatial`` (imports numba).

Arrays are C-contiguous; images (B, C, H, W). A filter layer's pass runs image by image in one
compiled call: one image's windows are unfolded into ``windows`` (C, kernel rows, kernel cols,
rows, cols), each kernel position's (rows, cols) image in a row of the (C·kernel, rows·cols)
matrix a product takes without a transpose, and multiplied there by ``cblas_?gemm`` (``gemm``,
``gemv``: their addresses as integers, ``blas.addresses``, called through ``_numba_blas``), so
the matrix stays in the core's cache instead of one for the whole batch going through memory.
The weight gradient is summed over the images by the products themselves (``beta`` 1, onto
zeros). These passes release the GIL, so threads run them at once (each with its own
buffers). A column stride of 1 gets a loop of its own, which LLVM vectorizes.
"""

from __future__ import annotations

from typing import Any

from numba import njit

from ._numba_blas import call_gemm, call_gemv
from .blas import NO_TRANS, ROW_MAJOR, TRANS

Array = Any


@njit(cache=True)
def unfold_image(x: Array, b: int, sh: int, sw: int, out: Array
                 ) -> None:  # pragma: no cover - compiled
    """``out[c, p, q, i, j] = x[b, c, i·sh + p, j·sw + q]``: image ``b``'s windows."""
    channels, kh, kw, rows, cols = out.shape
    for c in range(channels):
        for p in range(kh):
            for q in range(kw):
                for i in range(rows):
                    r = i * sh + p
                    if sw == 1:
                        for j in range(cols):
                            out[c, p, q, i, j] = x[b, c, r, j + q]
                    else:
                        for j in range(cols):
                            out[c, p, q, i, j] = x[b, c, r, j * sw + q]


@njit(cache=True)
def fold_image(grads: Array, b: int, sh: int, sw: int, dx: Array
               ) -> None:  # pragma: no cover - compiled
    """The adjoint of ``unfold_image``: ``dx[b, c, i·sh + p, j·sw + q] += grads[c, p, q, i,
    j]``, kernel positions in row-major order (``dx[b]`` zeros on entry)."""
    channels, kh, kw, rows, cols = grads.shape
    for c in range(channels):
        for p in range(kh):
            for q in range(kw):
                for i in range(rows):
                    r = i * sh + p
                    if sw == 1:
                        for j in range(cols):
                            dx[b, c, r, j + q] += grads[c, p, q, i, j]
                    else:
                        for j in range(cols):
                            dx[b, c, r, j * sw + q] += grads[c, p, q, i, j]


@njit(cache=True, nogil=True)
def convolution_forward(gemm: int, x: Array, W: Array, bias: Array, sh: int, sw: int,
                        windows: Array, y: Array) -> None:  # pragma: no cover - compiled
    """``y[b] = W @ windows(x[b]) + bias`` per image: ``W`` (O, C·kernel), ``y`` (B, O,
    rows·cols)."""
    n_out, k = W.shape
    n = y.shape[2]
    one, zero = W.dtype.type(1), W.dtype.type(0)
    for b in range(x.shape[0]):
        unfold_image(x, b, sh, sw, windows)
        call_gemm(gemm, ROW_MAJOR, NO_TRANS, NO_TRANS, n_out, n, k, one, W.ctypes.data, k,
                  windows.ctypes.data, n, zero, y[b].ctypes.data, n)
        for o in range(n_out):
            for j in range(n):
                y[b, o, j] += bias[o]


@njit(cache=True, nogil=True)
def convolution_backward(gemm: int, gemv: int, x: Array, W: Array, d: Array, sh: int,
                         sw: int, windows: Array, products: Array, ones: Array, dW: Array,
                         db: Array, dx: Array) -> None:  # pragma: no cover - compiled
    """Per image: ``dW += d[b] @ windows(x[b])ᵀ``, ``db += d[b] @ ones``, and the fold of
    ``Wᵀ @ d[b]`` (in ``products``) into ``dx[b]``; ``dW``, ``db`` and ``dx`` zeros on entry.
    ``d`` (B, O, rows·cols)."""
    n_out, k = W.shape
    n = d.shape[2]
    one, zero = W.dtype.type(1), W.dtype.type(0)
    for b in range(x.shape[0]):
        unfold_image(x, b, sh, sw, windows)
        call_gemm(gemm, ROW_MAJOR, NO_TRANS, TRANS, n_out, k, n, one, d[b].ctypes.data, n,
                  windows.ctypes.data, n, one, dW.ctypes.data, k)
        call_gemv(gemv, ROW_MAJOR, NO_TRANS, n_out, n, one, d[b].ctypes.data, n,
                  ones.ctypes.data, 1, one, db.ctypes.data, 1)
        call_gemm(gemm, ROW_MAJOR, TRANS, NO_TRANS, k, n, n_out, one, W.ctypes.data, k,
                  d[b].ctypes.data, n, zero, products.ctypes.data, n)
        fold_image(products, b, sh, sw, dx)


@njit(cache=True, nogil=True)
def deconvolution_forward(gemm: int, x: Array, W: Array, bias: Array, sh: int, sw: int,
                          products: Array, y: Array) -> None:  # pragma: no cover - compiled
    """Per image: the fold of ``Wᵀ @ x[b]`` (in ``products``) into ``y[b]`` (zeros on entry),
    plus ``bias``. ``x`` (B, C, h·w), ``W`` (C, O·kernel), ``y`` (B, O, H, W)."""
    channels, k = W.shape
    n = x.shape[2]
    one, zero = W.dtype.type(1), W.dtype.type(0)
    for b in range(x.shape[0]):
        call_gemm(gemm, ROW_MAJOR, TRANS, NO_TRANS, k, n, channels, one, W.ctypes.data, k,
                  x[b].ctypes.data, n, zero, products.ctypes.data, n)
        fold_image(products, b, sh, sw, y)
        for o in range(y.shape[1]):
            y[b, o] += bias[o]


@njit(cache=True, nogil=True)
def deconvolution_backward(gemm: int, x: Array, W: Array, dy: Array, sh: int, sw: int,
                           windows: Array, dW: Array, dx: Array
                           ) -> None:  # pragma: no cover - compiled
    """Per image: ``dW += x[b] @ windows(dy[b])ᵀ`` (zeros on entry) and ``dx[b] = W @
    windows(dy[b])``. ``x``, ``dx`` (B, C, h·w), ``W`` (C, O·kernel)."""
    channels, k = W.shape
    n = x.shape[2]
    one, zero = W.dtype.type(1), W.dtype.type(0)
    for b in range(x.shape[0]):
        unfold_image(dy, b, sh, sw, windows)
        call_gemm(gemm, ROW_MAJOR, NO_TRANS, TRANS, channels, k, n, one, x[b].ctypes.data, n,
                  windows.ctypes.data, n, one, dW.ctypes.data, k)
        call_gemm(gemm, ROW_MAJOR, NO_TRANS, NO_TRANS, channels, n, k, one, W.ctypes.data, k,
                  windows.ctypes.data, n, zero, dx[b].ctypes.data, n)


@njit(cache=True)
def max_pool(x: Array, kh: int, kw: int, sh: int, sw: int, y: Array, argmax: Array
             ) -> None:  # pragma: no cover - compiled
    """Each window's maximum into ``y`` and its row-major position into ``argmax`` (B, C,
    rows, cols): the first maximum wins, and the first NaN (which propagates)."""
    batch, channels, rows, cols = y.shape
    for b in range(batch):
        for c in range(channels):
            for i in range(rows):
                for j in range(cols):
                    best, at = x[b, c, i * sh, j * sw], 0
                    for p in range(kh):
                        for q in range(kw):
                            v = x[b, c, i * sh + p, j * sw + q]
                            if v > best or (v != v and best == best):
                                best, at = v, p * kw + q
                    y[b, c, i, j], argmax[b, c, i, j] = best, at


@njit(cache=True)
def max_pool_back(dy: Array, argmax: Array, kw: int, sh: int, sw: int, dx: Array
                  ) -> None:  # pragma: no cover - compiled
    """``dy`` added into ``dx`` (zeros on entry) where each window's maximum was."""
    batch, channels, rows, cols = dy.shape
    for b in range(batch):
        for c in range(channels):
            for i in range(rows):
                for j in range(cols):
                    at = argmax[b, c, i, j]
                    dx[b, c, i * sh + at // kw, j * sw + at % kw] += dy[b, c, i, j]
