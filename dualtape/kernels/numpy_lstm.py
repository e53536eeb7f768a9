"""The LSTM step on numpy with ufunc outputs: no allocation inside the time loop."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import numpy as np

from .lstm_sequence import StepwiseCell

Array = Any


class NumpyLSTM(StepwiseCell):
    """``Cell`` for numpy arrays: ``dot`` and in-place ufuncs on views made once per sequence,
    outputs passed positionally (cheaper than ``out=``), constants as 0-d arrays (half the cost
    of a Python float). Forward, 7 calls a step: σ as ``1/(1+exp(-x))`` (``exp`` may overflow to
    inf, giving σ = 0, so the loops run with that warning off), and ``f*c + i*ĉ`` as one product
    with ``[c, ĉ]``: the cell ``c_t`` waits in the output gate's slot of ``gates[t]``, beside
    ĉ, until the last step copies the cells out. Backward, 5 calls a step."""

    def scope(self) -> contextlib.AbstractContextManager:
        return np.errstate(over="ignore")

    def forward_steps(self, U_fi: Array, projected: Array, r: Array, cells: Array,
                      gates: Array) -> Callable[[int], None]:
        steps, batch, n = cells.shape[0] - 1, cells.shape[1], cells.shape[2]
        weights, last = U_fi.T, steps - 1
        minus_a = list(np.negative(projected[..., : 2 * n], out=projected[..., : 2 * n]))
        fi, c_and_g = list(gates[..., : 2 * n]), list(gates[..., 2 * n :])
        waiting = gates[..., 2 * n : 3 * n]
        c = [*waiting, cells[-1]]  # c_t for t < T waits in gates[t]; c_T goes to cells[T]
        np.copyto(waiting[0], cells[0])
        products = np.empty((batch, 2 * n), dtype=cells.dtype)
        fc, ig = products[:, :n], products[:, n:]
        dot, add, subtract, multiply = np.dot, np.add, np.subtract, np.multiply
        exp, reciprocal, one = np.exp, np.reciprocal, np.asarray(1, dtype=cells.dtype)

        def step(t: int) -> None:
            s = fi[t]
            dot(c[t], weights, r)
            subtract(minus_a[t], r, s)  # σ(x) = 1/(1 + exp(-x))
            exp(s, s)
            add(s, one, s)
            reciprocal(s, s)
            multiply(s, c_and_g[t], products)  # [f*c, i*ĉ]
            add(fc, ig, c[t + 1])
            if t == last:
                np.copyto(cells[1:-1], waiting[1:])

        return step

    def backward_steps(self, U_fi: Array, gates: Array, rec: Array, q: Array, carry: Array,
                       dfi: Array, dc: Array) -> Callable[[int], None]:
        steps, batch, n = dc.shape
        f, q_t, d, factors = list(gates[..., :n]), list(q), list(dc), list(dfi)
        d_pairs = list(dc.reshape(steps, batch, 1, n))
        factor_pairs = list(dfi.reshape(steps, batch, 2, n))
        dot, add, multiply = np.dot, np.add, np.multiply

        def step(t: int) -> None:
            d_t = d[t]
            add(carry, rec, d_t)
            add(d_t, q_t[t], d_t)
            multiply(factor_pairs[t], d_pairs[t], factor_pairs[t])
            multiply(d_t, f[t], carry)
            if t:
                dot(factors[t], U_fi, rec)

        return step
