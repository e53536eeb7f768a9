"""Convolution: a 2-D cross-correlation of images, as an unfold and one matrix product."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from ..backend import host_rng
from ..kernels import spatial_loops
from .base import Array, Layer
from .edges import check_size
from .gated import disagreement
from .initial import initial_params
from .linear_algebra import batch_outer, batch_sum
from .spatial import (
    Pair,
    Setting,
    check_example,
    check_pair,
    fold_matrix,
    images_of,
    rows_of,
    unfold,
    windowed_shape,
)


class ConvolutionTape(NamedTuple):
    """The input ``x`` (B, C, H, W), from which backward unfolds the windows again, and the
    ``version`` of the parameters the output was computed with."""

    x: Array
    version: int


class FilterLayer(Layer):
    """What ``Convolution`` and ``Deconvolution`` share: ``channels_out`` filters of
    ``kernel`` (rows, cols) moved by ``stride`` (rows, cols) over images of ``channels_in``
    channels, parameters ``W`` (in the shape ``weight_shape`` gives) and ``b``
    (channels_out,), Grenade's initialisation (``W`` uniform in [-1, 1], drawn on the host
    from ``seed``; ``b`` zeros: Grenade's layers have no bias, and a zero one starts as the
    same function), and a tape that keeps the input first."""

    spatial = True
    kernel = Setting(check_pair)
    stride = Setting(check_pair)

    def __init__(self, channels_in: int, channels_out: int, kernel: Any, stride: Any = 1, *,
                 seed: int | None = None, dtype: str = "float32") -> None:
        super().__init__()
        channels_in = check_size(self.kind, "channels_in", channels_in)
        channels_out = check_size(self.kind, "channels_out", channels_out)
        config = {"channels_in": channels_in, "channels_out": channels_out, "kernel": kernel,
                  "stride": stride}
        shapes = self.param_shapes(config)
        self.channels_in, self.channels_out = channels_in, channels_out
        self.kernel, self.stride = kernel, stride
        dtype = self._checked_dtype(dtype)
        rng = host_rng(seed)
        self.params = initial_params(shapes, dtype, lambda: {
            "W": rng.uniform(-1.0, 1.0, size=shapes["W"]), "b": np.zeros(shapes["b"])})

    def config(self) -> dict[str, Any]:
        return {"channels_in": self.channels_in, "channels_out": self.channels_out,
                "kernel": self.kernel, "stride": self.stride}

    @classmethod
    def param_shapes(cls, config: dict[str, Any]) -> dict[str, tuple[int, ...]]:
        n_in = check_size(cls.kind, "channels_in", config["channels_in"])
        n_out = check_size(cls.kind, "channels_out", config["channels_out"])
        rows, cols = check_pair(cls.kind, "kernel", config["kernel"])
        check_pair(cls.kind, "stride", config.get("stride", 1))
        return {"W": cls.weight_shape(n_in, n_out, rows, cols), "b": (n_out,)}

    @classmethod
    def weight_shape(cls, n_in: int, n_out: int, rows: int, cols: int) -> tuple[int, ...]:
        """The shape of ``W`` for these sizes."""
        raise NotImplementedError

    @property
    def input_shape(self) -> tuple:
        return (self.channels_in, "height", "width")

    def _output_shape(self, tape: Any) -> tuple[int, ...]:
        shape = self.output_shape(tuple(tape.x.shape[1:]))
        assert shape is not None  # given an example's shape, a layer says what it gives
        return (tape.x.shape[0], *shape)


class Convolution(FilterLayer):
    """``channels_out`` filters of ``kernel`` (rows, cols) moved by ``stride`` (rows, cols)
    over images (batch, channels_in, height, width), plus a bias per filter: ``y[b, o, r, c] =
    Σ W[o, i, p, q] · x[b, i, r·sr + p, c·sc + q] + b[o]``, torch's ``conv2d`` without padding
    (Grenade's ``Convolution``: pad with a ``Pad`` layer before it). ``W`` is (channels_out,
    channels_in, rows, cols), torch's layout, ``b`` (channels_out,). An image gives
    ``(height - rows) // stride_rows + 1`` rows of output, and likewise columns.

    Grenade's initialisation (``FilterLayer``).

    The product: ``W`` as a matrix times the windows unfolded into a matrix
    (channels_in·kernel, batch·rows·cols), thinc's and Chainer's ``im2col`` way; on CuPy and
    torch the windows are a strided view copied once (``kernels.windows``); on numpy with
    numba each pass is one compiled call that unfolds and multiplies image by image, so one
    image's matrix stays in cache (``kernels.numba_spatial``). The tape keeps
    the input, not the unfolded matrix, which is about ``kernel rows·cols / (stride
    rows·cols)`` times larger: measured on numpy (float32, one thread, batch 32) it is 7.8x
    the input for 8 channels of 28x28 through a 3x3 kernel, 18x for one channel through
    5x5, 1.7x at stride 2, while unfolding again in backward costs 8-11% of the layer's
    forward and backward.
    """

    kind = "Convolution"

    @classmethod
    def weight_shape(cls, n_in: int, n_out: int, rows: int, cols: int) -> tuple[int, ...]:
        return (n_out, n_in, rows, cols)

    def output_shape(self, shape: tuple | None) -> tuple:
        return windowed_shape(shape or self.input_shape, self.channels_out, self.kernel,
                              self.stride)

    def _forward(self, xp: Any, x: Array) -> tuple[ConvolutionTape, Array]:
        check_example(self, x)
        p = self.params
        fast = spatial_loops(self.kind, x, fast_disagreement)
        y = generic_forward(xp, x, p["W"], p["b"], self.stride) if fast is None else \
            fast.convolution_forward(x, p["W"], p["b"], self.stride)
        return ConvolutionTape(x, p.version), y

    def _backward(self, xp: Any, tape: ConvolutionTape, dy: Array
                  ) -> tuple[dict[str, Array], Array]:
        self._check_version(tape)
        W = self.params["W"]
        fast = spatial_loops(self.kind, dy, fast_disagreement)
        dW, db, dx = generic_backward(xp, tape.x, W, dy, self.stride) if fast is None else \
            fast.convolution_backward(tape.x, W, dy, self.stride)
        return {"W": dW, "b": db}, dx


def generic_forward(xp: Any, x: Array, W: Array, b: Array, stride: Pair) -> Array:
    """The output (B, O, rows, cols) of filters ``W`` (O, C, kernel rows, kernel cols) and
    bias ``b`` (O,) over images ``x`` (B, C, H, W): ``W`` as a matrix times the unfolded
    windows, in the array API alone."""
    n_out, kernel = W.shape[0], tuple(W.shape[2:])
    _, rows, cols = windowed_shape(tuple(x.shape[1:]), n_out, kernel, stride)
    flat = xp.reshape(W, (n_out, -1)) @ unfold(xp, x, kernel, stride)
    return images_of(xp, flat, (x.shape[0], n_out, rows, cols)) + xp.reshape(b, (-1, 1, 1))


def generic_backward(xp: Any, x: Array, W: Array, dy: Array, stride: Pair
                     ) -> tuple[Array, Array, Array]:
    """``(dW, db, dx)`` of ``generic_forward`` from its input ``x``, filters ``W`` and the
    output's gradient ``dy``."""
    kernel = tuple(W.shape[2:])
    W2 = xp.reshape(W, (W.shape[0], -1))
    d = rows_of(xp, dy)
    cols = unfold(xp, x, kernel, stride)
    return (xp.reshape(batch_outer(d.T, cols.T), tuple(W.shape)), batch_sum(xp, d.T),
            fold_matrix(xp, W2.T @ d, tuple(x.shape), kernel, stride))


def fast_disagreement(loops: Any, like: Array) -> str | None:
    """How the fast ``loops`` (``numba_spatial``) differ from ``generic_forward`` and
    ``generic_backward`` on small random images with a stride and a remainder, in ``like``'s
    dtype, or None when they agree to float rounding: their first-use self-check."""
    shapes = {"x": (2, 3, 7, 6), "W": (2, 3, 3, 2), "b": (2,), "dy": (2, 2, 3, 5)}
    return disagreement(
        like, shapes,
        lambda xp, a: (generic_forward(xp, a["x"], a["W"], a["b"], (2, 1)),
                       *generic_backward(xp, a["x"], a["W"], a["dy"], (2, 1))),
        lambda a: (loops.convolution_forward(a["x"], a["W"], a["b"], (2, 1)),
                   *loops.convolution_backward(a["x"], a["W"], a["dy"], (2, 1))),
        ("y", "dW", "db", "dx"))
