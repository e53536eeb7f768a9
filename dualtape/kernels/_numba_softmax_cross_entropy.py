"""The two passes of ``numba_softmax_cross_entropy`` compiled for the CPU (imports numba); the
exponentials between them are numpy's SIMD ``exp``."""

from __future__ import annotations

import math
from typing import Any

from numba import njit

Array = Any


@njit(cache=True, nogil=True)
def shifted(y: Array, labels: Array, z: Array, picked: Array) -> int:  # pragma: no cover
    """``z = y − max`` row by row, and ``picked`` (m,) its entry at each row's label; ``y``,
    ``z`` (m, n), ``labels`` (m,) int64. Returns how many labels are outside ``[0, n)``
    (their rows are left unread: the caller raises)."""
    outside = 0
    for r in range(y.shape[0]):
        if labels[r] < 0 or labels[r] >= y.shape[1]:
            outside += 1
            continue
        row, out = y[r], z[r]
        top = row[0]
        for j in range(1, row.shape[0]):
            top = max(top, row[j])
        for j in range(row.shape[0]):
            out[j] = row[j] - top
        picked[r] = out[labels[r]]
    return outside


@njit(cache=True, nogil=True)
def normalised(e: Array, labels: Array, scale: Any, picked: Array) -> float:  # pragma: no cover
    """Each row of ``e`` (m, n), ``exp`` of ``shifted``'s ``z``, made ``scale · (softmax − 1
    at the label)`` in place; returns ``Σ log Σ e − picked`` over the rows (float64)."""
    total = 0.0
    for r in range(e.shape[0]):
        row = e[r]
        s = row[0]
        for j in range(1, row.shape[0]):
            s += row[j]
        factor = scale / s
        for j in range(row.shape[0]):
            row[j] *= factor
        row[labels[r]] -= scale
        total += math.log(s) - picked[r]
    return total
