"""Row sums by id compiled for the CPU behind ``numba_scatter`` (imports numba)."""

from __future__ import annotations

from typing import Any

from numba import njit

Array = Any


@njit(cache=True, nogil=True)
def add_rows(ids: Array, rows: Array, out: Array) -> None:  # pragma: no cover - compiled
    """``out[ids[r]] += rows[r]`` for every row ``r`` of ``rows`` (m, n), in row order;
    ``ids`` (m,) int64, each a row of ``out`` (checked by the caller)."""
    for r in range(rows.shape[0]):
        target = out[ids[r]]
        for j in range(rows.shape[1]):
            target[j] += rows[r, j]
