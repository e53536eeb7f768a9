"""The compiled window loops behind ``numba_spatial`` (imports numba).

Arrays are C-contiguous; images (B, C, H, W), unfolded windows (B, C, kernel rows, kernel
cols, rows, cols): each kernel position's (rows, cols) image in a row of one image's matrix,
the layout a per-image matrix product takes without a transpose. A column stride of 1 gets a
loop of its own, which LLVM vectorizes.
"""

from __future__ import annotations

from typing import Any

from numba import njit

Array = Any


@njit(cache=True)
def unfold(x: Array, sh: int, sw: int, out: Array) -> None:  # pragma: no cover - compiled
    """``out[b, c, p, q, i, j] = x[b, c, i·sh + p, j·sw + q]``."""
    batch, channels, kh, kw, rows, cols = out.shape
    for b in range(batch):
        for c in range(channels):
            for p in range(kh):
                for q in range(kw):
                    for i in range(rows):
                        r = i * sh + p
                        if sw == 1:
                            for j in range(cols):
                                out[b, c, p, q, i, j] = x[b, c, r, j + q]
                        else:
                            for j in range(cols):
                                out[b, c, p, q, i, j] = x[b, c, r, j * sw + q]


@njit(cache=True)
def fold(grads: Array, sh: int, sw: int, dx: Array) -> None:  # pragma: no cover - compiled
    """The adjoint of ``unfold``: ``dx[b, c, i·sh + p, j·sw + q] += grads[b, c, p, q, i, j]``,
    kernel positions in row-major order (``dx`` zeros on entry)."""
    batch, channels, kh, kw, rows, cols = grads.shape
    for b in range(batch):
        for c in range(channels):
            for p in range(kh):
                for q in range(kw):
                    for i in range(rows):
                        r = i * sh + p
                        if sw == 1:
                            for j in range(cols):
                                dx[b, c, r, j + q] += grads[b, c, p, q, i, j]
                        else:
                            for j in range(cols):
                                dx[b, c, r, j * sw + q] += grads[b, c, p, q, i, j]


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
