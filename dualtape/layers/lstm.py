"""Grenade's peephole LSTM, with a complete Wengert tape: its equations, parameter layout and
tape are ``LSTM``'s docstring (``help(dt.LSTM)``; for users, docs/layers.md).
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np

from ..backend import backend_of, device_context_of, dtype_name, from_host, host_rng
from ..kernels import SequencePath, sequence_path
from ..kernels import lstm_sequence as kernels
from .base import Array, RecurrentLayer
from .edges import checked_sizes
from .initial import initial_params
from .linear_algebra import (
    batch_outer,
    batch_sum,
    flat_rows,
    input_gradient,
    input_outer,
    project_sequence,
    reshape,
)
from .logit import sigmoid


class LSTMStepTape(NamedTuple):
    """One step's tape: input ``x`` (B, i), cell before ``c`` and after ``c_next`` (B, o),
    ``gates`` (B, 4o) holding ``[f, i, o, ĉ]`` after their nonlinearities, and the ``version``
    of the parameters they were computed with (``ParamDict.version``; backward checks it)."""

    x: Array
    c: Array
    gates: Array
    c_next: Array
    version: int


class LSTMSequenceTape(NamedTuple):
    """A sequence's tape: inputs ``xs`` (T, B, i) (the public calls keep a copy); ``cells``
    (T+1, B, o), ``c_0 … c_T``; ``gates`` (T, B, 4o); the parameters' ``version``, as in
    ``LSTMStepTape``. Per step it adds ``5·o`` numbers per example: at float64, batch 1 and
    o = 512 that is 20 KiB a step."""

    xs: Array
    cells: Array
    gates: Array
    version: int


def lstm_cell_forward(xp: Any, a: Array, r: Array, c: Array) -> tuple[Array, Array, Array]:
    """The pointwise part of a step: ``(gates, c_next, h)``.

    ``a`` (B, 4o) is ``x Wᵀ + b``, ``r`` (B, 3o) is ``c Uᵀ``, ``c`` (B, o) the previous cell.
    """
    n = c.shape[-1]
    gates = xp.concat([sigmoid(xp, a[:, : 3 * n] + r), xp.tanh(a[:, 3 * n :])], axis=-1)
    f, i, o, g = (gates[:, k * n : (k + 1) * n] for k in range(4))
    c_next = f * c + i * g
    return gates, c_next, o * c_next


def lstm_cell_backward(
    xp: Any, gates: Array, c: Array, c_next: Array, dh: Array, dc_next: Array
) -> tuple[Array, Array]:
    """The pointwise part of a step back: ``(da, dc_direct)``.

    ``da`` (B, 4o) is the gradient of the pre-activations ``[f, i, o, ĉ]``; the gradient of the
    previous cell is ``dc_direct + da[:, :3o] @ U``.
    """
    n = c.shape[-1]
    f, i, o, g = (gates[:, k * n : (k + 1) * n] for k in range(4))
    dc = dc_next + dh * o
    da = xp.concat(
        [dc * c * f * (1.0 - f), dc * g * i * (1.0 - i), dh * c_next * o * (1.0 - o),
         dc * i * (1.0 - g * g)],
        axis=-1,
    )
    return da, dc * f


def generic_forward_sequence(
    xp: Any, U: Array, c: Array, projected: Array
) -> tuple[Array, Array, Array]:
    """The reference sequence loop: ``(cells, gates, hs)`` from the projections (T, B, 4o),
    one ``lstm_cell_forward`` per step, as ``kernels.lstm_sequence.forward_sequence`` computes."""
    recurrent = U.T
    cells, gates, hs = [c], [], []
    for t in range(projected.shape[0]):
        g, c, h = lstm_cell_forward(xp, projected[t, ...], c @ recurrent, c)
        cells.append(c)
        gates.append(g)
        hs.append(h)
    return xp.stack(cells), xp.stack(gates), xp.stack(hs)


def generic_backward_sequence(
    xp: Any, U: Array, cells: Array, gates: Array, dhs: Array, dc: Array, need_dc0: bool = True
) -> tuple[Array, Array | None]:
    """The reference loop back: ``(das, dc_0)``, one ``lstm_cell_backward`` per step;
    ``dc_0`` is None, and its recurrent product skipped, unless ``need_dc0``."""
    n = cells.shape[-1]
    das = [None] * gates.shape[0]
    for t in reversed(range(len(das))):
        da, dc_direct = lstm_cell_backward(
            xp, gates[t, ...], cells[t, ...], cells[t + 1, ...], dhs[t, ...], dc
        )
        dc = dc_direct + da[:, : 3 * n] @ U if t or need_dc0 else None
        das[t] = da
    return xp.stack(das), dc


def fused_disagreement(path: SequencePath, like: Array) -> str | None:
    """How the fast ``path`` differs from the generic loops on a small random sequence
    (T = 3, batch 2, o = 5) in ``like``'s dtype and place, or None when they agree to float
    rounding. The first-use self-check of the CUDA kernels."""
    xp = path.module
    dtype = dtype_name(like.dtype)
    rng = np.random.default_rng(0)
    host = {"U": (15, 5), "c": (2, 5), "projected": (3, 2, 20), "dhs": (3, 2, 5), "dc": (2, 5)}
    a = {k: from_host(rng.uniform(-1, 1, s).astype(dtype), backend_of(like))
         for k, s in host.items()}
    generic: tuple[Any, ...]
    generic = generic_forward_sequence(xp, a["U"], a["c"], a["projected"])
    fused: tuple[Any, ...]
    fused = kernels.forward_sequence(*path, a["U"], a["c"], a["projected"])  # uses it up
    generic += generic_backward_sequence(xp, a["U"], generic[0], generic[1], a["dhs"],
                                         a["dc"])
    blocks, dc_0 = kernels.backward_sequence(*path, a["U"], fused[0], fused[1], a["dhs"],
                                             a["dc"])
    fused += (xp.concatenate(blocks, axis=-1), dc_0)
    tolerance = 1e-4 if dtype == "float32" else 1e-10
    names = ("cells", "gates", "hs", "das", "dc_0")
    for name, x, y in zip(names, fused, generic, strict=True):
        error = float(xp.max(xp.abs(x - y)))
        if not error <= tolerance:
            return f"{name} differ by {error:.3g} (tolerance {tolerance:g})"
    return None


JOIN_UP_TO = 1 << 14
"""The fast path's pre-activation gradients (rows × 4o) up to this many entries are joined
before the weight gradients: below it three products per parameter cost more in calls than one
concatenation (the tiny network's call 6 % faster), above it the copy costs more (0.2 ms at
the main job's 1600 × 320)."""


class LSTM(RecurrentLayer):
    """Grenade's LSTM from ``n_in`` inputs to ``n_out`` outputs (and as many cells); for the
    textbook cell (``torch.nn.LSTM``'s: gates on ``h``, ``h = o·tanh(c')``) see ``StandardLSTM``.

    The state is the cell ``c`` alone; per step, for input ``x``::

        f = σ(W_f x + U_f c + b_f)    i = σ(W_i x + U_i c + b_i)    o = σ(W_o x + U_o c + b_o)
        ĉ = tanh(W_c x + b_c)         c' = f*c + i*ĉ                h = o*c'   (no tanh on c')

    Parameters (``params``): ``W`` ``(4·n_out, n_in)`` with row blocks f, i, o, ĉ; ``U``
    ``(3·n_out, n_out)`` with row blocks f, i, o; ``b`` ``(4·n_out,)`` in the order of ``W``.

    Step API: ``forward(state, x) -> (tape, state_next, y)``, ``backward(tape, dstate_next, dy)
    -> (grads, dstate, dx)``; sequences ``(T, batch, n_in)``: ``forward_sequence(state, xs) ->
    (tape, state_T, ys)``, ``backward_sequence(tape, dstate_T, dys) -> (grads, dstate_0, dxs)``.
    States are ``(batch, n_out)``, from ``initial_state(batch)`` (None: zeros). The tape
    (``LSTMStepTape``, ``LSTMSequenceTape``) holds the inputs, the cells ``c_0 … c_T`` and the
    gate activations ``[f, i, o, ĉ]``, never a pre-activation: backward evaluates no σ, tanh or
    exp. Its last field is the ``version`` of ``params`` it was made with: backward raises
    ``RuntimeError`` after the parameters changed (an optimizer step, ``params[k] = ...``).

    Initialisation, drawn on the host from ``seed`` (an integer gives the same bits on every
    backend; ``None`` draws fresh entropy from the OS, different every time), then cast to
    ``dtype`` (``"float32"`` or ``"float64"``). ``init`` chooses the scale:

    - ``"grenade"`` (default): ``W``, ``U`` and ``b`` uniform in [-1, 1], forget bias 1, as
      Grenade. A gate then sums ``n_in + n_out`` terms of standard deviation ~0.58·|x|, so
      layers wider than a few cells start with saturated gates and learn slowly, if at all.
    - ``"scaled"``: the same draws with ``W`` times 1/√n_in and ``U`` times 1/√n_out (1/√fan-in
      of each product); the biases, forget bias 1 included, as Grenade's.
    - ``"scaled_recurrent"``: only ``U`` scaled, for one-hot input, where one column of ``W``
      is active per step and Grenade's scale is right (train-text's first layer).

    The factors multiply in ``dtype`` after the cast, so a scaled layer is exactly its Grenade
    twin of the same seed times the factor. ``config()`` records ``init`` (saved with the
    network) when it is not ``"grenade"``.
    """

    kind = "LSTM"
    takes_one_hot_ids = True
    fills_gradient_buffers = True
    INITS = ("grenade", "scaled", "scaled_recurrent")

    def __init__(
        self,
        n_in: int,
        n_out: int,
        *,
        seed: int | None = None,
        dtype: str = "float32",
        init: str = "grenade",
    ):
        super().__init__()
        n_in, n_out = checked_sizes(self.kind, {"n_in": n_in, "n_out": n_out})
        dtype = self._checked_dtype(dtype)
        if init not in self.INITS:
            raise ValueError(
                f"LSTM: init must be one of {', '.join(map(repr, self.INITS))}, got {init!r}")
        shapes = self.param_shapes({"n_in": n_in, "n_out": n_out})
        self.n_in, self.n_out, self.state_size, self.init = n_in, n_out, n_out, init
        rng = host_rng(seed)
        self.params = initial_params(shapes, dtype, lambda: self._draw(shapes, rng, dtype))

    def _draw(self, shapes: dict[str, tuple[int, ...]], rng: np.random.Generator, dtype: str
              ) -> dict[str, np.ndarray]:
        """The initial parameters on the host: uniform in [-1, 1], forget bias 1, scaled
        as ``init`` says (in ``dtype``)."""
        n_in, n_out = self.n_in, self.n_out
        host = {
            "W": rng.uniform(-1.0, 1.0, size=shapes["W"]),
            "U": rng.uniform(-1.0, 1.0, size=shapes["U"]),
            "b": np.concatenate([np.ones(n_out), rng.uniform(-1.0, 1.0, size=3 * n_out)]),
        }
        host = {k: v.astype(dtype) for k, v in host.items()}
        if self.init != "grenade":
            host["U"] *= host["U"].dtype.type(1.0 / math.sqrt(n_out))
        if self.init == "scaled":
            host["W"] *= host["W"].dtype.type(1.0 / math.sqrt(n_in))
        return host

    def config(self) -> dict[str, Any]:
        config: dict[str, Any] = {"n_in": self.n_in, "n_out": self.n_out}
        if self.init != "grenade":
            config["init"] = self.init
        return config

    def __repr__(self) -> str:
        init = "" if self.init == "grenade" else f", init={self.init!r}"
        return f"LSTM({self.n_in}, {self.n_out}{init})"

    @classmethod
    def param_shapes(cls, config: dict[str, Any]) -> dict[str, tuple[int, ...]]:
        n_in, n_out = checked_sizes(cls.kind, config)
        return {"W": (4 * n_out, n_in), "U": (3 * n_out, n_out), "b": (4 * n_out,)}

    def _forward_step(self, xp: Any, c: Array, x: Array) -> tuple[LSTMStepTape, Array, Array]:
        p = self.params
        gates, c_next, h = lstm_cell_forward(xp, x @ p["W"].T + p["b"], c @ p["U"].T, c)
        return LSTMStepTape(x, c, gates, c_next, p.version), c_next, h

    def _backward_step(
        self, xp: Any, tape: LSTMStepTape, dc_next: Array, dh: Array
    ) -> tuple[dict[str, Array], Array, Array]:
        self._check_version(tape)
        p, n = self.params, self.n_out
        da, dc = lstm_cell_backward(xp, tape.gates, tape.c, tape.c_next, dh, dc_next)
        da_rec = da[:, : 3 * n]
        grads = {
            "W": batch_outer(da, tape.x), "U": batch_outer(da_rec, tape.c), "b": xp.sum(da, axis=0)
        }
        return grads, dc + da_rec @ p["U"], da @ p["W"]

    def _forward_sequence(
        self, xp: Any, c: Array, xs: Array
    ) -> tuple[LSTMSequenceTape, Array, Array]:
        p = self.params
        projected = project_sequence(xp, xs, p["W"], p["b"])
        fast = sequence_path(xp, c, fused_disagreement)
        if fast is None:
            cells, gates, hs = generic_forward_sequence(xp, p["U"], c, projected)
        else:
            with device_context_of(c):
                cells, gates, hs = kernels.forward_sequence(*fast, p["U"], c, projected)
        return LSTMSequenceTape(xs, cells, gates, p.version), cells[-1, ...], hs

    def _backward_sequence(
        self, xp: Any, tape: LSTMSequenceTape, dc: Array, dhs: Array, need_dxs: bool = True,
        grads_out: dict[str, Array] | None = None, need_dstate: bool = True,
    ) -> tuple[dict[str, Array], Array | None, Array | None]:
        """Backprop through time; ``grads_out`` (arrays shaped like the parameters) receives
        the gradients on the fast path instead of new arrays. The input gradient is None
        unless ``need_dxs``, the first cell's unless ``need_dstate`` (each saves a product)."""
        self._check_version(tape)
        fast = sequence_path(xp, dc, fused_disagreement)
        if fast is None:
            das, dc = generic_backward_sequence(
                xp, self.params["U"], tape.cells, tape.gates, dhs, dc, need_dstate)
            blocks: tuple[Array, ...] = (das,)
            grads_out = None
        else:
            with device_context_of(dc):
                blocks, dc = kernels.backward_sequence(
                    *fast, self.params["U"], tape.cells, tape.gates, dhs, dc, need_dstate)
        grads, dxs = self._sequence_grads(xp, tape, blocks, need_dxs, grads_out)
        return grads, dc, dxs

    def _sequence_grads(
        self, xp: Any, tape: LSTMSequenceTape, blocks: tuple[Array, ...], need_dxs: bool,
        out: dict[str, Array] | None = None,
    ) -> tuple[dict[str, Array], Array | None]:
        """Weight and input gradients of a whole sequence from the pre-activation gradients,
        given as column blocks of the (T, B, 4o) whole (one block on the generic path; f, i |
        o | ĉ on the fast path, joined only up to ``JOIN_UP_TO`` entries): one matrix product
        per block and parameter, written into ``out`` when given (numpy/CuPy). The input
        gradient is None unless ``need_dxs`` (``linear_algebra.input_gradient``)."""
        p, n = self.params, self.n_out
        rows = tape.xs.shape[0] * tape.xs.shape[1]
        if len(blocks) > 1 and rows * 4 * n <= JOIN_UP_TO:
            blocks = (xp.concat(blocks, axis=-1),)
        xs = flat_rows(xp, tape.xs)
        cells = reshape(xp, tape.cells[:-1, ...], (rows, n))
        parts: dict[str, list[Array]] = {"W": [], "U": [], "b": []}
        dxs, start = None, 0
        for block in blocks:
            end = start + block.shape[-1]
            flat = reshape(xp, block, (rows, end - start))
            u_end = min(end, 3 * n)
            parts["W"].append(input_outer(xp, flat, xs, self.n_in,
                                          None if out is None else out["W"][start:end]))
            if u_end > start:
                parts["U"].append(batch_outer(flat[:, : u_end - start], cells,
                                              None if out is None else out["U"][start:u_end]))
            parts["b"].append(batch_sum(xp, flat, None if out is None else out["b"][start:end]))
            start = end
        if need_dxs and len(tape.xs.shape) == 3:  # ids (T, B) have none: no join for them
            whole = blocks[0] if len(blocks) == 1 else xp.concat(blocks, axis=-1)
            dxs = input_gradient(xp, whole, tape.xs, p["W"])
        if out is not None:
            grads = dict(out)
        else:
            grads = {k: v[0] if len(v) == 1 else xp.concat(v, axis=0) for k, v in parts.items()}
        return grads, dxs
