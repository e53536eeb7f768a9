"""The pointwise LSTM step on numpy with ufunc ``out=``: no allocation inside the time loop."""

from __future__ import annotations

from typing import Any

import numpy as np

Array = Any


def _blocks(a: Array, n: int) -> list[Array]:
    return [a[:, k * n : (k + 1) * n] for k in range(a.shape[-1] // n)]


class NumpyCell:
    """``Cell`` for numpy arrays, written with in-place ufuncs."""

    def forward(self, a: Array, r: Array, c: Array, gates: Array, c_next: Array, h: Array) -> None:
        n = c.shape[-1]
        sig = gates[:, : 3 * n]
        np.add(a[:, : 3 * n], r, out=sig)
        sig *= 0.5
        np.tanh(sig, out=sig)
        sig *= 0.5
        sig += 0.5
        f, i, o, g = _blocks(gates, n)
        np.tanh(a[:, 3 * n :], out=g)
        np.multiply(f, c, out=c_next)
        np.multiply(i, g, out=h)
        c_next += h
        np.multiply(o, c_next, out=h)

    def backward(self, gates: Array, c: Array, c_next: Array, dh: Array, dc_rec: Array,
                 dc_direct: Array, da: Array, scratch: Array) -> None:
        n = c.shape[-1]
        f, i, o, g = _blocks(gates, n)
        da_f, da_i, da_o, da_g = _blocks(da, n)
        dc = scratch
        np.multiply(dh, o, out=dc)
        dc += dc_direct
        dc += dc_rec
        for out, gate, factor, grad in ((da_f, f, c, dc), (da_i, i, g, dc), (da_o, o, c_next, dh)):
            np.subtract(1.0, gate, out=out)
            out *= gate
            out *= factor
            out *= grad
        np.multiply(g, g, out=da_g)
        np.subtract(1.0, da_g, out=da_g)
        da_g *= i
        da_g *= dc
        np.multiply(dc, f, out=dc_direct)
