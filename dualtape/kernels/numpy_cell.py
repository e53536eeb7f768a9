"""The pointwise LSTM step on numpy with ufunc ``out=``: no allocation inside the time loop."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import numpy as np

Array = Any


class NumpyCell:
    """``Cell`` for numpy arrays: in-place ufuncs on views made once per sequence (7 calls a
    step forward, 4 back). σ is ``1/(1+exp(-x))`` here, one call fewer than the tanh form;
    ``exp`` may overflow to inf (giving σ = 0), so the loops run with that warning off."""

    def scope(self) -> contextlib.AbstractContextManager:
        return np.errstate(over="ignore")

    def forward_steps(self, projected: Array, r: Array, cells: Array,
                      gates: Array) -> Callable[[int], None]:
        n = cells.shape[-1]
        minus_a, fi = list(np.negative(projected[..., : 2 * n])), list(gates[..., : 2 * n])
        f, i, g = list(gates[..., :n]), list(gates[..., n : 2 * n]), list(gates[..., 3 * n :])
        c, scratch = list(cells), r[:, :n]
        add, subtract, multiply, exp = np.add, np.subtract, np.multiply, np.exp
        reciprocal, one = np.reciprocal, np.asarray(1, dtype=cells.dtype)  # 0-d: cheap

        def step(t: int) -> None:  # outputs passed positionally: cheaper than out=
            s, c_next = fi[t], c[t + 1]
            subtract(minus_a[t], r, s)  # σ(x) = 1/(1 + exp(-x))
            exp(s, s)
            add(s, one, s)
            reciprocal(s, s)
            multiply(f[t], c[t], c_next)
            multiply(i[t], g[t], scratch)
            add(c_next, scratch, c_next)

        return step

    def backward_steps(self, gates: Array, rec: Array, q: Array, carry: Array, dfi: Array,
                       dc: Array) -> Callable[[int], None]:
        steps, batch, n = dc.shape
        f, q_t, d = list(gates[..., :n]), list(q), list(dc)
        d_pairs = list(dc.reshape(steps, batch, 1, n))
        factor_pairs = list(dfi.reshape(steps, batch, 2, n))
        add, multiply = np.add, np.multiply

        def step(t: int) -> None:
            d_t = d[t]
            add(carry, rec, d_t)
            add(d_t, q_t[t], d_t)
            multiply(factor_pairs[t], d_pairs[t], factor_pairs[t])
            multiply(d_t, f[t], carry)

        return step
