"""The one-row outer product ``a bᵀ`` compiled for the CPU: a weight gradient at one time step
and one sequence (``linear_algebra.batch_outer``). It streams into its output at memory speed,
where numpy's ``einsum`` loop takes about twice as long at the seed network's 1536 x 512
(0.20 against 0.40 ms on an Intel Xeon); the same bits (``_numba_outer`` says why; the
self-check and ``tests/test_outer_compiled.py`` compare them). numpy arrays only, where the
compiled LSTM loops run (``kernels.outer_loops`` chooses).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

Array = Any


def outer(a: Array, b: Array, out: Array) -> Array:
    """``a bᵀ`` of vectors ``a`` (m,) and ``b`` (n,) written into ``out`` (m, n), returned;
    ``ValueError`` unless all three are float32 or float64 numpy arrays of one dtype and
    these shapes, ``out`` sharing no memory with ``a`` or ``b``."""
    if type(a) is not np.ndarray or type(b) is not np.ndarray or type(out) is not np.ndarray or (
            a.dtype != out.dtype or b.dtype != out.dtype
            or out.dtype not in (np.float32, np.float64)):
        raise ValueError("numba_outer: float32 or float64 numpy arrays of one dtype only, got "
                         f"{', '.join(str(getattr(x, 'dtype', type(x))) for x in (a, b, out))}")
    if a.ndim != 1 or b.ndim != 1 or out.shape != (a.shape[0], b.shape[0]):
        raise ValueError(f"numba_outer: shapes {a.shape} and {b.shape} into {out.shape}")
    if np.may_share_memory(out, a) or np.may_share_memory(out, b):
        raise ValueError("numba_outer: out shares memory with an operand")
    _compiled().outer(a, b, out)
    return out


@functools.cache
def _compiled() -> Any:
    """The compiled function (numba imported here, on first use, the disk cache folder checked
    first: ``numba_cache.load``)."""
    from . import numba_cache

    return numba_cache.load("_numba_outer")
