"""BasicRecurrent: Grenade's Elman cell, ``y = b + W [x; y_prev]``, with a Wengert tape.

As Grenade defines it (``Grenade.Recurrent.Layers.BasicRecurrent``) the layer is linear:
there is no nonlinearity inside the recurrence, and the state is the output itself.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from .base import Array, RecurrentLayer
from .edges import checked_sizes
from .initial import uniform_params
from .linear_algebra import (
    batch_outer,
    input_gradient,
    project_sequence,
    sequence_outer,
    sequence_weight_grads,
)


class BasicRecurrentStepTape(NamedTuple):
    """One step's tape, Grenade's ``(lastOutput, thisInput)``: input ``x`` (B, i), the
    previous output ``y`` (B, o), and the parameters' ``version``."""

    x: Array
    y: Array
    version: int


class BasicRecurrentSequenceTape(NamedTuple):
    """A sequence's tape: inputs ``xs`` (T, B, i), outputs ``ys`` (T+1, B, o) from the
    initial state on, and the parameters' ``version``."""

    xs: Array
    ys: Array
    version: int


class BasicRecurrent(RecurrentLayer):
    """Grenade's ``BasicRecurrent`` from ``n_in`` inputs to ``n_out`` outputs::

        y_t = b + W [x_t; y_{t-1}]      (the state is y; no nonlinearity)

    ``W`` ``(n_out, n_in + n_out)`` has the input's columns first, then the previous
    output's, and ``b`` is ``(n_out,)``; both start uniform in [-1, 1] as Grenade's, from
    ``seed`` on the host, in ``dtype``. Being linear, the recurrence grows without bound
    whenever ``W``'s recurrent block has an eigenvalue beyond 1, which Grenade's scale
    gives any layer of more than a few units: follow it with an activation for outputs,
    and keep sequences short or the weights small.

    Step and sequence APIs are those of every recurrent layer; the tapes
    (``BasicRecurrentStepTape``, ``BasicRecurrentSequenceTape``) keep the inputs and
    outputs. A sequence projects its inputs for all steps in one product before the loop.
    """

    kind = "BasicRecurrent"
    takes_one_hot_ids = True

    def __init__(
        self, n_in: int, n_out: int, *, seed: int | None = None, dtype: str = "float32"
    ) -> None:
        super().__init__()
        n_in, n_out = checked_sizes(self.kind, {"n_in": n_in, "n_out": n_out})
        shapes = self.param_shapes({"n_in": n_in, "n_out": n_out})
        self.n_in, self.n_out, self.state_size = n_in, n_out, n_out
        self.params = uniform_params(shapes, 1.0, seed, self._checked_dtype(dtype))

    def config(self) -> dict[str, Any]:
        return {"n_in": self.n_in, "n_out": self.n_out}

    @classmethod
    def param_shapes(cls, config: dict[str, Any]) -> dict[str, tuple[int, ...]]:
        n_in, n_out = checked_sizes(cls.kind, config)
        return {"W": (n_out, n_in + n_out), "b": (n_out,)}

    def _forward_step(
        self, xp: Any, y: Array, x: Array
    ) -> tuple[BasicRecurrentStepTape, Array, Array]:
        p = self.params
        y_next = p["b"] + xp.concat([x, y], axis=-1) @ p["W"].T
        return BasicRecurrentStepTape(x, y, p.version), y_next, y_next

    def _backward_step(
        self, xp: Any, tape: BasicRecurrentStepTape, dstate: Array, dy: Array
    ) -> tuple[dict[str, Array], Array, Array]:
        self._check_version(tape)
        d = dy + dstate
        grads = {"W": batch_outer(d, xp.concat([tape.x, tape.y], axis=-1)),
                 "b": xp.sum(d, axis=0)}
        back = d @ self.params["W"]
        return grads, back[:, self.n_in :], back[:, : self.n_in]

    def _forward_sequence(
        self, xp: Any, y: Array, xs: Array
    ) -> tuple[BasicRecurrentSequenceTape, Array, Array]:
        p, n_in = self.params, self.n_in
        projected = project_sequence(xp, xs, p["W"][:, :n_in], p["b"])
        recurrent = p["W"][:, n_in:].T
        ys = [y]
        for t in range(xs.shape[0]):
            y = projected[t, ...] + y @ recurrent
            ys.append(y)
        tape = BasicRecurrentSequenceTape(xs, xp.stack(ys), p.version)
        return tape, y, tape.ys[1:, ...]

    def _backward_sequence(
        self, xp: Any, tape: BasicRecurrentSequenceTape, dstate: Array, dys: Array,
        need_dxs: bool = True, grads_out: dict[str, Array] | None = None,
        need_dstate: bool = True,
    ) -> tuple[dict[str, Array], Array | None, Array | None]:
        """Backprop through time; the input gradient is None unless ``need_dxs``, the first
        state's unless ``need_dstate``. (``grads_out`` is for layers with a fast path.)"""
        self._check_version(tape)
        W, n_in = self.params["W"], self.n_in
        recurrent = W[:, n_in:]
        ds = [None] * dys.shape[0]
        for t in reversed(range(len(ds))):
            ds[t] = d = dys[t, ...] + dstate
            if t or need_dstate:
                dstate = d @ recurrent
        d_all = xp.stack(ds)
        dW_x, db = sequence_weight_grads(xp, d_all, tape.xs, n_in)
        dW_y = sequence_outer(xp, d_all, tape.ys[:-1, ...])
        grads = {"W": xp.concat([dW_x, dW_y], axis=-1), "b": db}
        dxs = input_gradient(xp, d_all, tape.xs, W[:, :n_in]) if need_dxs else None
        return grads, dstate if need_dstate else None, dxs
