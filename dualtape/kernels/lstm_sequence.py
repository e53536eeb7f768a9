"""The LSTM's sequence loops, keeping only the recurrence inside the time loop.

For array modules whose functions take ``out=`` (numpy, CuPy). Work that does not depend on the
previous cell runs once over all ``T`` steps: ĉ = tanh(projection) before the forward loop, the
output gate and ``h = o*c'`` after it (one matrix product with ``U_o`` for all steps); before the
backward loop the output-gate gradients, their share of each cell gradient (one product with
``U_o``), ``dh*o`` and the factors ``c*f(1-f)`` and ``ĉ*i(1-i)``; after it the ĉ gradients. Each
step then costs one matrix product with ``U_fi`` (the f and i rows of ``U``) and the pointwise
update, both done by a *cell*: one compiled call per direction on numpy with numba
(``numba_lstm``), else in-place ufuncs (``numpy_lstm``); one CUDA kernel per step on CuPy
(``cupy_lstm``). The generic ``layers/lstm.py`` code is the reference these loops are
tested against.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from .. import spare

Array = Any


class Cell(Protocol):
    """The LSTM's sequence loops for one kind of array: ``forward_sequence`` and
    ``backward_sequence`` do this module's functions of those names (their contracts) for
    numpy or CuPy arrays of module ``mod``. ``StepwiseCell`` builds both from a time loop per
    direction and passes around it; ``NumbaLSTM`` makes each one compiled call."""

    def forward_sequence(self, mod: Any, U: Array, c0: Array, projected: Array
                         ) -> tuple[Array, Array, Array]: ...

    def backward_sequence(self, mod: Any, U: Array, cells: Array, gates: Array, dhs: Array,
                          dc_last: Array, need_dc0: bool
                          ) -> tuple[tuple[Array, Array, Array], Array | None]: ...


class UfuncPasses:
    """The work around the loops as whole-sequence ufunc passes of array module ``mod``
    (numpy, CuPy); a compiled cell does each in one pass instead."""

    def output_gate(self, mod: Any, gates: Array, projected: Array, cells: Array) -> Array:
        """``o = σ(o + projected_o)`` in place in ``gates``' o block, which holds ``c_t U_oᵀ``;
        returns ``h = o*c_{t+1}`` (T, B, o)."""
        steps, batch, four_n = gates.shape
        n, rows = four_n // 4, steps * batch
        o = gates.reshape(rows, four_n)[:, 2 * n : 3 * n]  # a view: gates is C-contiguous
        o += projected.reshape(rows, four_n)[:, 2 * n : 3 * n]
        sigmoid_into(mod, o, o)
        return mod.multiply(o.reshape(steps, batch, n), cells[1:])

    def gate_factors(self, mod: Any, gates: Array, cells: Array, dhs: Array
                     ) -> tuple[Array, Array, Array]:
        """``(q, da_o, dfi)``: ``q = dh*o`` and ``da_o = q*c_{t+1}*(1-o)`` (T, B, o), and the
        factors ``dfi = [c_t*f(1-f), ĉ*i(1-i)]`` (T, B, 2o), each a new C-contiguous array."""
        n = gates.shape[-1] // 4
        fi, o, g = gates[..., : 2 * n], gates[..., 2 * n : 3 * n], gates[..., 3 * n :]
        one = mod.asarray(1, dtype=gates.dtype)  # 0-d: cheaper than a Python float on numpy
        q = mod.multiply(dhs, o)
        da_o = mod.subtract(one, o)  # no temporary: at batch 1 a fresh one costs page faults
        da_o *= q
        da_o *= cells[1:]
        dfi = mod.subtract(one, fi)
        dfi *= fi
        dfi[..., :n] *= cells[:-1]
        dfi[..., n:] *= g
        return q, da_o, dfi

    def candidate_gradient(self, mod: Any, gates: Array, dc: Array, out: Array) -> Array:
        """``da_ĉ = (1-ĉ²)*i*dc`` into ``out`` (T, B, o)."""
        n = gates.shape[-1] // 4
        i, g = gates[..., n : 2 * n], gates[..., 3 * n :]
        mod.multiply(g, g, out=out)
        mod.subtract(mod.asarray(1, dtype=gates.dtype), out, out=out)
        out *= i
        out *= dc
        return out


class StepwiseCell(UfuncPasses):
    """A ``Cell`` whose loops call one step at a time from Python: subclasses give
    ``forward_steps``/``backward_steps``, which bind the buffers once per sequence (where the
    per-step views are made) and return ``step(t)``, and ``scope()``, the context the loop
    runs in (numpy: overflow to inf is expected)."""

    def scope(self) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()

    def forward_steps(self, U_fi: Array, projected: Array, r: Array, cells: Array,
                      gates: Array) -> Callable[[int], None]:
        raise NotImplementedError

    def backward_steps(self, U_fi: Array, gates: Array, rec: Array, q: Array, carry: Array,
                       dfi: Array, dc: Array) -> Callable[[int], None]:
        raise NotImplementedError

    def forward_loop(self, U_fi: Array, projected: Array, r: Array, cells: Array,
                     gates: Array) -> None:
        """t = 0 … T-1: the recurrent product ``r = c_t U_fiᵀ`` (B, 2o), then ``f, i =
        σ(projected[t, :, :2o] + r)`` into ``gates[t, :, :2o]`` and ``c_{t+1} = f*c_t + i*ĉ``,
        with ĉ already in ``gates[t, :, 3o:]``; ``cells`` (T+1, B, o) holds ``c_0`` before the
        loop and every cell after it; ``r`` is scratch, and so are ``projected``'s f and i
        blocks (nothing reads them after the loop)."""
        step = self.forward_steps(U_fi, projected, r, cells, gates)
        with self.scope():
            for t in range(cells.shape[0] - 1):
                step(t)

    def backward_loop(self, U_fi: Array, gates: Array, rec: Array, q: Array, carry: Array,
                      dfi: Array, dc: Array) -> None:
        """t = T-1 … 0: ``d = carry + rec + q[t]`` into ``dc[t]``, the factors ``dfi[t] =
        [c*f(1-f), ĉ*i(1-i)]`` (B, 2o) multiplied by ``d`` in place, ``carry = d*f``, then, for
        t > 0, ``rec = dfi[t] U_fi`` (B, o) for the step before (``backward_sequence`` does
        that of t = 0, when the first cell's gradient is wanted)."""
        step = self.backward_steps(U_fi, gates, rec, q, carry, dfi, dc)
        with self.scope():
            for t in reversed(range(dc.shape[0])):
                step(t)

    def forward_sequence(self, mod: Any, U: Array, c0: Array, projected: Array
                         ) -> tuple[Array, Array, Array]:
        """The module's ``forward_sequence`` from ``forward_loop`` and the passes around it."""
        steps, batch, four_n = projected.shape
        n = four_n // 4
        cells, gates, recurrent = forward_buffers(mod, c0, projected)
        self.forward_loop(U[: 2 * n], projected, recurrent, cells, gates)
        rows = steps * batch
        o = gates.reshape(rows, four_n)[:, 2 * n : 3 * n]  # a view: gates is C-contiguous
        mod.matmul(cells[:-1].reshape(rows, n), U[2 * n : 3 * n].T, out=o)
        return cells, gates, self.output_gate(mod, gates, projected, cells)

    def backward_sequence(
        self, mod: Any, U: Array, cells: Array, gates: Array, dhs: Array, dc_last: Array,
        need_dc0: bool = True,
    ) -> tuple[tuple[Array, Array, Array], Array | None]:
        """The module's ``backward_sequence`` from ``backward_loop`` and the passes around
        it."""
        steps, batch, four_n = gates.shape
        n, dtype = four_n // 4, gates.dtype
        q, da_o, dfi = self.gate_factors(mod, gates, cells, dhs)
        dc = mod.empty((steps, batch, n), dtype=dtype)
        first = 0 if need_dc0 or steps > 1 else 1  # the first step of the U_o product
        if steps > first:
            flat = ((steps - first) * batch, n)
            carried = mod.matmul(da_o[first:].reshape(flat), U[2 * n : 3 * n],
                                 out=dc[first:].reshape(flat)).reshape(steps - first, batch, n)
            q[:-1] += carried[1 - first :]
            carried_0 = mod.array(carried[0], copy=True) if need_dc0 else None
        carry = mod.empty((batch, n), dtype=dtype)  # C order, whatever the layout of dc_last
        carry[...] = dc_last
        rec = mod.zeros_like(carry)
        self.backward_loop(U[: 2 * n], gates, rec, q, carry, dfi, dc)
        da_g = self.candidate_gradient(mod, gates, dc, q)  # q is free again
        if not need_dc0:
            return (dfi, da_o, da_g), None
        mod.matmul(dfi[0], U[: 2 * n], out=rec)
        carry += rec
        carry += carried_0
        return (dfi, da_o, da_g), carry


def forward_buffers(mod: Any, c0: Array, projected: Array) -> tuple[Array, Array, Array]:
    """``(cells, gates, r)`` for a forward sequence from the projections ``projected`` (T, B,
    4o): ``cells`` (T+1, B, o) holding ``c_0``, ``gates`` (T, B, 4o) holding ĉ (the tanh of
    the candidates' projections) and the scratch ``r`` (B, 2o) of the recurrent product, in
    ``c0``'s dtype; on numpy the first two ``spare`` arrays."""
    steps, batch, four_n = projected.shape
    n = four_n // 4
    empty = spare.empty if mod is np else mod.empty
    cells = empty((steps + 1, batch, n), c0.dtype)
    gates = empty((steps, batch, four_n), c0.dtype)
    mod.tanh(projected[..., 3 * n :], out=gates[..., 3 * n :])
    cells[0] = c0
    return cells, gates, mod.empty((batch, 2 * n), dtype=c0.dtype)


def sigmoid_into(mod: Any, x: Array, out: Array) -> Array:
    """``out = σ(x)`` in its tanh form, in place (``x`` may be ``out``)."""
    mod.multiply(x, 0.5, out=out)
    mod.tanh(out, out=out)
    out *= 0.5
    out += 0.5
    return out


def forward_sequence(
    mod: Any, cell: Cell, U: Array, c0: Array, projected: Array
) -> tuple[Array, Array, Array]:
    """``(cells, gates, hs)`` of shapes (T+1, B, o), (T, B, 4o), (T, B, o) from the input
    projections ``x Wᵀ + b`` of all steps (T, B, 4o, C-contiguous, used up: a cell may
    overwrite its f and i blocks); ``mod`` is numpy or cupy. Large arrays are allocated only
    for the tape and ``hs``: at batch 256 fresh pages cost more than the arithmetic."""
    return cell.forward_sequence(mod, U, c0, projected)


def backward_sequence(
    mod: Any, cell: Cell, U: Array, cells: Array, gates: Array, dhs: Array, dc_last: Array,
    need_dc0: bool = True,
) -> tuple[tuple[Array, Array, Array], Array | None]:
    """``((d_fi, d_o, d_ĉ), dc_0)``: the pre-activation gradients as three blocks, (T, B, 2o),
    (T, B, o) and (T, B, o) (the columns f, i | o | ĉ of the generic code's (T, B, 4o)), and the
    first cell's gradient, None unless ``need_dc0`` (then its product with ``U_fi`` is
    skipped, and at T = 1 the one with ``U_o`` too, which halves the reads of ``U`` there; at
    T > 1 the ``U_o`` product still spans every step, so the weight gradients do not depend on
    ``need_dc0``: BLAS may round a row differently in a product of fewer rows). Besides the
    blocks only ``q`` and ``dc`` (T, B, o) are allocated (and the ufunc passes' temporaries)."""
    return cell.backward_sequence(mod, U, cells, gates, dhs, dc_last, need_dc0)
