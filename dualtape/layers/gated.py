"""What ``StandardLSTM`` and ``GRU`` share: torch's parameter layout, initialisation and the
weight gradients of a sequence, computed after the time loop."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np

from ..backend import backend_of, device_context, dtype_name, from_host, namespace_of
from ..kernels import cell_loops
from .base import Array, RecurrentLayer
from .edges import checked_sizes
from .initial import uniform_params
from .linear_algebra import input_gradient, sequence_outer, sequence_weight_grads


class GatedRecurrent(RecurrentLayer):
    """A recurrent layer with ``torch.nn``'s parameters for ``gates`` gates of ``n_out``
    units: ``W_ih`` ``(gates·n_out, n_in)``, ``W_hh`` ``(gates·n_out, n_out)``, ``b_ih`` and
    ``b_hh`` ``(gates·n_out,)``, all drawn uniformly from ``[-1/√n_out, 1/√n_out]`` (torch's
    default) on the host from ``seed``, in ``dtype``."""

    gates: ClassVar[int]
    takes_one_hot_ids = True
    fills_gradient_buffers = True
    state_units: ClassVar[int] = 1
    """The state's width in units of ``n_out``: 2 for ``(h, c)``, 1 for ``h``."""
    _self_check: ClassVar[staticmethod[[Any, Array], str | None]]
    """How the cell's fast loops differ from its generic ones on arrays like the second
    argument, or None (its module's ``fast_disagreement``)."""

    def _fast_loops(self, like: Array) -> Any:
        """The cell's fast loops for arrays of ``like``'s kind, dtype and device
        (``kernels.cell_loops``, once ``_self_check`` passed), or None for the generic code."""
        return cell_loops(self.kind, like, lambda fast: type(self)._self_check(fast, like))

    def __init__(
        self, n_in: int, n_out: int, *, seed: int | None = None, dtype: str = "float32"
    ) -> None:
        super().__init__()
        n_in, n_out = checked_sizes(self.kind, {"n_in": n_in, "n_out": n_out})
        shapes = self.param_shapes({"n_in": n_in, "n_out": n_out})
        self.n_in, self.n_out = n_in, n_out
        self.state_size = self.state_units * n_out
        self.params = uniform_params(
            shapes, 1.0 / math.sqrt(n_out), seed, self._checked_dtype(dtype)
        )

    def config(self) -> dict[str, Any]:
        return {"n_in": self.n_in, "n_out": self.n_out}

    @classmethod
    def param_shapes(cls, config: dict[str, Any]) -> dict[str, tuple[int, ...]]:
        n_in, n_out = checked_sizes(cls.kind, config)
        rows = cls.gates * n_out
        return {"W_ih": (rows, n_in), "W_hh": (rows, n_out), "b_ih": (rows,), "b_hh": (rows,)}

    def _weight_grads(
        self, xp: Any, xs: Array, hs: Array, da_i: Array, da_h: Array, need_dxs: bool,
        out: dict[str, Array] | None = None,
    ) -> tuple[dict[str, Array], Array | None]:
        """The parameters' gradients and the inputs' (None unless ``need_dxs``) from those of
        the pre-activations, ``da_i`` of ``xs W_ihᵀ + b_ih`` and ``da_h`` of ``h W_hhᵀ + b_hh``
        (T, B, gates·n_out), with ``xs`` (T, B, n_in) (or ids: ``input_gradient``) and
        ``hs`` (T, B, n_out) the states each step started from: one product per weight over
        all steps, written into ``out`` (arrays shaped like the parameters) when given. When
        ``da_i`` is ``da_h`` (an LSTM's) the two biases have one gradient, summed once."""
        grads = {}
        grads["W_ih"], grads["b_ih"] = sequence_weight_grads(
            xp, da_i, xs, self.n_in, None if out is None else (out["W_ih"], out["b_ih"]))
        if da_i is da_h:
            grads["W_hh"] = sequence_outer(xp, da_h, hs,
                                           out=None if out is None else out["W_hh"])
            if out is None:
                grads["b_hh"] = xp.asarray(grads["b_ih"], copy=True)
            else:
                out["b_hh"][...] = grads["b_ih"]
                grads["b_hh"] = out["b_hh"]
        else:
            grads["W_hh"], grads["b_hh"] = sequence_weight_grads(
                xp, da_h, hs, None, None if out is None else (out["W_hh"], out["b_hh"]))
        dxs = input_gradient(xp, da_i, xs, self.params["W_ih"]) if need_dxs else None
        return grads, dxs


def disagreement(
    like: Array, shapes: dict[str, tuple[int, ...]], generic: Callable[[Any, dict], tuple],
    fast: Callable[[dict], tuple], names: tuple[str, ...],
) -> str | None:
    """How ``fast(arrays)`` differs from ``generic(xp, arrays)`` (the same tuple of results,
    named ``names``) on random arrays of ``shapes`` in ``like``'s dtype and place, or None when
    they agree to float rounding: the first-use self-check of a cell's fast loops. The generic
    code runs first, so the fast one may use its inputs up."""
    rng = np.random.default_rng(0)
    backend, dtype = backend_of(like), dtype_name(like.dtype)
    arrays = {k: from_host(rng.uniform(-1, 1, s).astype(dtype), backend)
              for k, s in shapes.items()}
    xp = namespace_of(like)
    with device_context(backend):
        expected = generic(xp, arrays)
        got = fast(arrays)
    tolerance = 1e-4 if dtype == "float32" else 1e-10
    for name, x, y in zip(names, got, expected, strict=True):
        error = float(xp.max(xp.abs(x - y)))
        if not error <= tolerance:
            return f"{name} differ by {error:.3g} (tolerance {tolerance:g})"
    return None
