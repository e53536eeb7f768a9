"""An independent float64 reference of Grenade's LSTM, written with autograd.numpy and
differentiated by autograd (the role Grenade's ``ad`` tests play).

The equations, per step, for input ``x`` (B, i) and previous cell ``c`` (B, o)::

    f = σ(W_f x + U_f c + b_f)    i = σ(W_i x + U_i c + b_i)    o = σ(W_o x + U_o c + b_o)
    ĉ = tanh(W_c x + b_c)         c' = f*c + i*ĉ                h = o*c'

``W`` (4o, i) has row blocks f, i, o, c; ``U`` (3o, o) row blocks f, i, o; ``b`` (4o,) blocks
f, i, o, c. σ is written as ``1 / (1 + exp(-z))`` here on purpose: the library uses the tanh
form, so the two share no code.
"""

from __future__ import annotations

from typing import NamedTuple

import autograd.numpy as anp
import numpy as np
from autograd import grad


def sigmoid(z):
    """The logistic function in its exp form."""
    return 1.0 / (1.0 + anp.exp(-z))


class Trace(NamedTuple):
    """Everything a reference run produces: outputs ``hs`` (T, B, o), cells ``c_0 … c_T``
    (T+1, B, o) and post-nonlinearity gates ``[σ(f), σ(i), σ(o), tanh(ĉ)]`` (T, B, 4o)."""

    hs: np.ndarray
    cells: np.ndarray
    gates: np.ndarray


def step(W, U, b, x, c):
    """One step: ``(gates, c_next, h)`` for ``x`` (B, i) and ``c`` (B, o)."""
    n = c.shape[-1]
    W_f, W_i, W_o, W_c = (W[k * n : (k + 1) * n] for k in range(4))
    U_f, U_i, U_o = (U[k * n : (k + 1) * n] for k in range(3))
    b_f, b_i, b_o, b_c = (b[k * n : (k + 1) * n] for k in range(4))
    f = sigmoid(anp.dot(x, W_f.T) + anp.dot(c, U_f.T) + b_f)
    i = sigmoid(anp.dot(x, W_i.T) + anp.dot(c, U_i.T) + b_i)
    o = sigmoid(anp.dot(x, W_o.T) + anp.dot(c, U_o.T) + b_o)
    c_hat = anp.tanh(anp.dot(x, W_c.T) + b_c)
    c_next = f * c + i * c_hat
    return anp.concatenate([f, i, o, c_hat], axis=-1), c_next, o * c_next


def sequence(W, U, b, xs, c0):
    """The whole sequence ``xs`` (T, B, i) from ``c0`` (B, o): ``(hs, c_T)``."""
    c, hs = c0, []
    for t in range(xs.shape[0]):
        _, c, h = step(W, U, b, xs[t], c)
        hs.append(h)
    return anp.stack(hs), c


def trace(W, U, b, xs, c0) -> Trace:
    """A forward run that also records the cells and gates (plain numpy, no gradient)."""
    c, hs, cells, gates = c0, [], [c0], []
    for t in range(xs.shape[0]):
        g, c, h = step(W, U, b, xs[t], c)
        hs.append(h)
        cells.append(c)
        gates.append(g)
    return Trace(np.stack(hs), np.stack(cells), np.stack(gates))


def objective(W, U, b, xs, c0, dhs, dc_last):
    """The scalar ``Σ hs·dhs + Σ c_T·dc_last`` whose gradient is a backward pass seeded with
    ``dhs`` (T, B, o) and ``dc_last`` (B, o)."""
    hs, c_last = sequence(W, U, b, xs, c0)
    return anp.sum(hs * dhs) + anp.sum(c_last * dc_last)


_GRADIENTS = {name: grad(objective, k) for k, name in enumerate(("W", "U", "b", "xs", "c0"))}


def gradients(W, U, b, xs, c0, dhs, dc_last) -> dict[str, np.ndarray]:
    """autograd's gradients of ``objective`` with respect to ``W, U, b, xs, c0``."""
    args = (W, U, b, xs, c0, dhs, dc_last)
    return {name: g(*args) for name, g in _GRADIENTS.items()}


def random_problem(
    rng: np.random.Generator, n_in: int, n_out: int, steps: int, batch: int
) -> dict[str, np.ndarray]:
    """Random float64 weights (uniform [-1, 1], as Grenade initialises), inputs, initial cell
    and output/cell gradients for a reference comparison."""
    return {
        "W": rng.uniform(-1.0, 1.0, size=(4 * n_out, n_in)),
        "U": rng.uniform(-1.0, 1.0, size=(3 * n_out, n_out)),
        "b": rng.uniform(-1.0, 1.0, size=(4 * n_out,)),
        "xs": rng.normal(size=(steps, batch, n_in)),
        "c0": rng.normal(size=(batch, n_out)),
        "dhs": rng.normal(size=(steps, batch, n_out)),
        "dc_last": rng.normal(size=(batch, n_out)),
    }
