"""The pointwise LSTM step on CuPy: one fused elementwise kernel each way.

Each kernel runs over the ``(batch, o)`` cells; the four gate blocks of a ``(batch, 4o)`` row are
read and written through raw indexing, so the gates go straight into the sequence's tape buffer.
Sigmoid is in its tanh form. ``cupy.fuse`` was not used because it returns new arrays, which
would cost a copy kernel per output and step to fill the tape buffers.
"""

from __future__ import annotations

import functools
from typing import Any

Array = Any

_FORWARD = """
const int b = i / n, j = i % n;
const int row = b * 4 * n, rec = b * 3 * n;
const T f = tanh((a[row + j] + r[rec + j]) * (T)0.5) * (T)0.5 + (T)0.5;
const T in = tanh((a[row + n + j] + r[rec + n + j]) * (T)0.5) * (T)0.5 + (T)0.5;
const T o = tanh((a[row + 2 * n + j] + r[rec + 2 * n + j]) * (T)0.5) * (T)0.5 + (T)0.5;
const T g = tanh(a[row + 3 * n + j]);
gates[row + j] = f;
gates[row + n + j] = in;
gates[row + 2 * n + j] = o;
gates[row + 3 * n + j] = g;
c_next = f * c + in * g;
h = o * c_next;
"""

_BACKWARD = """
const int b = i / n, j = i % n;
const int row = b * 4 * n;
const T f = gates[row + j], in = gates[row + n + j];
const T o = gates[row + 2 * n + j], g = gates[row + 3 * n + j];
const T dc = dc_direct + dc_rec + dh * o;
da[row + j] = dc * c * f * ((T)1 - f);
da[row + n + j] = dc * g * in * ((T)1 - in);
da[row + 2 * n + j] = dh * c_next * o * ((T)1 - o);
da[row + 3 * n + j] = dc * in * ((T)1 - g * g);
dc_direct = dc * f;
"""


@functools.cache
def _kernels() -> tuple[Any, Any]:
    import cupy

    forward = cupy.ElementwiseKernel(
        "raw T a, raw T r, T c, int32 n",
        "raw T gates, T c_next, T h",
        _FORWARD,
        "dualtape_lstm_forward",
    )
    backward = cupy.ElementwiseKernel(
        "raw T gates, T c, T c_next, T dh, T dc_rec, int32 n",
        "T dc_direct, raw T da",
        _BACKWARD,
        "dualtape_lstm_backward",
    )
    return forward, backward


class CupyCell:
    """``Cell`` for CuPy arrays: one ``ElementwiseKernel`` launch per step and direction.

    The raw-indexed arguments (``a``, ``r``, ``gates``, ``da``) must be C-contiguous rows, as the
    sequence loops allocate them.
    """

    def forward(self, a: Array, r: Array, c: Array, gates: Array, c_next: Array, h: Array) -> None:
        _kernels()[0](a, r, c, c.shape[-1], gates, c_next, h)

    def backward(self, gates: Array, c: Array, c_next: Array, dh: Array, dc_rec: Array,
                 dc_direct: Array, da: Array, scratch: Array) -> None:
        _kernels()[1](gates, c, c_next, dh, dc_rec, c.shape[-1], dc_direct, da)
