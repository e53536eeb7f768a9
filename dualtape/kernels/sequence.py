"""The LSTM's sequence loops with tape buffers allocated once per call and filled in place.

For namespaces whose arrays take ``out=`` (numpy, CuPy). Each step costs one matrix product
into a preallocated buffer and one call of a *cell*: the pointwise step with explicit outputs,
plain ufuncs on numpy (``numpy_cell``), one fused kernel on CuPy (``cupy_cell``). The generic
``layers/lstm.py`` code is the reference these loops are tested against.
"""

from __future__ import annotations

from typing import Any, Protocol

Array = Any


class Cell(Protocol):
    """The pointwise LSTM step with explicit outputs, on ``(batch, ·)`` blocks.

    ``forward``: gates ``[σ(a+r) for f,i,o; tanh(a) for ĉ]`` into ``gates``, the new cell into
    ``c_next`` and the output into ``h``, from the projection ``a`` (B, 4o), the recurrent
    product ``r`` (B, 3o) and the cell ``c``.
    ``backward``: with ``dc = dc_direct + dc_rec + dh*o``, the pre-activation gradients into
    ``da`` (B, 4o) and ``dc*f`` into ``dc_direct``; ``scratch`` is (B, o) working space.
    """

    def forward(self, a: Array, r: Array, c: Array, gates: Array, c_next: Array,
                h: Array) -> None: ...

    def backward(self, gates: Array, c: Array, c_next: Array, dh: Array, dc_rec: Array,
                 dc_direct: Array, da: Array, scratch: Array) -> None: ...


def forward_sequence(
    mod: Any, cell: Cell, U: Array, c0: Array, projected: Array
) -> tuple[Array, Array, Array]:
    """``(cells, gates, hs)`` of shapes (T+1, B, o), (T, B, 4o), (T, B, o) from the input
    projections ``x Wᵀ + b`` of all steps (T, B, 4o); ``mod`` is numpy or cupy."""
    steps, batch, _ = projected.shape
    n = c0.shape[-1]
    cells = mod.empty((steps + 1, batch, n), dtype=c0.dtype)
    gates = mod.empty((steps, batch, 4 * n), dtype=c0.dtype)
    hs = mod.empty((steps, batch, n), dtype=c0.dtype)
    recurrent = mod.empty((batch, 3 * n), dtype=c0.dtype)
    cells[0] = c0
    weights = U.T
    for t in range(steps):
        mod.matmul(cells[t], weights, out=recurrent)
        cell.forward(projected[t], recurrent, cells[t], gates[t], cells[t + 1], hs[t])
    return cells, gates, hs


def backward_sequence(
    mod: Any, cell: Cell, U: Array, cells: Array, gates: Array, dhs: Array, dc_last: Array
) -> tuple[Array, Array]:
    """``(das, dc_0)``: pre-activation gradients (T, B, 4o) and the first cell's gradient."""
    steps, batch, four_n = gates.shape
    n = four_n // 4
    das = mod.empty_like(gates)
    dc_direct = mod.array(dc_last, copy=True)
    dc_rec = mod.zeros_like(dc_direct)
    scratch = mod.empty_like(dc_direct)
    for t in reversed(range(steps)):
        cell.backward(gates[t], cells[t], cells[t + 1], dhs[t], dc_rec, dc_direct, das[t], scratch)
        mod.matmul(das[t, :, : 3 * n], U, out=dc_rec)
    return das, dc_direct + dc_rec
