"""FullyConnected: the affine layer ``y = x Wᵀ + b``."""

from __future__ import annotations

import math
from typing import Any, NamedTuple

from .base import Array, Layer
from .edges import checked_sizes
from .initial import uniform_params
from .linear_algebra import batch_outer, batch_sum


class FullyConnectedTape(NamedTuple):
    """The input ``x``, all the weight gradient needs, and the ``version`` of the parameters
    the output was computed with (``ParamDict.version``; backward checks it)."""

    x: Array
    version: int


class FullyConnected(Layer):
    """``y = x Wᵀ + b`` with ``W`` of shape ``(n_out, n_in)`` and ``b`` of shape ``(n_out,)``.

    Weights and biases start uniform in ``[-1/√n_in, 1/√n_in]``, drawn on the host from
    ``seed``, in ``dtype`` (``"float32"`` or ``"float64"``).
    """

    kind = "FullyConnected"
    n_in: int
    n_out: int

    def __init__(self, n_in: int, n_out: int, *, seed: int | None = None, dtype: str = "float32"):
        super().__init__()
        n_in, n_out = checked_sizes(self.kind, {"n_in": n_in, "n_out": n_out})
        shapes = self.param_shapes({"n_in": n_in, "n_out": n_out})
        self.n_in, self.n_out = n_in, n_out
        self.params = uniform_params(
            shapes, 1.0 / math.sqrt(n_in), seed, self._checked_dtype(dtype)
        )

    def config(self) -> dict[str, Any]:
        return {"n_in": self.n_in, "n_out": self.n_out}

    @classmethod
    def param_shapes(cls, config: dict[str, Any]) -> dict[str, tuple[int, ...]]:
        n_in, n_out = checked_sizes(cls.kind, config)
        return {"W": (n_out, n_in), "b": (n_out,)}

    def _forward(self, xp: Any, x: Array) -> tuple[FullyConnectedTape, Array]:
        p = self.params
        return FullyConnectedTape(x, p.version), x @ p["W"].T + p["b"]

    fills_gradient_buffers = True

    def _backward(
        self, xp: Any, tape: FullyConnectedTape, dy: Array,
        grads_out: dict[str, Array] | None = None,
    ) -> tuple[dict[str, Array], Array]:
        """The gradients, written into ``grads_out`` when given (numpy/CuPy arrays shaped like
        the parameters, ``recurrent.gradient_buffers``: the same bits as new arrays). The
        input's, ``dy W``, is ``batch_outer(dyᵀ, W)``: at one output (a forecaster's) the
        broadcast product of ``dy``'s column and ``W``'s row, the same bits where BLAS's
        product of inner size 1 takes 2-3x as long."""
        self._check_version(tape)
        out = grads_out or {}
        grads = {"W": batch_outer(dy, tape.x, out.get("W")),
                 "b": batch_sum(xp, dy, out.get("b"))}
        return grads, batch_outer(dy.T, self.params["W"])

    def _output_shape(self, tape: FullyConnectedTape) -> tuple[int, ...]:
        return (tape.x.shape[0], self.n_out)
