"""The one-row outer product compiled for the CPU behind ``numba_outer`` (imports numba).

``out[i, j] = a[i] · b[j]``: one IEEE-rounded multiply per entry, as numpy's ``einsum`` and
``multiply`` make it, so the same bits. Any strides (numba compiles a version per layout).
"""

from __future__ import annotations

from typing import Any

from numba import njit

Array = Any


@njit(cache=True, nogil=True)
def outer(a: Array, b: Array, out: Array) -> None:  # pragma: no cover - compiled
    """``out = a bᵀ`` for vectors ``a`` (m,), ``b`` (n,) into ``out`` (m, n)."""
    for i in range(out.shape[0]):
        row = a[i]
        for j in range(out.shape[1]):
            out[i, j] = row * b[j]
