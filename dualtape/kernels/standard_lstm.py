"""``StandardLSTM``'s time loops compiled for the CPU (numba): each direction is one call.

The same machinery as ``numba_cell`` (numpy's own ``cblas_?gemm`` from compiled code, σ and
tanh from a vectorizable ``exp``, compiled once per dtype into numba's disk cache), for the
standard cell: per step one ``h W_hhᵀ`` product and one pointwise pass each way. Chosen by
``kernels.cell_loops`` for numpy arrays where the compiled Grenade loops run, after a
self-check against the generic code once per dtype.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from . import blas
from .numba_cell import _check

Array = Any
COMPILED = ("forward_loop", "backward_loop")
"""The names of the compiled functions in ``_numba_standard``."""


def forward(W_hh: Array, projected: Array, h: Array, c: Array
            ) -> tuple[Array, Array, Array, Array]:
    """``(hs, cells, gates, tanh_cells)`` of a sequence, as the generic loop gives them, from
    ``W_hh`` (4o, o), the projections (T, B, 4o) with both biases in, and the state ``h``,
    ``c`` (B, o). A C-contiguous ``projected`` becomes ``gates`` (overwritten in place)."""
    _numpy_of_one_dtype(W_hh, projected, h, c)
    steps, batch, four_n = projected.shape
    gates = np.ascontiguousarray(projected)
    hs = np.empty((steps + 1, batch, four_n // 4), dtype=gates.dtype)
    cells, tanh_cells = np.empty_like(hs), np.empty_like(hs[1:])
    hs[0], cells[0] = h, c
    W_t = np.ascontiguousarray(W_hh.T)
    _check(gates, hs, cells, tanh_cells, W_t)
    _compiled().forward_loop(blas.gemm(gates.dtype), W_t, hs, cells, gates, tanh_cells,
                             gates.dtype.type(1))
    return hs, cells, gates, tanh_cells


def backward(W_hh: Array, gates: Array, cells: Array, tanh_cells: Array, dhs: Array,
             dh: Array, dc: Array, need_first: bool) -> tuple[Array, Array, Array]:
    """``(das, dh_0, dc_0)``, as the generic loop back gives them (``dh_0`` meaningless
    unless ``need_first``); ``dh``, ``dc`` (B, o) are the last state's gradient."""
    _numpy_of_one_dtype(W_hh, gates, cells, tanh_cells, dhs, dh, dc)
    dh, dc = np.array(dh, order="C", copy=True), np.array(dc, order="C", copy=True)
    dhs, W = np.ascontiguousarray(dhs), np.ascontiguousarray(W_hh)
    das = np.empty_like(gates)
    _check(gates, cells, tanh_cells, dhs, dh, dc, das, W)
    _compiled().backward_loop(blas.gemm(gates.dtype), W, gates, cells, tanh_cells, dhs, dh, dc,
                              das, need_first, gates.dtype.type(1))
    return das, dh, dc


def _numpy_of_one_dtype(*operands: Array) -> None:
    """``ValueError`` unless every operand is a numpy array of the first one's dtype (any
    layout: the loops copy what is not C-contiguous)."""
    for a in operands:
        if type(a) is not np.ndarray or a.dtype != operands[0].dtype:
            raise ValueError(f"standard_lstm: operands must be numpy arrays of one dtype, got "
                             f"{[getattr(x, 'dtype', type(x).__name__) for x in operands]}")


@functools.cache
def _compiled() -> Any:
    from . import _numba_standard

    return _numba_standard
