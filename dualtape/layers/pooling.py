"""Pooling: the maximum of each window of each channel."""

from __future__ import annotations

from typing import Any, NamedTuple

from ..backend import backend_of, device_context, zeros_like_place
from .base import Array, Layer
from .spatial import (
    IMAGE,
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
        w = windows(xp, x, self.kernel, self.stride)
        flat = xp.reshape(w, (*w.shape[:4], w.shape[4] * w.shape[5]))
        positions = flat.shape[-1]
        small = xp.int8 if positions <= 127 else xp.int16 if positions <= 32767 else xp.int32
        argmax = xp.astype(xp.argmax(flat, axis=-1), small)
        empty = zeros_like_place((0,), x)
        return PoolingTape(empty, argmax, tuple(x.shape)), xp.max(flat, axis=-1)

    def _backward(self, xp: Any, tape: PoolingTape, dy: Array) -> tuple[dict[str, Array], Array]:
        kh, kw = self.kernel
        with device_context(backend_of(dy)):
            positions = xp.arange(kh * kw, dtype=tape.argmax.dtype, device=tape.argmax.device)
        chosen = xp.expand_dims(tape.argmax, axis=-1) == positions
        column = xp.expand_dims(dy, axis=-1)
        d = xp.where(chosen, column, xp.zeros_like(column))
        return {}, fold(xp, xp.reshape(d, (*dy.shape, kh, kw)), tape.shape, self.stride)

    def _output_shape(self, tape: PoolingTape) -> tuple[int, ...]:
        return tuple(tape.argmax.shape)
