"""Deconvolution: the transposed convolution, each input pixel spread through the kernel."""

from __future__ import annotations

from typing import Any, NamedTuple

from ..kernels import spatial_loops
from .base import Array
from .convolution import FilterLayer
from .gated import disagreement
from .linear_algebra import batch_outer
from .spatial import Pair, check_example, fold_matrix, images_of, rows_of, unfold


class DeconvolutionTape(NamedTuple):
    """The input ``x`` (B, C, H, W), and the ``version`` of the parameters the output was
    computed with."""

    x: Array
    version: int


class Deconvolution(FilterLayer):
    """Grenade's ``Deconvolution``, torch's ``conv_transpose2d`` (no padding, no output
    padding): each pixel of images (batch, channels_in, height, width) times ``W[i]``, a
    (channels_out, rows, cols) kernel, added into the output at ``stride`` (rows, cols) steps,
    plus a bias per output channel; the output has ``(height - 1)·stride_rows + rows`` rows,
    and likewise columns. It is the adjoint of a ``Convolution`` of the same kernel and
    stride: its forward pass is that convolution's input gradient, its backward pass that
    convolution's forward pass. ``W`` is (channels_in, channels_out, rows, cols), torch's
    layout, ``b`` (channels_out,); Grenade's initialisation (``FilterLayer``). The tape keeps
    the input (the weight gradient's other factor). On numpy with numba each pass is one
    compiled call that goes image by image (``kernels.numba_spatial``).
    """

    kind = "Deconvolution"

    @classmethod
    def weight_shape(cls, n_in: int, n_out: int, rows: int, cols: int) -> tuple[int, ...]:
        return (n_in, n_out, rows, cols)

    def output_shape(self, shape: tuple | None) -> tuple:
        _, height, width = shape or self.input_shape
        for size, what in ((height, "height"), (width, "width")):
            if size == 0:
                raise ValueError(f"the input's {what} is 0: there is nothing to spread")
        grown = [size if isinstance(size, str) else (size - 1) * s + k
                 for size, k, s in zip((height, width), self.kernel, self.stride, strict=True)]
        return (self.channels_out, *grown)

    def _forward(self, xp: Any, x: Array) -> tuple[DeconvolutionTape, Array]:
        check_example(self, x)
        p = self.params
        shape = (x.shape[0], *self.output_shape(tuple(x.shape[1:])))
        fast = spatial_loops(self.kind, x, fast_disagreement)
        y = generic_forward(xp, x, p["W"], p["b"], shape, self.stride) if fast is None else \
            fast.deconvolution_forward(x, p["W"], p["b"], shape, self.stride)
        return DeconvolutionTape(x, p.version), y

    def _backward(self, xp: Any, tape: DeconvolutionTape, dy: Array
                  ) -> tuple[dict[str, Array], Array]:
        self._check_version(tape)
        W = self.params["W"]
        fast = spatial_loops(self.kind, dy, fast_disagreement)
        dW, db, dx = generic_backward(xp, tape.x, W, dy, self.stride) if fast is None else \
            fast.deconvolution_backward(tape.x, W, dy, self.stride)
        return {"W": dW, "b": db}, dx


def generic_forward(xp: Any, x: Array, W: Array, b: Array, shape: tuple[int, ...],
                    stride: Pair) -> Array:
    """The output of ``shape`` (B, O, H, W) of kernels ``W`` (C, O, kernel rows, kernel
    cols) and bias ``b`` (O,) spread from images ``x`` (B, C, h, w), in the array API
    alone."""
    W2 = xp.reshape(W, (W.shape[0], -1))
    y = fold_matrix(xp, W2.T @ rows_of(xp, x), shape, tuple(W.shape[2:]), stride)
    return y + xp.reshape(b, (-1, 1, 1))


def generic_backward(xp: Any, x: Array, W: Array, dy: Array, stride: Pair
                     ) -> tuple[Array, Array, Array]:
    """``(dW, db, dx)`` of ``generic_forward`` from its input ``x``, kernels ``W`` and the
    output's gradient ``dy``."""
    W2 = xp.reshape(W, (W.shape[0], -1))
    cols = unfold(xp, dy, tuple(W.shape[2:]), stride)
    rows = rows_of(xp, x)
    return (xp.reshape(batch_outer(rows.T, cols.T), tuple(W.shape)),
            xp.sum(dy, axis=(0, 2, 3)), images_of(xp, W2 @ cols, tuple(x.shape)))


def fast_disagreement(loops: Any, like: Array) -> str | None:
    """How the fast ``loops`` (``numba_spatial``) differ from ``generic_forward`` and
    ``generic_backward`` on small random images with a stride, in ``like``'s dtype, or None
    when they agree to float rounding: their first-use self-check."""
    shapes = {"x": (2, 3, 3, 5), "W": (3, 2, 3, 2), "b": (2,), "dy": (2, 2, 7, 6)}
    out = (2, 2, 7, 6)
    return disagreement(
        like, shapes,
        lambda xp, a: (generic_forward(xp, a["x"], a["W"], a["b"], out, (2, 1)),
                       *generic_backward(xp, a["x"], a["W"], a["dy"], (2, 1))),
        lambda a: (loops.deconvolution_forward(a["x"], a["W"], a["b"], out, (2, 1)),
                   *loops.deconvolution_backward(a["x"], a["W"], a["dy"], (2, 1))),
        ("y", "dW", "db", "dx"))
