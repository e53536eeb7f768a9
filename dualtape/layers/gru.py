"""GRU: exactly ``torch.nn.GRU``'s cell, with a Wengert tape.

Per step, for input ``x`` and output ``h`` (gate order r, z, n, as torch)::

    r = σ(W_ir x + b_ir + W_hr h + b_hr)        z = σ(W_iz x + b_iz + W_hz h + b_hz)
    n = tanh(W_in x + b_in + r·(W_hn h + b_hn))  h' = (1 − z)·n + z·h

The tape keeps the gates after their nonlinearities and ``W_hn h + b_hn`` (a product the
gradient of ``r`` needs): backward evaluates no σ, tanh or exp.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

from .base import Array
from .gated import GatedRecurrent, disagreement
from .linear_algebra import project_sequence
from .logit import sigmoid


class GRUStepTape(NamedTuple):
    """One step's tape: input ``x`` (B, i), the output it started from ``h`` (B, o),
    ``gates`` (B, 3o) holding ``[r, z, n]`` after their nonlinearities, ``hn`` =
    ``W_hn h + b_hn`` (B, o), and the parameters' ``version``."""

    x: Array
    h: Array
    gates: Array
    hn: Array
    version: int


class GRUSequenceTape(NamedTuple):
    """A sequence's tape: inputs ``xs`` (T, B, i); outputs ``hs`` (T+1, B, o) from the
    initial state on; ``gates`` (T, B, 3o) ``[r, z, n]``; ``hn`` (T, B, o); the
    parameters' ``version``."""

    xs: Array
    hs: Array
    gates: Array
    hn: Array
    version: int


def gru_cell_forward(xp: Any, a: Array, r: Array, h: Array) -> tuple[Array, Array, Array]:
    """The pointwise part of a step: ``(gates, hn, h_next)`` from the input projection ``a``
    = ``x W_ihᵀ + b_ih`` (B, 3o), the recurrent one ``r`` = ``h W_hhᵀ + b_hh`` (B, 3o) and
    the previous output ``h`` (B, o)."""
    n = h.shape[-1]
    rz = sigmoid(xp, a[:, : 2 * n] + r[:, : 2 * n])
    hn = r[:, 2 * n :]
    new = xp.tanh(a[:, 2 * n :] + rz[:, :n] * hn)
    return xp.concat([rz, new], axis=-1), hn, new + rz[:, n:] * (h - new)


def gru_cell_backward(
    xp: Any, gates: Array, hn: Array, h: Array, dh: Array
) -> tuple[Array, Array, Array]:
    """The pointwise part of a step back, from the gradient ``dh`` of the step's output:
    ``(da_h, dn, dh_direct)``, the gradients of ``h W_hhᵀ + b_hh`` (B, 3o) and of the
    candidate's pre-activation (B, o), and the part of the previous output's gradient that
    does not pass through ``W_hh`` (the rest is ``da_h @ W_hh``)."""
    n = h.shape[-1]
    r, z, new = gates[:, :n], gates[:, n : 2 * n], gates[:, 2 * n :]
    dn = dh * (1.0 - z) * (1.0 - new * new)
    dr = dn * hn * r * (1.0 - r)
    dz = dh * (h - new) * z * (1.0 - z)
    return xp.concat([dr, dz, dn * r], axis=-1), dn, dh * z


def generic_forward_sequence(
    xp: Any, W_hh: Array, b_hh: Array, projected: Array, h: Array
) -> tuple[Array, Array, Array]:
    """The reference loop: ``(hs, gates, hn)``, ``hs`` (T+1, B, o) from ``h`` on, from the
    input projections (T, B, 3o) with ``b_ih`` in; one ``gru_cell_forward`` per step."""
    recurrent = W_hh.T
    hs, gates, hns = [h], [], []
    for t in range(projected.shape[0]):
        g, hn, h = gru_cell_forward(xp, projected[t, ...], h @ recurrent + b_hh, h)
        hs.append(h)
        gates.append(g)
        hns.append(hn)
    return xp.stack(hs), xp.stack(gates), xp.stack(hns)


def generic_backward_sequence(
    xp: Any, W_hh: Array, gates: Array, hn: Array, hs: Array, dhs: Array, dh: Array,
    need_first: bool = True,
) -> tuple[Array, Array, Array]:
    """The reference loop back: ``(da_h, dn, dh_0)`` from the last state's gradient ``dh``;
    the last product, ``dh_0``'s, only when ``need_first`` (else ``dh_0`` is meaningless)."""
    steps = gates.shape[0]
    das, dns = [None] * steps, [None] * steps
    for t in reversed(range(steps)):
        das[t], dns[t], dh_direct = gru_cell_backward(
            xp, gates[t, ...], hn[t, ...], hs[t, ...], dhs[t, ...] + dh)
        dh = dh_direct + das[t] @ W_hh if t or need_first else dh_direct
    return xp.stack(das), xp.stack(dns), dh


def fast_disagreement(loops: Any, like: Array) -> str | None:
    """How the fast ``loops`` (``forward``, ``backward``) differ from the generic ones on a
    small random sequence (T = 3, batch 2, o = 5) in ``like``'s dtype and place, or None when
    they agree to float rounding: their first-use self-check."""
    shapes = {"W_hh": (15, 5), "b_hh": (15,), "projected": (3, 2, 15), "h": (2, 5),
              "dhs": (3, 2, 5), "dh": (2, 5)}

    def run(forward: Any, backward: Any, a: dict[str, Array]) -> tuple[Array, ...]:
        results = forward(a["W_hh"], a["b_hh"], a["projected"], a["h"])
        hs, gates, hn = results
        return results + backward(a["W_hh"], gates, hn, hs, a["dhs"], a["dh"], True)

    return disagreement(
        like, shapes,
        lambda xp, a: run(functools.partial(generic_forward_sequence, xp),
                          functools.partial(generic_backward_sequence, xp), a),
        lambda a: run(loops.forward, loops.backward, a),
        ("hs", "gates", "hn", "da_h", "dn", "dh_0"))


class GRU(GatedRecurrent):
    """A GRU from ``n_in`` inputs to ``n_out`` outputs: ``torch.nn.GRU``'s equations, gate
    order and parameters, so its weights load unchanged (``dualtape.torch_weights``)::

        r = σ(W_ir x + b_ir + W_hr h + b_hr)        z = σ(W_iz x + b_iz + W_hz h + b_hz)
        n = tanh(W_in x + b_in + r·(W_hn h + b_hn))  h' = (1 − z)·n + z·h

    The state is the output ``h``, ``(batch, n_out)``. Parameters: ``W_ih`` ``(3·n_out,
    n_in)``, ``W_hh`` ``(3·n_out, n_out)``, ``b_ih``, ``b_hh`` ``(3·n_out,)``, row blocks r,
    z, n; initialised as torch does, uniform in ±1/√n_out, from ``seed`` on the host.

    Step and sequence APIs are those of every recurrent layer; the tapes (``GRUStepTape``,
    ``GRUSequenceTape``) keep the gates after their nonlinearities and ``W_hn h + b_hn``,
    so backward evaluates no σ, tanh or exp. A sequence projects its inputs for all steps in
    one product before the loop; inside it, one ``h W_hhᵀ`` product per step each way.
    """

    kind = "GRU"
    gates = 3
    _self_check = staticmethod(fast_disagreement)

    def _forward_step(self, xp: Any, h: Array, x: Array) -> tuple[GRUStepTape, Array, Array]:
        p = self.params
        gates, hn, h_next = gru_cell_forward(
            xp, x @ p["W_ih"].T + p["b_ih"], h @ p["W_hh"].T + p["b_hh"], h)
        return GRUStepTape(x, h, gates, hn, p.version), h_next, h_next

    def _backward_step(
        self, xp: Any, tape: GRUStepTape, dstate: Array, dy: Array
    ) -> tuple[dict[str, Array], Array, Array]:
        self._check_version(tape)
        da_h, dn, dh = gru_cell_backward(xp, tape.gates, tape.hn, tape.h, dy + dstate)
        da_i = xp.concat([da_h[:, : 2 * self.n_out], dn], axis=-1)
        grads, dxs = self._weight_grads(
            xp, tape.x[None, ...], tape.h[None, ...], da_i[None, ...], da_h[None, ...], True)
        assert dxs is not None  # asked for (need_dxs)
        return grads, dh + da_h @ self.params["W_hh"], dxs[0, ...]

    def _forward_sequence(
        self, xp: Any, h: Array, xs: Array
    ) -> tuple[GRUSequenceTape, Array, Array]:
        p = self.params
        projected = project_sequence(xp, xs, p["W_ih"], p["b_ih"], kept=True)
        loops = self._fast_loops(h)
        run = functools.partial(generic_forward_sequence, xp) if loops is None \
            else loops.forward
        hs, gates, hn = run(p["W_hh"], p["b_hh"], projected, h)
        return GRUSequenceTape(xs, hs, gates, hn, p.version), hs[-1, ...], hs[1:, ...]

    def _backward_sequence(
        self, xp: Any, tape: GRUSequenceTape, dh: Array, dys: Array,
        need_dxs: bool = True, grads_out: dict[str, Array] | None = None,
        need_dstate: bool = True,
    ) -> tuple[dict[str, Array], Array | None, Array | None]:
        """Backprop through time; the input gradient is None unless ``need_dxs``, the first
        state's unless ``need_dstate``; ``grads_out`` (arrays shaped like the parameters)
        receives the weight gradients on the fast path instead of new arrays."""
        self._check_version(tape)
        loops = self._fast_loops(dh)
        run = functools.partial(generic_backward_sequence, xp) if loops is None \
            else loops.backward
        da_h, dn, dh = run(self.params["W_hh"], tape.gates, tape.hn, tape.hs, dys, dh,
                           need_dstate)
        da_i = xp.concat([da_h[..., : 2 * self.n_out], dn], axis=-1)
        grads, dxs = self._weight_grads(xp, tape.xs, tape.hs[:-1, ...], da_i, da_h, need_dxs,
                                        None if loops is None else grads_out)
        return grads, dh if need_dstate else None, dxs
