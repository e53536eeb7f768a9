"""The gradients of a stack of LSTMs (and a FullyConnected on top) compiled for the CPU behind
``numba_grads`` (imports numba).

Every product is the ``cblas_?gemm``/``cblas_?gemv`` call numpy's ``matmul`` makes for the
layer path's operands (``layers.linear_algebra``: ``batch_outer`` is ``aᵀ b``, ``gemm`` with
``a`` transposed; ``batch_sum`` a vector of ones times ``a``, ``gemv`` with ``a`` transposed;
the input gradient ``d W``), and the sums by id are ``_numba_scatter.add_rows``: the same bits.
``gemm``/``gemv`` are the routines' addresses as integers (``blas.addresses``), ``one`` is 1 in
the arrays' dtype.
"""

from __future__ import annotations

from typing import Any

from numba import njit

from ._numba_blas import call_gemm, call_gemv
from ._numba_lstm import layer_backward, layer_scratch
from ._numba_scatter import add_rows
from .blas import NO_TRANS, ROW_MAJOR, TRANS

Array = Any


@njit(cache=True, nogil=True, boundscheck=False, error_model="numpy")
def outer_into(gemm: Any, d: Array, inputs: Array, out: Array, one: Any
               ) -> None:  # pragma: no cover - compiled
    """``out = dᵀ inputs`` (``d`` (rows, k) of contiguous rows, ``inputs`` (rows, j), ``out`` k
    rows of j, contiguous): numpy's ``matmul(d.T, inputs, out=out)``."""
    rows, k = d.shape
    j = inputs.shape[1]
    call_gemm(gemm, ROW_MAJOR, TRANS, NO_TRANS, k, j, rows, one, d.ctypes.data,
              d.strides[0] // d.itemsize, inputs.ctypes.data, j, one - one, out.ctypes.data, j)


@njit(cache=True, nogil=True, boundscheck=False, error_model="numpy")
def column_sums_into(gemv: Any, d: Array, ones: Array, out: Array,
                     one: Any) -> None:  # pragma: no cover - compiled
    """``out = Σ_rows d`` (``d`` (rows, k), ``ones`` (rows,) of 1): numpy's
    ``matmul(ones, d, out=out)``."""
    rows, k = d.shape
    call_gemv(gemv, ROW_MAJOR, TRANS, rows, k, one, d.ctypes.data, k, ones.ctypes.data, 1,
              one - one, out.ctypes.data, 1)


@njit(cache=True, nogil=True, boundscheck=False, error_model="numpy")
def product_into(gemm: Any, d: Array, W: Array, out: Array,
                 one: Any) -> None:  # pragma: no cover - compiled
    """``out = d W`` (``d`` (rows, k), ``W`` (k, j), ``out`` (rows, j)): numpy's ``d @ W``."""
    rows, k = d.shape
    j = W.shape[1]
    call_gemm(gemm, ROW_MAJOR, NO_TRANS, NO_TRANS, rows, j, k, one, d.ctypes.data, k,
              W.ctypes.data, j, one - one, out.ctypes.data, j)


@njit(cache=True, nogil=True, boundscheck=False, error_model="numpy")
def by_id_into(ids: Array, d: Array, sums: Array, out: Array) -> None:  # pragma: no cover
    """``out = (Σ by id of the rows of d)ᵀ`` (``out`` (k, vocab)), summed in ``sums``
    (vocab, k): ``linear_algebra.input_outer``'s form for ids."""
    sums[...] = 0
    add_rows(ids, d, sums)
    for j in range(out.shape[0]):
        for v in range(out.shape[1]):
            out[j, v] = sums[v, j]


@njit(cache=True, nogil=True, boundscheck=False, error_model="numpy")
def stack_grads(gemm: Any, gemv: Any, Ws: Any, Us: Any, dWs: Any, dUs: Any, dbs: Any,
                xs: Array, ids: Array, by_id: bool, sums: Array, cells: Any, gates: Any,
                hs: Any, top: bool, top_W: Array, top_dW: Array, top_db: Array, dys: Array,
                blocks: Array, dh: Array, ones: Array, join_up_to: int,
                one: Any) -> None:  # pragma: no cover - compiled
    """The weight gradients of LSTMs (``Ws``, ``Us``: a tuple each; gradients into ``dWs``,
    ``dUs``, ``dbs``) from their forward tapes (``cells``, ``gates``, outputs ``hs``: tuples)
    and, with ``top``, of a FullyConnected on top (``top_W``; into ``top_dW``, ``top_db``):
    ``dys`` (rows, o) the gradient of the network's output. The first layer's inputs are
    ``ids`` (rows,) of its one-hot rows when ``by_id`` (summed in ``sums``, (vocab, 4o) at
    least), else ``xs`` (rows, i). A layer's blocks of at most ``join_up_to`` entries in all
    are joined first, as ``LSTM._sequence_grads`` joins them, and so are those of every layer
    but the first, for its input gradient. Scratch: ``blocks`` the blocks and carries of one
    layer (``_numba_lstm.layer_backward``'s layout), then its joined blocks (rows, 4o); ``dh`` each
    layer's output gradient (rows, o), ``ones`` (rows,) filled with 1 here. The order of
    ``stack.stack_backward``: the top, then each LSTM from the last: its backward loop, per
    block ``f, i | o | ĉ`` its ``W``, ``U`` and ``b`` gradients, then its input gradient.
    ``numba_grads`` runs the same pieces from Python where the weight gradients go to a
    second core."""
    steps, batch = cells[0].shape[0] - 1, cells[0].shape[1]
    rows = steps * batch
    ones[:] = one
    if top:
        top_grads(gemm, gemv, dys, hs[len(hs) - 1].reshape(rows, top_W.shape[1]), top_dW,
                  top_db, ones, one)
        down = dh[: rows * top_W.shape[1]].reshape(rows, top_W.shape[1])
        product_into(gemm, dys, top_W, down, one)
        dys = down
    for k in range(len(Ws) - 1, -1, -1):
        together = rows * 4 * Us[k].shape[1] <= join_up_to
        joined, dfi, da_o, dg = layer_chain(gemm, gemv, Us[k], gates[k], cells[k], dys,
                                            blocks, together or k > 0, one)
        inputs = hs[k - 1].reshape(rows, Ws[k].shape[1]) if k > 0 else xs
        layer_grads(gemm, gemv, joined, dfi, da_o, dg, together, k == 0 and by_id, inputs,
                    ids, sums, cells[k], dWs[k], dUs[k], dbs[k], ones, one)
        if k > 0:
            down = dh[: rows * Ws[k].shape[1]].reshape(rows, Ws[k].shape[1])
            product_into(gemm, joined, Ws[k], down, one)
            dys = down


@njit(cache=True, nogil=True, boundscheck=False, error_model="numpy")
def top_grads(gemm: Any, gemv: Any, dys: Array, h: Array, top_dW: Array, top_db: Array,
              ones: Array, one: Any) -> None:  # pragma: no cover - compiled
    """A FullyConnected's gradients on top of the stack: ``top_dW = dysᵀ h``, ``top_db`` the
    column sums of ``dys`` (rows, o)."""
    outer_into(gemm, dys, h, top_dW, one)
    column_sums_into(gemv, dys, ones, top_db, one)


@njit(cache=True, nogil=True, boundscheck=False, error_model="numpy")
def layer_chain(gemm: Any, gemv: Any, U: Array, gates: Array, cells: Array, dys: Array,
                blocks: Array, joins: bool, one: Any) -> Any:  # pragma: no cover - compiled
    """One LSTM's backward loop from its output gradient ``dys`` (rows, o) into ``blocks``
    (``layer_backward``'s layout, then with ``joins`` its blocks joined, (rows, 4o)):
    ``(joined, dfi, da_o, dĉ)``, views of ``blocks`` (``joined`` of no rows without
    ``joins``)."""
    steps, batch = cells.shape[0] - 1, cells.shape[1]
    rows, n = steps * batch, U.shape[1]
    dfi, da_o, dg = layer_backward(gemm, gemv, U, gates, cells, dys.reshape(steps, batch, n),
                                   blocks, one)
    at = layer_scratch(rows, batch, n)
    joined = blocks[at : at + (rows * 4 * n if joins else 0)].reshape(rows if joins else 0,
                                                                      4 * n)
    if joins:
        joined[:, : 2 * n] = dfi
        joined[:, 2 * n : 3 * n] = da_o
        joined[:, 3 * n :] = dg
    return joined, dfi, da_o, dg


@njit(cache=True, nogil=True, boundscheck=False, error_model="numpy")
def layer_grads(gemm: Any, gemv: Any, joined: Array, dfi: Array, da_o: Array, dg: Array,
                together: bool, by_id: bool, inputs: Array, ids: Array, sums: Array,
                cells: Array, dW: Array, dU: Array, db: Array, ones: Array,
                one: Any) -> None:  # pragma: no cover - compiled
    """One LSTM's weight gradients from ``layer_chain``'s blocks: of ``joined`` as one block
    when ``together`` (as the layer path joins small ones), else per block ``f, i | o | ĉ``;
    ``inputs`` its inputs (or, ``by_id``, ``ids`` of one-hot rows, summed in ``sums``),
    ``cells`` its cells' tape (T + 1, B, o)."""
    rows, n = da_o.shape
    began = cells.reshape(cells.shape[0] * cells.shape[1], n)[:rows]  # before each step
    if together:
        block_grads(gemm, gemv, joined, 0, n, by_id, inputs, ids, sums, began, dW, dU, db,
                    ones, one)
    else:
        block_grads(gemm, gemv, dfi, 0, n, by_id, inputs, ids, sums, began, dW, dU, db, ones,
                    one)
        block_grads(gemm, gemv, da_o, 2 * n, n, by_id, inputs, ids, sums, began, dW, dU, db,
                    ones, one)
        block_grads(gemm, gemv, dg, 3 * n, n, by_id, inputs, ids, sums, began, dW, dU, db,
                    ones, one)


@njit(cache=True, nogil=True, boundscheck=False, error_model="numpy")
def block_grads(gemm: Any, gemv: Any, d: Array, start: int, n: int, by_id: bool,
                inputs: Array, ids: Array, sums: Array, began: Array, dW: Array, dU: Array,
                db: Array, ones: Array, one: Any) -> None:  # pragma: no cover - compiled
    """The gradients from the columns ``start ..`` of an LSTM's pre-activation gradients,
    ``d`` (rows, width), as ``LSTM._sequence_grads`` takes one block: the rows of ``W``'s by
    ``inputs`` (or, ``by_id``, by the one-hot rows of ``ids``, summed in ``sums``), of
    ``U``'s by ``began`` (the cells before each step; ``U`` has no ĉ rows) and of ``b``'s."""
    width = d.shape[1]
    if by_id:
        by_id_into(ids, d, sums[: dW.shape[1] * width].reshape(dW.shape[1], width),
                   dW[start : start + width])
    else:
        outer_into(gemm, d, inputs, dW[start:], one)
    u_end = min(start + width, 3 * n)
    if u_end > start:
        outer_into(gemm, d[:, : u_end - start], began, dU[start:], one)
    column_sums_into(gemv, d, ones, db[start:], one)


@njit(cache=True, nogil=True)
def ids_within(ids: Array, n: int) -> bool:  # pragma: no cover - compiled
    """Whether every entry of ``ids`` (C order) is in ``[0, n)``."""
    for v in ids.ravel():
        if v < 0 or v >= n:
            return False
    return True
