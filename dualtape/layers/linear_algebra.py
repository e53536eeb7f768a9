"""The linear algebra layers share: sums of outer products over a batch and over a sequence's
steps, column sums, and a sequence's input projection as one matrix product."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..backend import out_module
from ..kernels import outer_loops

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
    1.6x faster than broadcasting's row-by-row loop there (the same products, bit for bit)."""
    if out is None:
        return a.T * b if a.shape[0] == 1 else a.T @ b
    mod = out_module(out)
    if a.shape[0] != 1:
        return mod.matmul(a.T, b, out=out)
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


def sequence_product(xp: Any, xs: Array, M: Array) -> Array:
    """``xs_t M`` for every step of ``xs`` (T, B, i) as one matrix product: (T, B, M's
    columns)."""
    steps, batch, n_in = xs.shape
    return reshape(xp, reshape(xp, xs, (steps * batch, n_in)) @ M, (steps, batch, M.shape[-1]))


def project_sequence(xp: Any, xs: Array, W: Array, b: Array) -> Array:
    """``xs Wᵀ + b`` for every step of ``xs`` (T, B, i) as one matrix product: the input
    projection a recurrent layer makes before its time loop, (T, B, rows of W). On numpy and
    CuPy the bias is added in place (the same sums): a fresh array of the product's size costs
    more than the additions (at the main job's 1600 x 320, 230 µs against 100)."""
    projected = sequence_product(xp, xs, W.T)
    if out_module(projected) is None or projected.dtype != b.dtype:
        return projected + b
    projected += b
    return projected


def sequence_outer(xp: Any, d: Array, inputs: Array) -> Array:
    """``Σ_t d_tᵀ inputs_t`` for ``d`` (T, B, k) and ``inputs`` (T, B, j): a weight gradient
    of shape (k, j), one product over all ``T·B`` rows, after the time loop."""
    rows = d.shape[0] * d.shape[1]
    return batch_outer(reshape(xp, d, (rows, d.shape[-1])),
                       reshape(xp, inputs, (rows, inputs.shape[-1])))


def sequence_weight_grads(xp: Any, d: Array, inputs: Array) -> tuple[Array, Array]:
    """``(sequence_outer(d, inputs), Σ_t Σ_b d_t)``: a weight gradient and its bias
    gradient (k,)."""
    flat = reshape(xp, d, (d.shape[0] * d.shape[1], d.shape[-1]))
    return sequence_outer(xp, d, inputs), batch_sum(xp, flat)
