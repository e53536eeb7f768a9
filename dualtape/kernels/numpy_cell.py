"""The pointwise LSTM step on numpy with ufunc ``out=``: no allocation inside the time loop."""

from __future__ import annotations

from typing import Any

import numpy as np

from .sequence import sigmoid_into

Array = Any


class NumpyCell:
    """``Cell`` for numpy arrays, written with in-place ufuncs (8 calls forward, 4 back)."""

    def forward(self, a: Array, r: Array, c: Array, gates: Array, c_next: Array) -> None:
        n = c.shape[-1]
        fi = gates[:, : 2 * n]
        np.add(a[:, : 2 * n], r, out=fi)
        sigmoid_into(np, fi, fi)
        scratch = r[:, :n]
        np.multiply(fi[:, :n], c, out=c_next)
        np.multiply(fi[:, n:], gates[:, 3 * n :], out=scratch)
        c_next += scratch

    def backward(self, gates: Array, rec: Array, q: Array, carry: Array, dfi: Array,
                 dc: Array) -> None:
        n = dc.shape[-1]
        np.add(carry, rec, out=dc)
        dc += q
        batch = dc.shape[0]
        np.multiply(dfi.reshape(batch, 2, n), dc.reshape(batch, 1, n), out=dfi.reshape(batch, 2, n))
        np.multiply(dc, gates[:, :n], out=carry)
