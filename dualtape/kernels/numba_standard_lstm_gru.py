"""``StandardLSTM``'s and ``GRU``'s time loops compiled for the CPU (numba): each direction
is one call.

The same machinery as ``numba_lstm`` (numpy's own ``cblas_?gemm`` from compiled code, σ and
tanh from a vectorizable ``exp``, compiled once per dtype into numba's disk cache), for the
two standard cells: per step one ``h W_hhᵀ`` product and one pointwise pass each way.
``STANDARD_LSTM`` and ``GRU`` have the ``forward`` / ``backward`` of the generic loops in
``layers/standard_lstm.py`` and ``layers/gru.py``; ``kernels.cell_loops`` chooses them for
numpy arrays where the compiled Grenade loops run, after the layer's self-check once per
dtype.
"""

from __future__ import annotations

import functools
import time
from types import SimpleNamespace
from typing import Any

import numpy as np

from .. import spare
from . import blas
from .numba_lstm import _check

Array = Any
COMPILED = ("standard_lstm_forward_loop", "standard_lstm_backward_loop", "gru_forward_loop",
            "gru_backward_loop")
"""The names of the compiled functions in ``_numba_standard_lstm_gru``."""


def standard_lstm_forward(W_hh: Array, projected: Array, h: Array, c: Array
                          ) -> tuple[Array, Array, Array, Array]:
    """``(hs, cells, gates, tanh_cells)`` of a sequence, as the generic loop gives them, from
    ``W_hh`` (4o, o), the projections (T, B, 4o) with both biases in, and the state ``h``,
    ``c`` (B, o). A C-contiguous ``projected`` becomes ``gates`` (overwritten in place)."""
    _numpy_of_one_dtype(W_hh, projected, h, c)
    gates = np.ascontiguousarray(projected)
    hs, W_t = _outputs(gates, h), np.ascontiguousarray(W_hh.T)
    cells = spare.empty(hs.shape, hs.dtype)
    tanh_cells = spare.empty((gates.shape[0], *hs.shape[1:]), hs.dtype)
    cells[0] = c
    _check(gates, hs, cells, tanh_cells, W_t)
    _compiled().standard_lstm_forward_loop(blas.addresses(gates.dtype)[0], W_t, hs, cells, gates,
                                           tanh_cells, gates.dtype.type(1))
    return hs, cells, gates, tanh_cells


def standard_lstm_backward(W_hh: Array, gates: Array, cells: Array, tanh_cells: Array,
                           dhs: Array, dh: Array, dc: Array, need_first: bool
                           ) -> tuple[Array, Array, Array]:
    """``(das, dh_0, dc_0)``, as the generic loop back gives them (``dh_0`` meaningless
    unless ``need_first``); ``dh``, ``dc`` (B, o) are the last state's gradient."""
    _numpy_of_one_dtype(W_hh, gates, cells, tanh_cells, dhs, dh, dc)
    dh, dc = np.array(dh, order="C", copy=True), np.array(dc, order="C", copy=True)
    dhs, W = np.ascontiguousarray(dhs), np.ascontiguousarray(W_hh)
    das = spare.empty(gates.shape, gates.dtype)
    _check(gates, cells, tanh_cells, dhs, dh, dc, das, W)
    _compiled().standard_lstm_backward_loop(blas.addresses(gates.dtype)[0], W, gates, cells,
                                            tanh_cells, dhs, dh, dc, das, need_first,
                                            gates.dtype.type(1))
    return das, dh, dc


def gru_forward(W_hh: Array, b_hh: Array, projected: Array, h: Array
                ) -> tuple[Array, Array, Array]:
    """``(hs, gates, hn)``, as the generic loop gives them, from ``W_hh`` (3o, o), ``b_hh``
    (3o,), the input projections (T, B, 3o) with ``b_ih`` in (a C-contiguous one becomes
    ``gates``) and the state ``h`` (B, o)."""
    _numpy_of_one_dtype(W_hh, b_hh, projected, h)
    gates = np.ascontiguousarray(projected)
    hs, W_t, bias = _outputs(gates, h), np.ascontiguousarray(W_hh.T), np.ascontiguousarray(b_hh)
    hn, r = spare.empty((gates.shape[0], *hs.shape[1:]), hs.dtype), np.empty_like(gates[0])
    _check(gates, hs, hn, r, W_t, bias)
    _compiled().gru_forward_loop(blas.addresses(gates.dtype)[0], W_t, bias, hs, gates, r, hn,
                                 gates.dtype.type(1))
    return hs, gates, hn


def gru_backward(W_hh: Array, gates: Array, hn: Array, hs: Array, dhs: Array, dh: Array,
                 need_first: bool) -> tuple[Array, Array, Array]:
    """``(da_h, dn, dh_0)``, as the generic loop back gives them (``dh_0`` meaningless
    unless ``need_first``), from the last state's gradient ``dh`` (B, o)."""
    _numpy_of_one_dtype(W_hh, gates, hn, hs, dhs, dh)
    carry, rec = np.array(dh, order="C", copy=True), np.zeros(dh.shape, dtype=dh.dtype)
    dhs, W = np.ascontiguousarray(dhs), np.ascontiguousarray(W_hh)
    da_h, dn = spare.empty(gates.shape, gates.dtype), spare.empty(hn.shape, hn.dtype)
    _check(gates, hn, hs, dhs, carry, rec, da_h, dn, W)
    _compiled().gru_backward_loop(blas.addresses(gates.dtype)[0], W, gates, hn, hs, dhs, carry, rec,
                                  da_h, dn, need_first, gates.dtype.type(1))
    return da_h, dn, carry + rec


def _outputs(gates: Array, h: Array) -> Array:
    """The outputs' buffer (T+1, B, o) of a sequence whose gates are ``gates``, ``h`` first."""
    steps, batch, _ = gates.shape
    hs = spare.empty((steps + 1, batch, h.shape[-1]), gates.dtype)
    hs[0] = h
    return hs


def _numpy_of_one_dtype(*operands: Array) -> None:
    """``ValueError`` unless every operand is a numpy array of the first one's dtype (any
    layout: the loops copy what is not C-contiguous)."""
    for a in operands:
        if type(a) is not np.ndarray or a.dtype != operands[0].dtype:
            dtypes = [getattr(x, 'dtype', type(x).__name__) for x in operands]
            raise ValueError("numba_standard_lstm_gru: operands must be numpy arrays of one "
                             f"dtype, got {dtypes}")


def warm_up(dtype: Any) -> float:
    """Compile (or load from the cache) every loop for ``dtype`` by running a one-step
    sequence of each cell forwards and back, compiled afresh if the disk cache is damaged
    (``numba_cache.checked``); the seconds it took."""
    from . import numba_cache

    def one_step() -> None:
        for gates in (4, 3):
            W, h = np.zeros((gates, 1), dtype), np.zeros((1, 1), dtype)
            projected, dhs = np.zeros((1, 1, gates), dtype), np.zeros((1, 1, 1), dtype)
            if gates == 4:
                hs, cells, lstm_gates, tanh_cells = standard_lstm_forward(W, projected, h, h)
                standard_lstm_backward(W, lstm_gates, cells, tanh_cells, dhs, h, h, True)
            else:
                hs, gru_gates, hn = gru_forward(W, np.zeros(3, dtype), projected, h)
                gru_backward(W, gru_gates, hn, hs, dhs, h, True)

    began, dtype = time.perf_counter(), np.dtype(dtype)
    numba_cache.checked("_numba_standard_lstm_gru", one_step)
    return time.perf_counter() - began


@functools.cache
def _compiled() -> Any:
    from . import numba_cache

    return numba_cache.load("_numba_standard_lstm_gru")


STANDARD_LSTM = SimpleNamespace(forward=standard_lstm_forward, backward=standard_lstm_backward)
GRU = SimpleNamespace(forward=gru_forward, backward=gru_backward)
LOOPS = {"StandardLSTM": STANDARD_LSTM, "GRU": GRU}
"""The loops of each cell, by the name ``kernels.cell_loops`` takes."""
