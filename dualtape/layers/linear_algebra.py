"""The linear algebra layers share: sums of outer products over a batch and over a sequence's
steps, column sums, and a sequence's input projection as one matrix product.

A recurrent layer's sequence may also be ids ``(T, B)``, each standing for its one-hot row of
the layer's ``n_in`` features (a ``RecurrentNetwork`` whose first layer is recurrent takes
them): then the projection is a gather of the weights' columns, the same bits as the product
for finite weights (one non-zero term per entry), and the weight gradient is the gradient's
rows summed by id (``rows_by_id``), the product's non-zero terms in another order. The
sequence helpers tell ids by their dimensions.

An ``Embedding`` first may hand the layer after it its ids and weight instead of the rows it
would look up (``TableRows``; ``stack.py`` decides): the layer then projects the table once
and gathers, and its input gradient is the table's, summed by id (``TableGradient``)."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from .. import spare
from ..backend import out_module, to_numpy, zeros_like_place
from ..kernels import outer_loops
from ..kernels.overlap import matmul_later
from ..kernels.scatter import row_sums

Array = Any


def reshape(xp: Any, a: Array, shape: tuple[int, ...]) -> Array:
    """``xp.reshape(a, shape)``; on numpy the array's own method, the same view without
    ``np.reshape``'s two wrapper calls (a training call of the tiny network makes a dozen)."""
    return a.reshape(shape) if type(a) is np.ndarray else xp.reshape(a, shape)


EINSUM_MIN = 1 << 13  # elements of a one-row outer product from which numpy's einsum wins


def batch_outer(a: Array, b: Array, out: Array | None = None) -> Array:
    """``aᵀ b``, the sum over rows of outer products: a matrix product, or at one row a
    broadcast product (BLAS is about twice as slow with an inner size of 1); written into
    ``out`` when given (numpy and CuPy arrays only). A one-row numpy product of at least
    ``EINSUM_MIN`` elements goes through the compiled outer product where the compiled loops
    run (``kernels.numba_outer``: about 2x faster again), else ``einsum``, whose loop is about
    1.6x faster than broadcasting's row-by-row loop there (the same products, bit for bit).
    Inside a training call's backward pass with ``overlap_gradients`` on, a product of
    several rows into ``out`` may run on a second thread (``kernels.overlap``)."""
    if out is None:
        return a.T * b if a.shape[0] == 1 else a.T @ b
    mod = out_module(out)
    if a.shape[0] != 1:
        return out if matmul_later(a.T, b, out) else mod.matmul(a.T, b, out=out)
    if mod is np and out.size >= EINSUM_MIN:
        loops = outer_loops(out, _check_outer) if a.dtype == b.dtype == out.dtype else None
        if loops is not None and not (np.may_share_memory(out, a) or np.may_share_memory(out, b)):
            return loops.outer(a[0], b[0], out)
        return np.einsum("i,j->ij", a[0], b[0], out=out)
    return mod.multiply(a.T, b, out=out)


def _check_outer(loops: Any, like: Array) -> str | None:
    """How the compiled outer product ``loops`` disagrees with numpy's on vectors of ``like``'s
    dtype (one of them strided, the output a row slice of a larger matrix), or None."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal(14).astype(like.dtype)[::2]
    b = (rng.standard_normal(67) * np.logspace(-30, 3, 67)).astype(like.dtype)
    whole = np.zeros((9, 67), dtype=like.dtype)
    got = loops.outer(a, b, whole[1:8])
    if not np.array_equal(got, np.multiply.outer(a, b)) or whole[[0, 8]].any():
        return "a bᵀ differs from numpy's, or rows outside the output changed"
    return None


def batch_sum(xp: Any, a: Array, out: Array | None = None) -> Array:
    """The column sums of ``a`` (rows, k), written into ``out`` (k,) when given (numpy and
    CuPy arrays only). On numpy a product with a vector of ones (a ``gemv``: 3-5x faster than
    numpy's row-by-row reduction at 1600 rows, and no less exact: both add each column in the
    dtype of ``a``, BLAS in several partial sums), with or without ``out``, so reused gradient
    buffers give the same bits as fresh ones."""
    if type(a) is np.ndarray and a.ndim == 2 and a.shape[0] > 1:
        return np.matmul(np.ones(a.shape[0], dtype=a.dtype), a, out=out)
    if out is None:
        return xp.sum(a, axis=0)
    return a.sum(axis=0, out=out)


class TableRows(NamedTuple):
    """A sequence's inputs as ``ids`` ((T, B), or (T·B,) once flattened) naming rows of
    ``table`` (vocab, n): an ``Embedding``'s output left unmade for the recurrent layer after
    it."""

    ids: Array
    table: Array

    @property
    def shape(self) -> tuple[int, ...]:
        """The shape of the rows the ids name: ``ids.shape + (n,)``."""
        return (*self.ids.shape, self.table.shape[-1])


class TableGradient(NamedTuple):
    """The gradient of a ``TableRows`` input's table (vocab, n), summed by id: what a layer fed
    ``TableRows`` gives in place of its input gradient, the ``Embedding``'s weight gradient."""

    summed: Array


def sequence_product(xp: Any, xs: Array, M: Array) -> Array:
    """``xs_t M`` for every step of ``xs`` (T, B, i) as one matrix product: (T, B, M's
    columns); for ids ``xs`` (T, B), the rows of ``M`` they name (``one_hot_product``); for
    ``TableRows``, the rows of ``table M``."""
    if isinstance(xs, TableRows):
        return one_hot_product(xp, xs.ids, xs.table @ M)
    if xs.ndim == 2:
        return one_hot_product(xp, xs, M)
    steps, batch, n_in = xs.shape
    return reshape(xp, reshape(xp, xs, (steps * batch, n_in)) @ M, (steps, batch, M.shape[-1]))


def one_hot_product(xp: Any, ids: Array, M: Array) -> Array:
    """The product of the one-hot rows of ``ids`` (any shape) with ``M`` (n, k): the rows of
    ``M`` the ids name, ``ids.shape + (k,)``, gathered (on numpy from a C-ordered copy of
    ``M``, usually a transposed weight: the rows then are contiguous)."""
    if type(M) is np.ndarray:
        return np.ascontiguousarray(M).take(ids, axis=0)
    flat = reshape(xp, ids, (-1,))
    return reshape(xp, xp.take(M, flat, axis=0), (*ids.shape, M.shape[-1]))


def project_sequence(xp: Any, xs: Array, W: Array, b: Array, kept: bool = False) -> Array:
    """``xs Wᵀ + b`` for every step of ``xs`` (T, B, i) (or ids (T, B)) as one matrix
    product: the input projection a recurrent layer makes before its time loop, (T, B, rows
    of W). On numpy and CuPy the bias is added in place (the same sums): a fresh array of the
    product's size costs more than the additions (at the main job's 1600 x 320, 230 µs against
    100). At one input feature (a series, as a forecaster's) on numpy it is the outer product
    of the inputs with ``W``'s column (``batch_outer``), the same bits (one product per entry)
    where BLAS's matrix product of inner size 1 takes 5-10x as long. ``kept``: on numpy the
    result is a ``dualtape.spare`` array (a cell whose tape keeps it as its gates)."""
    if type(xs) is np.ndarray and xs.ndim == 3 and xs.dtype == W.dtype == b.dtype and (
            kept or xs.shape[-1] == 1):
        steps, batch, n_in = xs.shape
        rows = steps * batch, W.shape[0]
        projected = spare.empty(rows, xs.dtype) if kept else np.empty(rows, xs.dtype)
        if n_in == 1:
            batch_outer(reshape(xp, xs, (1, rows[0])), reshape(xp, W, (1, rows[1])), projected)
        else:
            np.matmul(reshape(xp, xs, (rows[0], n_in)), W.T, out=projected)
        projected += b
        return reshape(xp, projected, (steps, batch, rows[1]))
    projected = sequence_product(xp, xs, W.T)
    if out_module(projected) is None or projected.dtype != b.dtype:
        return projected + b
    projected += b
    return projected


def input_outer(xp: Any, d: Array, inputs: Array, width: int, out: Array | None = None
                ) -> Array:
    """``dᵀ inputs`` for ``d`` (rows, k) and ``inputs`` (rows, ``width``) (``batch_outer``,
    into ``out`` when given), or for ids ``inputs`` (rows,) the same for their one-hot rows:
    ``rows_by_id`` of ``d``, transposed to (k, ``width``); for ``TableRows`` of (rows,) ids,
    ``rows_by_id`` of ``d`` times the table."""
    if isinstance(inputs, TableRows):
        summed = rows_by_id(xp, inputs.ids, d, inputs.table.shape[0])
        return batch_outer(summed, inputs.table, out)
    if inputs.ndim == 2:
        return batch_outer(d, inputs, out)
    sums = xp.permute_dims(rows_by_id(xp, inputs, d, width), (1, 0))
    if out is not None:
        out[...] = sums
        return out
    return np.ascontiguousarray(sums) if type(sums) is np.ndarray else sums


def sequence_outer(xp: Any, d: Array, inputs: Array, width: int | None = None,
                   out: Array | None = None) -> Array:
    """``Σ_t d_tᵀ inputs_t`` for ``d`` (T, B, k) and ``inputs`` (T, B, j), or ids (T, B) of
    one-hot rows of ``width``: a weight gradient of shape (k, j), one product (or one sum by
    id) over all ``T·B`` rows, after the time loop; written into ``out`` when given
    (``input_outer``)."""
    rows = d.shape[0] * d.shape[1]
    flat = flat_rows(xp, inputs)
    return input_outer(xp, reshape(xp, d, (rows, d.shape[-1])), flat,
                       flat.shape[-1] if width is None else width, out)


def flat_rows(xp: Any, xs: Array) -> Array:
    """A sequence's inputs (T, B, i) as (T·B, i) rows; ids (T, B) as (T·B,) ids; ``TableRows``
    with their ids so."""
    rows = xs.shape[0] * xs.shape[1]
    if isinstance(xs, TableRows):
        return TableRows(reshape(xp, xs.ids, (rows,)), xs.table)
    return reshape(xp, xs, (rows, *xs.shape[2:]))


def input_gradient(xp: Any, d: Array, xs: Array, W: Array) -> Array | TableGradient | None:
    """The gradient of a sequence's inputs ``xs`` from ``d`` (T, B, k), that of ``xs Wᵀ``:
    ``d W`` (T, B, i); None for ids (they have none); for ``TableRows`` the table's,
    ``TableGradient(rows_by_id(d) W)``."""
    if isinstance(xs, TableRows):
        rows = d.shape[0] * d.shape[1]
        summed = rows_by_id(xp, reshape(xp, xs.ids, (rows,)),
                            reshape(xp, d, (rows, d.shape[-1])), xs.table.shape[0])
        return TableGradient(summed @ W)
    return None if xs.ndim == 2 else sequence_product(xp, d, W)


def sequence_weight_grads(xp: Any, d: Array, inputs: Array, width: int | None = None,
                          out: tuple[Array, Array] | None = None) -> tuple[Array, Array]:
    """``(sequence_outer(d, inputs, width), Σ_t Σ_b d_t)``: a weight gradient and its bias
    gradient (k,), written into the two arrays ``out`` when given."""
    flat = reshape(xp, d, (d.shape[0] * d.shape[1], d.shape[-1]))
    weight, bias = (None, None) if out is None else out
    return sequence_outer(xp, d, inputs, width, weight), batch_sum(xp, flat, bias)


def rows_by_id(xp: Any, ids: Array, rows: Array, vocab: int) -> Array:
    """Row ``i`` of the result ``(vocab, n)`` the sum of the rows of ``rows`` ``(m, n)`` whose
    id (``ids``, ``(m,)`` int64, each in ``[0, vocab)``) is ``i``, zero for the ids absent:
    the fast path of ``kernels.scatter`` where there is one, else ``generic_row_sums``."""
    found = row_sums(ids, rows, vocab)
    return generic_row_sums(xp, ids, rows, vocab) if found is None else found


def generic_row_sums(xp: Any, ids: Array, rows: Array, vocab: int) -> Array:
    """``rows_by_id`` in array-API calls, the reference of ``kernels.scatter``'s fast paths.
    The array API has no scatter-add: the rows are sorted by id, each run of one id summed,
    and the sums stacked with zero rows for the ids between (the run boundaries are read to
    the host)."""
    n = rows.shape[1]
    order = xp.argsort(ids, stable=True)
    ordered = to_numpy(xp.take(ids, order))
    sorted_rows = xp.take(rows, order, axis=0)
    bounds = [*np.flatnonzero(np.diff(ordered, prepend=-1)).tolist(), ordered.shape[0]]
    pieces, filled = [], 0  # filled: the rows of the result written so far
    for start, stop in zip(bounds[:-1], bounds[1:], strict=True):
        row = int(ordered[start])
        if row > filled:
            pieces.append(zeros_like_place((row - filled, n), rows))
        pieces.append(xp.sum(sorted_rows[start:stop, ...], axis=0, keepdims=True))
        filled = row + 1
    if filled < vocab:
        pieces.append(zeros_like_place((vocab - filled, n), rows))
    return xp.concat(pieces, axis=0)
