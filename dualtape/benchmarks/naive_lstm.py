"""The ``naive`` reference: Grenade's LSTM written the straightforward way, in plain numpy.

This is the structure of Grenade's ``Grenade.Recurrent.Layers.LSTM`` (batch 1, one vector per
step): separate matrices per gate, seven matrix-vector products per step forward, per-step outer
products for the weight gradients and seven transposed matrix-vector products per step back,
the per-step gradients summed afterwards. It computes exactly what ``dualtape.LSTM`` computes
(same equations, same parameter values) and serves only as a timing and correctness reference;
it is not part of the library.

Like the seed commit, the tape keeps the gate activations, so backward evaluates no σ or tanh.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

GATES = ("f", "i", "o", "c")


def sigmoid(x: np.ndarray) -> np.ndarray:
    """σ in its tanh form (no overflow), as dualtape computes it."""
    return 0.5 * np.tanh(0.5 * x) + 0.5


class NaiveTape(NamedTuple):
    """One step: input, cell before and after, and the four gate activations."""

    x: np.ndarray
    c: np.ndarray
    f: np.ndarray
    i: np.ndarray
    o: np.ndarray
    g: np.ndarray
    c_next: np.ndarray


class NaiveLSTM:
    """One Grenade LSTM layer from dualtape-layout parameters ``W`` (4o, i), ``U`` (3o, o),
    ``b`` (4o,), split into per-gate matrices ``W_f … W_c``, ``U_f … U_o``, ``b_f … b_c``."""

    def __init__(self, params: dict[str, np.ndarray]) -> None:
        n = params["U"].shape[1]
        self.n_out, self.n_in = n, params["W"].shape[1]
        blocks = {gate: slice(k * n, (k + 1) * n) for k, gate in enumerate(GATES)}
        self.w = {g: params["W"][s].copy() for g, s in blocks.items()}
        self.u = {g: params["U"][s].copy() for g, s in blocks.items() if g != "c"}
        self.b = {g: params["b"][s].copy() for g, s in blocks.items()}

    def forward(self, c: np.ndarray, x: np.ndarray) -> tuple[NaiveTape, np.ndarray, np.ndarray]:
        """One step for vectors ``c`` (o,) and ``x`` (i,): ``(tape, c_next, h)``."""
        w, u, b = self.w, self.u, self.b
        f = sigmoid(b["f"] + w["f"] @ x + u["f"] @ c)
        i = sigmoid(b["i"] + w["i"] @ x + u["i"] @ c)
        o = sigmoid(b["o"] + w["o"] @ x + u["o"] @ c)
        g = np.tanh(b["c"] + w["c"] @ x)
        c_next = g * i + c * f
        return NaiveTape(x, c, f, i, o, g, c_next), c_next, o * c_next

    def backward(
        self, tape: NaiveTape, dc_next: np.ndarray, dh: np.ndarray
    ) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
        """One step back: ``(grads, dc, dx)``; ``grads`` are this step's outer products,
        keyed ``W_f``, ``U_f``, ``b_f``, …"""
        x, c, f, i, o, g, c_next = tape
        dc_total = dh * o + dc_next
        deltas = {
            "f": dc_total * c * f * (1.0 - f),
            "i": dc_total * g * i * (1.0 - i),
            "o": dh * c_next * o * (1.0 - o),
            "c": dc_total * i * (1.0 - g * g),
        }
        grads: dict[str, np.ndarray] = {}
        for gate, delta in deltas.items():
            grads[f"W_{gate}"] = np.outer(delta, x)
            grads[f"b_{gate}"] = delta
            if gate != "c":
                grads[f"U_{gate}"] = np.outer(delta, c)
        dc = dc_total * f
        dx = np.zeros_like(x)
        for gate, delta in deltas.items():
            dx = dx + self.w[gate].T @ delta
            if gate != "c":
                dc = dc + self.u[gate].T @ delta
        return grads, dc, dx

    def zero_grads(self) -> dict[str, np.ndarray]:
        """Zero gradient accumulators, one per per-gate parameter."""
        shapes = {f"W_{g}": a.shape for g, a in self.w.items()}
        shapes |= {f"U_{g}": a.shape for g, a in self.u.items()}
        shapes |= {f"b_{g}": a.shape for g, a in self.b.items()}
        return {k: np.zeros(s, dtype=self.w["f"].dtype) for k, s in shapes.items()}

    def apply(self, grads: dict[str, np.ndarray], rate: float) -> None:
        """Plain SGD (no momentum, no L2): ``p ← p − rate·g`` per gate."""
        for key, grad in grads.items():
            kind, gate = key.split("_")
            store = {"W": self.w, "U": self.u, "b": self.b}[kind]
            store[gate] = store[gate] - rate * grad


def stacked(grads: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Per-gate gradients in dualtape's layout: ``W`` (4o, i), ``U`` (3o, o), ``b`` (4o,)."""
    return {
        "W": np.concatenate([grads[f"W_{g}"] for g in GATES]),
        "U": np.concatenate([grads[f"U_{g}"] for g in GATES[:3]]),
        "b": np.concatenate([grads[f"b_{g}"] for g in GATES]),
    }


def loss_and_grads(
    layers: list[NaiveLSTM], xs: np.ndarray, targets: np.ndarray
) -> tuple[float, list[dict[str, np.ndarray]]]:
    """Squared-error loss ½Σ(y − t)² over ``xs`` (T, i) from zero cells, and the per-gate
    gradients summed over the steps (each step's output gradient is Grenade's ``y − t``)."""
    cells = [np.zeros(layer.n_out, dtype=xs.dtype) for layer in layers]
    tapes, dys, loss = [], [], 0.0
    for t in range(xs.shape[0]):
        h, step = xs[t], []
        for k, layer in enumerate(layers):
            tape, cells[k], h = layer.forward(cells[k], h)
            step.append(tape)
        diff = h - targets[t]
        loss += 0.5 * float(diff @ diff)
        tapes.append(step)
        dys.append(diff)
    totals = [layer.zero_grads() for layer in layers]
    dcells = [np.zeros_like(c) for c in cells]
    for t in reversed(range(xs.shape[0])):
        dh = dys[t]
        for k in reversed(range(len(layers))):
            grads, dcells[k], dh = layers[k].backward(tapes[t][k], dcells[k], dh)
            for key, grad in grads.items():
                totals[k][key] += grad
    return loss, totals


def train_step(layers: list[NaiveLSTM], xs: np.ndarray, targets: np.ndarray,
               rate: float) -> float:
    """One ``train_recurrent`` call, the naive way: forward, BPTT, one SGD update; the loss."""
    loss, grads = loss_and_grads(layers, xs, targets)
    for layer, grad in zip(layers, grads, strict=True):
        layer.apply(grad, rate)
    return loss
