"""StandardLSTM: the textbook LSTM, exactly ``torch.nn.LSTM``'s cell, with a Wengert tape.

Per step, for input ``x``, output ``h`` and cell ``c`` (gate order i, f, g, o, as torch)::

    i = σ(W_ii x + b_ii + W_hi h + b_hi)    f = σ(W_if x + b_if + W_hf h + b_hf)
    g = tanh(W_ig x + b_ig + W_hg h + b_hg)  o = σ(W_io x + b_io + W_ho h + b_ho)
    c' = f·c + i·g                            h' = o·tanh(c')

The tape keeps the gates after their nonlinearities, the cells and ``tanh(c')``: backward
evaluates no σ, tanh or exp.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

from ..backend import check_same_place, namespace_of
from .base import Array
from .gated import GatedRecurrent, disagreement
from .linear_algebra import project_sequence
from .logit import sigmoid


class StandardLSTMStepTape(NamedTuple):
    """One step's tape: input ``x`` (B, i), the state it started from, ``h`` and ``c``
    (B, o), ``gates`` (B, 4o) holding ``[i, f, g, o]`` after their nonlinearities,
    ``tanh_c`` = tanh(c') (B, o), and the parameters' ``version``."""

    x: Array
    h: Array
    c: Array
    gates: Array
    tanh_c: Array
    version: int


class StandardLSTMSequenceTape(NamedTuple):
    """A sequence's tape: inputs ``xs`` (T, B, i); outputs ``hs`` and cells ``cells``
    (T+1, B, o), from the initial state's ``h_0``, ``c_0`` on; ``gates`` (T, B, 4o)
    ``[i, f, g, o]``; ``tanh_cells`` (T, B, o); the parameters' ``version``."""

    xs: Array
    hs: Array
    cells: Array
    gates: Array
    tanh_cells: Array
    version: int


def standard_lstm_cell_forward(
    xp: Any, a: Array, c: Array
) -> tuple[Array, Array, Array, Array]:
    """The pointwise part of a step: ``(gates, c_next, tanh_c, h)`` from the pre-activations
    ``a`` (B, 4o) (both products and both biases) and the previous cell ``c`` (B, o)."""
    n = c.shape[-1]
    gates = xp.concat(
        [sigmoid(xp, a[:, : 2 * n]), xp.tanh(a[:, 2 * n : 3 * n]), sigmoid(xp, a[:, 3 * n :])],
        axis=-1,
    )
    i, f, g, o = (gates[:, k * n : (k + 1) * n] for k in range(4))
    c_next = f * c + i * g
    tanh_c = xp.tanh(c_next)
    return gates, c_next, tanh_c, o * tanh_c


def standard_lstm_cell_backward(
    xp: Any, gates: Array, c: Array, tanh_c: Array, dh: Array, dc_next: Array
) -> tuple[Array, Array]:
    """The pointwise part of a step back: ``(da, dc)``, the gradients of the pre-activations
    (B, 4o) and of the previous cell; the previous output's is ``da @ W_hh``."""
    n = c.shape[-1]
    i, f, g, o = (gates[:, k * n : (k + 1) * n] for k in range(4))
    dc = dc_next + dh * o * (1.0 - tanh_c * tanh_c)
    da = xp.concat(
        [dc * g * i * (1.0 - i), dc * c * f * (1.0 - f), dc * i * (1.0 - g * g),
         dh * tanh_c * o * (1.0 - o)],
        axis=-1,
    )
    return da, dc * f


def generic_forward_sequence(
    xp: Any, W_hh: Array, projected: Array, h: Array, c: Array
) -> tuple[Array, Array, Array, Array]:
    """The reference loop: ``(hs, cells, gates, tanh_cells)``, ``hs`` and ``cells`` (T+1, B,
    o) from ``h``, ``c`` on, from the projections (T, B, 4o) with both biases in; one
    ``standard_lstm_cell_forward`` per step, as ``kernels.standard_lstm.forward`` computes."""
    recurrent = W_hh.T
    hs, cells, gates, tanh_cells = [h], [c], [], []
    for t in range(projected.shape[0]):
        g, c, tanh_c, h = standard_lstm_cell_forward(xp, projected[t, ...] + h @ recurrent, c)
        hs.append(h)
        cells.append(c)
        gates.append(g)
        tanh_cells.append(tanh_c)
    return xp.stack(hs), xp.stack(cells), xp.stack(gates), xp.stack(tanh_cells)


def generic_backward_sequence(
    xp: Any, W_hh: Array, gates: Array, cells: Array, tanh_cells: Array, dhs: Array,
    dh: Array, dc: Array, need_first: bool = True,
) -> tuple[Array, Array, Array]:
    """The reference loop back: ``(das, dh_0, dc_0)`` from the last state's gradient ``dh``,
    ``dc``; the last product, ``dh_0``'s, only when ``need_first`` (else ``dh_0`` is
    meaningless)."""
    das = [None] * gates.shape[0]
    for t in reversed(range(len(das))):
        da, dc = standard_lstm_cell_backward(
            xp, gates[t, ...], cells[t, ...], tanh_cells[t, ...], dhs[t, ...] + dh, dc)
        das[t] = da
        if t or need_first:
            dh = da @ W_hh
    return xp.stack(das), dh, dc


def fast_disagreement(loops: Any, like: Array) -> str | None:
    """How the fast ``loops`` (``forward``, ``backward``) differ from the generic ones on a
    small random sequence (T = 3, batch 2, o = 5) in ``like``'s dtype and place, or None when
    they agree to float rounding: their first-use self-check."""
    shapes = {"W_hh": (20, 5), "projected": (3, 2, 20), "h": (2, 5), "c": (2, 5),
              "dhs": (3, 2, 5), "dh": (2, 5), "dc": (2, 5)}

    def run(forward: Any, backward: Any, a: dict[str, Array]) -> tuple[Array, ...]:
        results = forward(a["W_hh"], a["projected"], a["h"], a["c"])
        _, cells, gates, tanh_cells = results
        return results + backward(a["W_hh"], gates, cells, tanh_cells, a["dhs"], a["dh"],
                                  a["dc"], True)

    return disagreement(
        like, shapes,
        lambda xp, a: run(functools.partial(generic_forward_sequence, xp),
                          functools.partial(generic_backward_sequence, xp), a),
        lambda a: run(loops.forward, loops.backward, a),
        ("hs", "cells", "gates", "tanh_cells", "das", "dh_0", "dc_0"))

class StandardLSTM(GatedRecurrent):
    """The standard LSTM from ``n_in`` inputs to ``n_out`` outputs: ``torch.nn.LSTM``'s
    equations, gate order and parameters, so its weights load unchanged
    (``dualtape.torch_weights``). Per step::

        i, f, o = σ(...), g = tanh(...)   (each W_i· x + b_i· + W_h· h + b_h·)
        c' = f·c + i·g                    h' = o·tanh(c')

    How it differs from Grenade's ``LSTM``: the gates read the previous output ``h``, not the
    cell; the output is ``o·tanh(c')``, bounded in (-1, 1), where Grenade's is ``o·c'``; the
    state is ``(h, c)``, not ``c`` alone; there are two biases (torch's) and no peephole.

    The state is one array ``(batch, 2·n_out)`` holding ``[h | c]`` (``join_state(h, c)``,
    ``split_state(state)``), so it travels like any other layer's: in ``RecurrentNetwork``
    state lists, ``train_recurrent`` and saved files. Parameters: ``W_ih`` ``(4·n_out,
    n_in)``, ``W_hh`` ``(4·n_out, n_out)``, ``b_ih``, ``b_hh`` ``(4·n_out,)``, row blocks
    i, f, g, o; initialised as torch does, uniform in ±1/√n_out, from ``seed`` on the host.

    Step and sequence APIs and their tapes (``StandardLSTMStepTape``,
    ``StandardLSTMSequenceTape``) are those of every recurrent layer; the tapes keep only
    activations (gates after their nonlinearities, cells, tanh of the cells), so backward
    evaluates no σ, tanh or exp. A sequence projects its inputs for all steps in one product
    before the loop; inside it, one ``h W_hhᵀ`` product per step each way.
    """

    kind = "StandardLSTM"
    gates = 4
    state_units = 2
    _self_check = staticmethod(fast_disagreement)

    def join_state(self, h: Any, c: Any) -> Array:
        """The state ``[h | c]`` from an output ``h`` and a cell ``c`` (each (batch, n_out)
        or (n_out,)), as torch's ``(h_0, c_0)`` of one layer gives them."""
        xp = namespace_of(h)
        check_same_place(c, h, "c", f"{self!r}.join_state")
        if tuple(h.shape) != tuple(c.shape) or h.shape[-1] != self.n_out:
            raise ValueError(f"{self!r}: h and c must both have shape (batch, {self.n_out}) or "
                             f"({self.n_out},), got {tuple(h.shape)} and {tuple(c.shape)}")
        return xp.concat([h, c], axis=-1)

    def split_state(self, state: Array) -> tuple[Array, Array]:
        """``(h, c)``, the two halves of a state."""
        n = self.n_out
        return state[..., :n], state[..., n:]

    def _forward_step(
        self, xp: Any, state: Array, x: Array
    ) -> tuple[StandardLSTMStepTape, Array, Array]:
        p, n = self.params, self.n_out
        h, c = state[:, :n], state[:, n:]
        a = x @ p["W_ih"].T + p["b_ih"] + (h @ p["W_hh"].T + p["b_hh"])
        gates, c_next, tanh_c, h_next = standard_lstm_cell_forward(xp, a, c)
        tape = StandardLSTMStepTape(x, h, c, gates, tanh_c, p.version)
        return tape, xp.concat([h_next, c_next], axis=-1), h_next

    def _backward_step(
        self, xp: Any, tape: StandardLSTMStepTape, dstate: Array, dy: Array
    ) -> tuple[dict[str, Array], Array, Array]:
        self._check_version(tape)
        n = self.n_out
        da, dc = standard_lstm_cell_backward(
            xp, tape.gates, tape.c, tape.tanh_c, dy + dstate[:, :n], dstate[:, n:])
        grads, dxs = self._weight_grads(
            xp, tape.x[None, ...], tape.h[None, ...], da[None, ...], da[None, ...], True)
        assert dxs is not None  # asked for (need_dxs)
        dh = da @ self.params["W_hh"]
        return grads, xp.concat([dh, dc], axis=-1), dxs[0, ...]

    def _forward_sequence(
        self, xp: Any, state: Array, xs: Array
    ) -> tuple[StandardLSTMSequenceTape, Array, Array]:
        p, n = self.params, self.n_out
        projected = project_sequence(xp, xs, p["W_ih"], p["b_ih"] + p["b_hh"], kept=True)
        loops = self._fast_loops(state)
        run = functools.partial(generic_forward_sequence, xp) if loops is None \
            else loops.forward
        hs, cells, gates, tanh_cells = run(p["W_hh"], projected, state[:, :n], state[:, n:])
        tape = StandardLSTMSequenceTape(xs, hs, cells, gates, tanh_cells, p.version)
        return tape, xp.concat([hs[-1, ...], cells[-1, ...]], axis=-1), hs[1:, ...]

    def _backward_sequence(
        self, xp: Any, tape: StandardLSTMSequenceTape, dstate: Array, dys: Array,
        need_dxs: bool = True, grads_out: dict[str, Array] | None = None,
        need_dstate: bool = True,
    ) -> tuple[dict[str, Array], Array | None, Array | None]:
        """Backprop through time; the input gradient is None unless ``need_dxs``, the first
        state's unless ``need_dstate``; ``grads_out`` (arrays shaped like the parameters)
        receives the weight gradients on the fast path instead of new arrays."""
        self._check_version(tape)
        n, W_hh = self.n_out, self.params["W_hh"]
        loops = self._fast_loops(dstate)
        run = functools.partial(generic_backward_sequence, xp) if loops is None \
            else loops.backward
        das, dh, dc = run(W_hh, tape.gates, tape.cells, tape.tanh_cells, dys, dstate[:, :n],
                          dstate[:, n:], need_dstate)
        grads, dxs = self._weight_grads(xp, tape.xs, tape.hs[:-1, ...], das, das, need_dxs,
                                        None if loops is None else grads_out)
        return grads, xp.concat([dh, dc], axis=-1) if need_dstate else None, dxs
