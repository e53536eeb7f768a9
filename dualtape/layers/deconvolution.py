"""Deconvolution: the transposed convolution, each input pixel spread through the kernel."""

from __future__ import annotations

from typing import Any, NamedTuple

from .base import Array
from .convolution import FilterLayer
from .linear_algebra import batch_outer
from .spatial import check_example, fold_matrix, images_of, rows_of, unfold


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
    the input (the weight gradient's other factor).
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
        W = xp.reshape(p["W"], (self.channels_in, -1))
        y = fold_matrix(xp, W.T @ rows_of(xp, x), shape, self.kernel, self.stride)
        return DeconvolutionTape(x, p.version), y + xp.reshape(p["b"], (-1, 1, 1))

    def _backward(self, xp: Any, tape: DeconvolutionTape, dy: Array
                  ) -> tuple[dict[str, Array], Array]:
        self._check_version(tape)
        W = xp.reshape(self.params["W"], (self.channels_in, -1))
        cols = unfold(xp, dy, self.kernel, self.stride)
        x = rows_of(xp, tape.x)
        grads = {"W": xp.reshape(batch_outer(x.T, cols.T), tuple(self.params["W"].shape)),
                 "b": xp.sum(dy, axis=(0, 2, 3))}
        return grads, images_of(xp, W @ cols, tuple(tape.x.shape))
