"""Row sums by id compiled for the CPU: an embedding's weight gradient and that of a recurrent
layer fed ids (``linear_algebra.rows_by_id``). One pass adding each row into its id's row, in
row order: 53 µs against 0.15-0.4 ms for numpy's sort and ``np.add.reduceat``, and 728 µs for
the one-hot product the ids replace, at the main job's 1,600 rows of 320 into 57 (AMD EPYC Zen
4, ``bench/one_hot_products.py``). The sums are the same terms in another order than
``reduceat``'s (not the same bits). numpy arrays only, where the compiled LSTM loops run
(``kernels.scatter_loops`` chooses).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

Array = Any


def row_sums(ids: Array, rows: Array, vocab: int) -> Array:
    """``(vocab, n)`` sums of the rows of ``rows`` ``(m, n)`` grouped by ``ids`` ``(m,)``
    (int64), zero rows for the ids absent; ``ValueError`` for other dtypes, shapes or an id
    outside ``[0, vocab)`` (checked here: the compiled loop indexes without bounds checks)."""
    if type(ids) is not np.ndarray or type(rows) is not np.ndarray or ids.dtype != np.int64 or (
            rows.dtype not in (np.float32, np.float64)):
        raise ValueError("numba_scatter: int64 ids and float32 or float64 rows (numpy arrays), "
                         f"got {getattr(ids, 'dtype', type(ids))} and "
                         f"{getattr(rows, 'dtype', type(rows))}")
    if ids.ndim != 1 or rows.ndim != 2 or ids.shape[0] != rows.shape[0]:
        raise ValueError(f"numba_scatter: ids {ids.shape} and rows {rows.shape}")
    if ids.shape[0] and (int(ids.min()) < 0 or int(ids.max()) >= vocab):
        raise ValueError(f"numba_scatter: ids from {int(ids.min())} to {int(ids.max())} "
                         f"outside [0, {vocab})")
    out = np.zeros((vocab, rows.shape[1]), dtype=rows.dtype)
    _compiled().add_rows(ids, rows, out)
    return out


@functools.cache
def _compiled() -> Any:
    """The compiled loop (numba imported here, on first use, the disk cache folder checked
    first: ``numba_cache.load``)."""
    from . import numba_cache

    return numba_cache.load("_numba_scatter")
