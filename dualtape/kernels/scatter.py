"""Row sums by id, the fast paths of ``layers.linear_algebra.generic_row_sums`` (an embedding's
weight gradient, and that of a recurrent layer fed ids: row ``i`` is the sum of the rows of
``rows`` whose id is ``i``).

On numpy the compiled loop (``numba_scatter``) where the compiled LSTM loops run, else a sort
and ``np.add.reduceat`` (``np.add.at`` is slower: 1.1 ms against 0.15-0.18 at 1,600 ids into
57-100 rows of 80, and about even from 10,000 rows of 256 on, where zeroing the result
dominates; ``bincount`` per column loses from there, 4-5x), on torch
``index_add_``, on CuPy ``cupyx.scatter_add``; None for the generic code (array-api-strict,
``DUALTAPE_FUSED=0``).
"""

from __future__ import annotations

from typing import Any

import array_api_compat
import numpy as np

from . import _generic_only, scatter_loops

Array = Any


def row_sums(ids: Array, rows: Array, vocab: int) -> Array | None:
    """``(vocab, n)`` sums of ``rows`` ``(m, n)`` grouped by ``ids`` ``(m,)`` (int64, each in
    ``[0, vocab)``), zero rows for the ids absent, in ``rows``' dtype and place; or None
    where the backend has no fast path."""
    if _generic_only():
        return None
    if type(rows) is np.ndarray:
        loops = scatter_loops(rows, check_compiled)
        return numpy_row_sums(ids, rows, vocab) if loops is None else \
            loops.row_sums(ids, rows, vocab)
    if array_api_compat.is_torch_array(rows):
        import torch

        out = torch.zeros((vocab, rows.shape[1]), dtype=rows.dtype, device=rows.device)
        return out.index_add_(0, ids, rows)
    if array_api_compat.is_cupy_array(rows):
        import cupy
        import cupyx

        with rows.device:
            out = cupy.zeros((vocab, rows.shape[1]), dtype=rows.dtype)
            cupyx.scatter_add(out, ids, rows)
        return out
    return None


def numpy_row_sums(ids: np.ndarray, rows: np.ndarray, vocab: int) -> np.ndarray:
    """``row_sums`` on numpy: the rows sorted by id, each run of one id summed by
    ``np.add.reduceat``, the sums put in their rows."""
    out = np.zeros((vocab, rows.shape[1]), dtype=rows.dtype)
    if ids.shape[0] == 0:
        return out
    order = np.argsort(ids, kind="stable")
    ordered = ids[order]
    starts = np.flatnonzero(np.diff(ordered, prepend=-1))
    out[ordered[starts]] = np.add.reduceat(rows[order], starts, axis=0)
    return out


def check_compiled(loops: Any, like: Array) -> str | None:
    """How the compiled ``loops.row_sums`` disagrees with ``numpy_row_sums`` on rows of
    ``like``'s dtype (strided, with ids absent and repeated), beyond rounding, or None."""
    rng = np.random.default_rng(0)
    ids = rng.integers(1, 6, 40)  # rows 0 and 6 get no ids
    rows = rng.standard_normal((40, 22)).astype(like.dtype)[:, ::2]
    got, want = loops.row_sums(ids, rows, 7), numpy_row_sums(ids, rows, 7)
    bound = 40 * np.finfo(like.dtype).eps * numpy_row_sums(ids, np.abs(rows), 7)
    if got.shape != want.shape or got.dtype != want.dtype or not (
            np.abs(got - want) <= bound).all():
        return "row sums by id differ from numpy's beyond rounding"
    return None
