"""Pooling: the maximum of each window of each channel."""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import numpy as np

from ..backend import device_context_of, zeros_like_place
from ..kernels import spatial_loops
from .base import Array, Layer
from .gated import disagreement
from .spatial import (
    IMAGE,
    Pair,
    Setting,
    check_example,
    check_pair,
    fold,
    windowed_shape,
    windows,
)


class PoolingTape(NamedTuple):
    """``empty``, an empty array of the input's dtype where it lived (``dy`` is checked
    against it); ``argmax`` (B, C, rows, cols), where in its window (row-major, ``p·cols +
    q``) each output was found, in the smallest integer dtype that holds the kernel's
    positions (int8 up to 127 of them), not the input; and the input's ``shape``."""

    empty: Array
    argmax: Array
    shape: tuple[int, ...]


class Pooling(Layer):
    """Max pooling, Grenade's ``Pooling``: the maximum of each ``kernel`` (rows, cols) window,
    moved by ``stride`` (rows, cols, default the kernel: windows that do not overlap), over
    each channel of images (batch, channels, height, width); ``(height - rows) //
    stride_rows + 1`` rows of output, and likewise columns, as torch's ``max_pool2d``.

    The gradient goes to the element each maximum came from; among equal elements of a
    window the first in row-major order wins, as in torch. NaN propagates: a window holding
    one gives NaN (and its gradient goes to the first NaN; torch's CPU kernel sends it to the
    last). The tape keeps only those positions (``PoolingTape.argmax``), not the input.
    On numpy with numba each way is one compiled pass (``kernels.numba_spatial``).
    """

    kind = "Pooling"
    kernel = Setting(check_pair)
    stride = Setting(check_pair)
    spatial = True
    keeps_input = False

    def __init__(self, kernel: Any, stride: Any = None) -> None:
        super().__init__()
        self.kernel = kernel
        self.stride = self.kernel if stride is None else stride

    def config(self) -> dict[str, Any]:
        return {"kernel": self.kernel, "stride": self.stride}

    @classmethod
    def from_config(cls, config: dict[str, Any], dtype: str) -> Layer:
        return cls(**config)

    @property
    def input_shape(self) -> tuple:
        return IMAGE

    def output_shape(self, shape: tuple | None) -> tuple:
        shape = shape or IMAGE
        return windowed_shape(shape, shape[0], self.kernel, self.stride)

    def _forward(self, xp: Any, x: Array) -> tuple[PoolingTape, Array]:
        check_example(self, x)
        positions = self.kernel[0] * self.kernel[1]
        small = xp.int8 if positions <= 127 else xp.int16 if positions <= 32767 else xp.int32
        fast = spatial_loops(self.kind, x, fast_disagreement)
        y, argmax = generic_pool(xp, x, self.kernel, self.stride, small) if fast is None else \
            fast.max_pool(x, self.kernel, self.stride, small)
        empty = zeros_like_place((0,), x)
        return PoolingTape(empty, argmax, tuple(x.shape)), y

    def _backward(self, xp: Any, tape: PoolingTape, dy: Array) -> tuple[dict[str, Array], Array]:
        fast = spatial_loops(self.kind, dy, fast_disagreement)
        if fast is None:
            return {}, generic_pool_back(xp, dy, tape.argmax, tape.shape, self.kernel,
                                         self.stride)
        return {}, fast.max_pool_back(dy, tape.argmax, tape.shape, self.kernel, self.stride)

    def _output_shape(self, tape: PoolingTape) -> tuple[int, ...]:
        return tuple(tape.argmax.shape)


def generic_pool(xp: Any, x: Array, kernel: Pair, stride: Pair, small: Any
                 ) -> tuple[Array, Array]:
    """Each window's maximum (B, C, rows, cols) and its row-major position in the integer
    dtype ``small``, in the array API alone (over ``windows``' view)."""
    w = windows(xp, x, kernel, stride)
    flat = xp.reshape(w, (*w.shape[:4], w.shape[4] * w.shape[5]))
    return xp.max(flat, axis=-1), xp.astype(xp.argmax(flat, axis=-1), small)


def generic_pool_back(xp: Any, dy: Array, argmax: Array, shape: tuple[int, ...],
                      kernel: Pair, stride: Pair) -> Array:
    """The input gradient of ``shape``: each entry of ``dy`` sent where its maximum was."""
    kh, kw = kernel
    with device_context_of(dy):
        positions = xp.arange(kh * kw, dtype=argmax.dtype, device=argmax.device)
    chosen = xp.expand_dims(argmax, axis=-1) == positions
    column = xp.expand_dims(dy, axis=-1)
    d = xp.where(chosen, column, xp.zeros_like(column))
    return fold(xp, xp.reshape(d, (*dy.shape, kh, kw)), shape, stride)


def fast_disagreement(loops: Any, like: Array) -> str | None:
    """How the fast ``loops`` (``numba_spatial``) differ from ``generic_pool`` and
    ``generic_pool_back`` on small random images with overlapping windows and a remainder,
    in ``like``'s dtype, or None when they agree: their first-use self-check."""
    shapes: dict[str, tuple[int, ...]] = {"x": (2, 3, 7, 6), "dy": (2, 3, 3, 5)}
    kernel, stride = (3, 2), (2, 1)

    def run(pool: Any, back: Any, a: dict[str, Array]) -> tuple[Array, ...]:
        y, argmax = pool(a["x"], kernel, stride, np.int8)
        return y, argmax, back(a["dy"], argmax, (2, 3, 7, 6), kernel, stride)

    return disagreement(
        like, shapes,
        lambda xp, a: run(functools.partial(generic_pool, xp),
                          functools.partial(generic_pool_back, xp), a),
        lambda a: run(loops.max_pool, loops.max_pool_back, a), ("y", "argmax", "dx"))
