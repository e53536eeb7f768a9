"""The backward pass of a stack of LSTMs with a FullyConnected on top, into gradient buffers, in
one compiled call: ``planned_backprop``'s (``backpropagate_sequence`` on numpy with the
compiled loops) in place of the layers' backward passes one by one, which make about 400
Python-level calls on the main job (the top's products, each LSTM's loop, then its products
per block and parameter, each through its checks and dispatch).

The same bits as the layer path: the same backward loop (``_numba_lstm.backward_sequence``),
and every product the ``cblas`` call numpy's ``matmul`` makes for the layer path's operands
(``_numba_grads`` says which), the sums by id the same compiled loop. Unchecked here: the
caller (``planned_backprop``) has checked every operand once per network and input form.
numpy arrays only, where the compiled LSTM loops run (``kernels.grads_loops`` chooses).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

from . import blas
from .lstm_sequence import backward_sequence, forward_sequence
from .numba_lstm import layer_scratch
from .numpy_lstm import NumpyLSTM

Array = Any


class StackGrads(NamedTuple):
    """The operands of ``stack_grads`` kept between calls: the LSTMs' ``Ws`` and ``Us`` and
    their gradient buffers ``dWs``, ``dUs``, ``dbs`` (a tuple each, one entry per LSTM); the
    top FullyConnected's ``W`` and its buffers ``(dW, db)`` (None without one); the most
    entries of a layer's blocks joined before their products (``layers.lstm.JOIN_UP_TO``, as
    the layer path joins them)."""

    Ws: tuple[Array, ...]
    Us: tuple[Array, ...]
    dWs: tuple[Array, ...]
    dUs: tuple[Array, ...]
    dbs: tuple[Array, ...]
    top: tuple[Array, tuple[Array, Array]] | None
    join_up_to: int


Hand = Callable[..., None]
"""``stack_grads``'s ``hand``: ``hand(kernel, rows, madds, *args)`` runs ``kernel(*args)``, a
product of ``rows`` inner size and ``madds`` multiply-adds, now or on another thread."""


def scratch_sizes(sizes: list[tuple[int, int]], steps: int, batch: int, vocab: int,
                  top: bool, join_up_to: int, handing: bool = False) -> tuple[int, int, int, int]:
    """The elements of ``stack_grads``'s scratch arrays for LSTMs of ``sizes`` ``(inputs,
    cells)`` over ``steps`` x ``batch``, the first fed ids of ``vocab`` (0: not ids), with a
    layer on ``top`` or not: ``blocks`` one layer's blocks and carries, then its joined blocks
    where it joins them (``_numba_grads.stack_grads``), sized for the largest (``handing``:
    every layer's, one after another, each kept until its weight gradients, handed to another
    thread, are done); ``dh`` the output gradient handed down; ``sums`` the first layer's
    widest block summed by id; ``ones`` a 1 per row for the column sums. No more than the
    layer path's temporaries of one layer at a time (of every layer, ``handing``)."""
    rows = steps * batch
    one_layer = [layer_scratch(rows, batch, n) + (
        rows * 4 * n if k > 0 or rows * 4 * n <= join_up_to else 0)
                 for k, (_, n) in enumerate(sizes)]
    down = [i for i, _ in sizes[1:]] + ([sizes[-1][1]] if top else [])
    first = sizes[0][1]  # the first layer's widest block, summed by id: f, i or all four
    widest = 4 * first if rows * 4 * first <= join_up_to else 2 * first
    blocks = sum(one_layer) if handing else max(one_layer)
    return blocks, rows * max(down, default=1), max(vocab * widest, 1), rows


def stack_grads(operands: StackGrads, work: Sequence[Array], xs: Array,
                cells: tuple[Array, ...], gates: tuple[Array, ...], hs: tuple[Array, ...],
                dys: Array, hand: Hand | None = None) -> None:
    """The gradients of ``operands``' layers into their buffers (``work``: arrays of
    ``scratch_sizes``, ``blocks``, ``dh``, ``sums`` and ``ones`` in order, made for the call
    (their values unread: ``ones`` is filled there), so that
    nothing is held between calls beyond the buffers) from the LSTMs' forward tapes
    (``cells``, ``gates``, outputs ``hs``: one entry per LSTM) over ``xs`` ((T, B) int64 ids
    of the first layer's one-hot rows, or (T, B, i)) and the network output's gradient
    ``dys`` (T, B, o), C order: ``_numba_grads.stack_grads``. With ``hand`` (``work`` of
    ``scratch_sizes(..., handing=True)``) its pieces run from here in the same order, each
    layer's weight gradients (and the top's) given to ``hand(kernel, rows, madds, *args)``,
    which runs ``kernel(*args)`` now or on another thread (``overlap.call_later``): the same
    calls, so the same bits."""
    dtype, rows = dys.dtype, xs.shape[0] * xs.shape[1]
    d = dys.reshape(rows, dys.shape[-1])
    by_id = xs.ndim == 2
    ids, inputs = (xs.reshape(rows), d) if by_id else (  # d: not read with ids
        _NO_IDS, xs.reshape(rows, xs.shape[2]))
    top_W, (top_dW, top_db) = operands.top or (inputs, (inputs, inputs[0]))
    blocks, dh, sums, ones = work
    gemm, gemv = blas.addresses(dtype)
    if hand is None:
        _compiled().stack_grads(
            gemm, gemv, operands.Ws, operands.Us, operands.dWs, operands.dUs, operands.dbs,
            inputs, ids, by_id, sums, cells, gates, hs, operands.top is not None, top_W,
            top_dW, top_db, d, blocks, dh, ones, operands.join_up_to, dtype.type(1))
        return
    kernels, one = _compiled(), dtype.type(1)
    ones.fill(one)
    if operands.top is not None:
        h = hs[-1].reshape(rows, top_W.shape[1])
        hand(kernels.top_grads, rows, top_dW.size * rows, gemm, gemv, d, h, top_dW, top_db,
             ones, one)
        down = dh[: rows * top_W.shape[1]].reshape(rows, top_W.shape[1])
        kernels.product_into(gemm, d, top_W, down, one)
        d = down
    at, batch = 0, xs.shape[1]
    for k in range(len(operands.Ws) - 1, -1, -1):
        W, U = operands.Ws[k], operands.Us[k]
        n = U.shape[1]
        together = rows * 4 * n <= operands.join_up_to
        size = layer_scratch(rows, batch, n) + (rows * 4 * n if together or k > 0 else 0)
        joined, dfi, da_o, dg = kernels.layer_chain(gemm, gemv, U, gates[k], cells[k], d,
                                                    blocks[at : at + size], together or k > 0,
                                                    one)
        at += size
        hand(kernels.layer_grads, rows, (W.size + U.size) * rows, gemm, gemv, joined, dfi,
             da_o, dg, together, k == 0 and by_id, hs[k - 1].reshape(rows, W.shape[1]) if k
             else inputs, ids, sums, cells[k], operands.dWs[k], operands.dUs[k],
             operands.dbs[k], ones, one)
        if k > 0:
            down = dh[: rows * W.shape[1]].reshape(rows, W.shape[1])
            kernels.product_into(gemm, joined, W, down, one)
            d = down


_NO_IDS = np.empty(0, np.int64)


def ids_within(ids: Array, n: int) -> bool:
    """Whether every id of ``ids`` (int64, C order) is in ``[0, n)``: one pass."""
    return _compiled().ids_within(ids, n)


def check_compiled(loops: Any, like: Array) -> str | None:
    """How ``loops.stack_grads`` disagrees with numpy's products and sums from the ufunc
    cell's blocks beyond rounding, on two small LSTMs of ``like``'s dtype over 3 steps of 2
    rows: fed ids with a FullyConnected on top, and fed inputs without, each with the blocks
    joined and apart; or None."""
    rng = np.random.default_rng(0)
    dtype, steps, batch = like.dtype, 3, 2
    for vocab, top, join_up_to in ((5, True, 0), (0, False, 0), (5, True, 1 << 30),
                                   (0, False, 1 << 30)):
        weights = [(rng.uniform(-0.5, 0.5, (4 * n, i)).astype(dtype),
                    rng.uniform(-0.5, 0.5, (3 * n, n)).astype(dtype),
                    rng.uniform(-0.5, 0.5, 4 * n).astype(dtype)) for i, n in ((5, 4), (4, 3))]
        xs = rng.integers(0, vocab, (steps, batch)) if vocab else rng.standard_normal(
            (steps, batch, 5)).astype(dtype)
        top_W = rng.uniform(-0.5, 0.5, (2, 3)).astype(dtype)
        dys = rng.standard_normal((steps, batch, 2 if top else 3)).astype(dtype)
        h, tapes = np.eye(5, dtype=dtype)[xs] if vocab else xs, []
        for W, U, b in weights:
            zeros = np.zeros((batch, U.shape[1]), dtype)
            tapes.append(forward_sequence(np, NumpyLSTM(), U, zeros, h @ W.T + b))
            h = tapes[-1][2]
        want = _numpy_grads(weights, np.eye(5, dtype=dtype)[xs] if vocab else xs, tapes,
                            top_W if top else None, dys)
        got = [tuple(np.full_like(w, np.nan) for w in group) for group in weights]
        top_got = (np.full_like(top_W, np.nan), np.full(2, np.nan, dtype))
        Ws, Us, _ = zip(*weights, strict=True)
        dWs, dUs, dbs = zip(*got, strict=True)
        operands = StackGrads(Ws, Us, dWs, dUs, dbs, (top_W, top_got) if top else None,
                              join_up_to)
        work = [np.empty(n, dtype) for n in scratch_sizes([(5, 4), (4, 3)], steps, batch,
                                                          vocab, top, join_up_to)]
        loops.stack_grads(operands, work, xs, *zip(*tapes, strict=True), dys)
        eps = 64 * np.finfo(dtype).eps
        for a, b in zip([w for g in got + ([top_got] if top else []) for w in g],
                        [w for g in want for w in g], strict=True):
            if not (np.abs(a - b) <= eps * (1 + np.abs(b))).all():
                return (f"the compiled gradients of a stack differ from numpy's beyond "
                        f"rounding ({'ids and a top layer' if top else 'inputs, no top'}, "
                        f"blocks {'joined' if join_up_to else 'apart'})")
    return None


def _numpy_grads(weights: list[tuple[Array, Array, Array]], xs: Array,
                 tapes: list[tuple[Array, Array, Array]], top_W: Array | None,
                 dys: Array) -> list[tuple[Array, ...]]:
    """``check_compiled``'s reference: each LSTM's ``(dW, dU, db)``, then the top's
    ``(dW, db)`` when there is one."""
    steps, batch = xs.shape[:2]
    grads: list[tuple[Array, ...]] = []
    rows = steps * batch
    if top_W is not None:
        d = dys.reshape(rows, -1)
        top = (d.T @ tapes[-1][2].reshape(rows, -1), d.sum(axis=0))
        dys = (d @ top_W).reshape(steps, batch, -1)
    inputs = [xs, *(hs for _, _, hs in tapes[:-1])]
    for (W, U, _), (cells, gates, _), x in zip(weights[::-1], tapes[::-1], inputs[::-1],
                                                strict=True):
        zeros = np.zeros((batch, U.shape[1]), xs.dtype)
        blocks, _ = backward_sequence(np, NumpyLSTM(), U, cells, gates, dys, zeros, False)
        d = np.concatenate(blocks, axis=-1).reshape(rows, -1)
        grads.insert(0, (d.T @ x.reshape(rows, -1),
                         d[:, : U.shape[0]].T @ cells[:-1].reshape(rows, -1), d.sum(axis=0)))
        dys = (d @ W).reshape(steps, batch, -1)
    return grads + ([top] if top_W is not None else [])


@functools.cache
def _compiled() -> Any:
    """The compiled function (numba imported here, on first use, the disk cache folder checked
    first: ``numba_cache.load``)."""
    from . import numba_cache

    return numba_cache.load("_numba_grads")
