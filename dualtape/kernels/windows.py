"""Sliding windows as strided views, the fast paths of ``layers.spatial.generic_windows``.

On numpy ``numpy.lib.stride_tricks.sliding_window_view`` (read-only), on CuPy
``cupy.lib.stride_tricks.as_strided`` with the same strides (``strided_windows``), on torch
``Tensor.unfold`` along both image axes: no copy,
where the generic code makes one strided slice per kernel position and stacks them (one
read of the input per position, one write of the windows). A convolution then copies the view
once, into the matrix its product takes. ``DUALTAPE_FUSED=0`` keeps the generic code.
"""

from __future__ import annotations

from typing import Any

import array_api_compat
import numpy as np

Array = Any


def window_view(x: Array, kernel: tuple[int, int], stride: tuple[int, int]) -> Array | None:
    """The windows of ``x`` (B, C, H, W) as a view (B, C, rows, cols, kernel rows, kernel
    cols) on numpy, CuPy and torch, or None for the generic code (array-api-strict, or
    ``DUALTAPE_FUSED=0``)."""
    from . import _generic_only

    if _generic_only():
        return None
    if type(x) is np.ndarray:
        view = np.lib.stride_tricks.sliding_window_view(x, kernel, axis=(2, 3))
        return view[:, :, ::stride[0], ::stride[1]]
    if array_api_compat.is_cupy_array(x):
        import cupy

        return strided_windows(cupy, x, kernel, stride)
    if array_api_compat.is_torch_array(x):
        return x.unfold(2, kernel[0], stride[0]).unfold(3, kernel[1], stride[1])
    return None


def strided_windows(module: Any, x: Array, kernel: tuple[int, int],
                    stride: tuple[int, int]) -> Array:
    """The windows of ``x`` (B, C, H, W) through ``module.lib.stride_tricks.as_strided``
    (CuPy's path; numpy's module gives the same view on the CPU, which is how it is tested
    without a GPU). Strides are in bytes, so any memory layout of ``x`` works."""
    (kh, kw), (sh, sw) = kernel, stride
    batch, channels, height, width = x.shape
    sb, sc, sy, sx = x.strides
    shape = (batch, channels, (height - kh) // sh + 1, (width - kw) // sw + 1, kh, kw)
    return module.lib.stride_tricks.as_strided(
        x, shape=shape, strides=(sb, sc, sy * sh, sx * sw, sy, sx))
