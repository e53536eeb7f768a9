"""The JAX reference of the main job (``char_model.py``): dualtape's maths, one ``jax.jit``.

A whole training step is one compiled function, as a JAX user would write it: one-hot inputs
from the window's ids, each Grenade LSTM as ``lax.scan`` of the cell over time (its input
projected for the whole window before the scan, as dualtape does), a linear top, softmax
cross entropy on the logits (nats per character), ``jax.value_and_grad``, and Adam written in
``jnp`` (``torch.optim.Adam``'s rule, eps after the bias correction); parameters and moments
are donated to the step. It runs on JAX's CPU device. float64 turns on ``jax_enable_x64`` for
the process (JAX's only way to hold float64); float32 arrays stay float32.

Its threads are XLA's: ``XLA_FLAGS`` is read once, when JAX first starts a backend, so a
thread limit (``dualtape bench --threads N``) reaches JAX only through ``xla_flags``, set
before that (``cpu_threads``). Checked against dualtape in ``bench/test_char_model.py``.
Imports JAX at module level: import this module only when JAX is installed.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from . import char_model

BETAS, EPS = (0.9, 0.999), 1e-8


def lstm_sequence(params: dict[str, Any], xs: Any) -> Any:
    """Grenade's LSTM over ``xs`` ``(T, B, i)`` from zero cells: the outputs ``(T, B, o)``."""
    W, U, b = params["W"], params["U"], params["b"]
    n = U.shape[1]

    def cell(c: Any, a: Any) -> tuple[Any, Any]:
        f, i, o = jnp.split(jax.nn.sigmoid(a[:, : 3 * n] + c @ U.T), 3, axis=1)
        c = f * c + i * jnp.tanh(a[:, 3 * n :])
        return c, o * c

    c0 = jnp.zeros((xs.shape[1], n), xs.dtype)
    return lax.scan(cell, c0, xs @ W.T + b)[1]


def loss(params: list[dict[str, Any]], ids: Any) -> Any:
    """Mean cross entropy per character (nats) of the model on a window ``(T + 1, B)``."""
    *lstms, top = params
    h = jax.nn.one_hot(ids[:-1], top["W"].shape[0], dtype=top["W"].dtype)
    for layer in lstms:
        h = lstm_sequence(layer, h)
    log_p = jax.nn.log_softmax(h @ top["W"].T + top["b"])
    return -jnp.mean(jnp.take_along_axis(log_p, ids[1:, :, None], axis=-1))


def adam(params: Any, grads: Any, state: tuple[Any, Any, Any]) -> tuple[Any, tuple]:
    """One Adam step: the new parameters and ``(t, m, v)``."""
    t, m, v = state
    t = t + 1
    (b1, b2), rate = BETAS, char_model.ADAM_RATE
    m = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g, m, grads)
    v = jax.tree.map(lambda v, g: b2 * v + (1 - b2) * g * g, v, grads)
    scale_m, scale_v = 1 / (1 - b1**t), 1 / (1 - b2**t)
    params = jax.tree.map(lambda w, m, v: w - rate * (m * scale_m) / (jnp.sqrt(v * scale_v) + EPS),
                          params, m, v)
    return params, (t, m, v)


def train_step(params: Any, state: tuple, ids: Any) -> tuple[Any, tuple, Any]:
    """``(params, Adam state, loss before the update)`` after one step on ``ids``."""
    value, grads = jax.value_and_grad(loss)(params, ids)
    params, state = adam(params, grads, state)
    return params, state, value


class JaxSteps:
    """What the JAX references share: ``params`` (a list of dicts of device arrays, dualtape's
    layout) and ``value``, the last step's loss, not waited for."""

    params: Any
    value: Any = None

    def block(self) -> None:
        """Wait until the last step has finished."""
        if self.value is not None:
            self.value.block_until_ready()

    def parameters(self) -> list[dict[str, np.ndarray]]:
        """The current parameters as host arrays, dualtape's layout."""
        return [{k: np.asarray(v) for k, v in p.items()} for p in self.params]


class JaxCharModel(JaxSteps):
    """The model on JAX's CPU device from ``data``'s parameters; ``step()`` trains on the next
    window (``char_model.windows``) and returns the loss as a device array (not waited for:
    ``block()`` waits)."""

    def __init__(self, data: dict[str, Any]) -> None:
        dtype = data["config"].dtype
        if dtype == "float64":
            jax.config.update("jax_enable_x64", True)
        self.device = jax.devices("cpu")[0]
        params = [{k: np.asarray(v, dtype) for k, v in p.items()} for p in data["params"]]
        zeros = [{k: np.zeros_like(v) for k, v in p.items()} for p in params]
        self.params, self.state = jax.device_put(
            (params, (np.zeros((), dtype), zeros, [dict(z) for z in zeros])), self.device)
        self.next_window = char_model.windows(data)
        cfg = data["config"]
        ids = jax.ShapeDtypeStruct((cfg.seq_len + 1, cfg.batch), np.int32)
        self._step = jax.jit(train_step, donate_argnums=(0, 1)).lower(
            self.params, self.state, ids).compile()  # compiled once, here, not in a timed call

    def step(self) -> Any:
        """One training step on the next window; the loss before the update."""
        ids = jax.device_put(self.next_window().astype(np.int32), self.device)
        self.params, self.state, self.value = self._step(self.params, self.state, ids)
        return self.value
