"""The JAX reference of the train group: dualtape's ``train_recurrent`` on Grenade's LSTMs, one
``jax.jit``.

A whole call is one compiled function, as a JAX user would write it: each LSTM as ``lax.scan``
of the cell over time (``jax_text.lstm_sequence``, its input projected for the whole sequence
first, as dualtape does), ½Σ(y − t)² averaged over the batch (dualtape's ``squared_error``),
``jax.value_and_grad``, and SGD at the group's rate; parameters are donated to the step. Its
threads, float64 and CPU device are as in ``jax_text.py``. Checked against dualtape in
``bench/test_references.py``. Imports JAX at module level: import this module only when JAX is
installed.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .jax_text import JaxSteps, lstm_sequence


def loss(params: list[dict[str, Any]], xs: Any, targets: Any) -> Any:
    """½Σ(y − t)² of the stack over ``xs`` ``(T, B, i)``, averaged over the batch."""
    h = xs
    for layer in params:
        h = lstm_sequence(layer, h)
    return 0.5 * jnp.sum((h - targets) ** 2) / xs.shape[1]


class JaxGrenadeNetwork(JaxSteps):
    """The train group's network on JAX's CPU device from host parameters (dualtape's layout);
    ``train_step(xs, targets)`` is one SGD step at ``rate`` and returns the loss before it as a
    device array (not waited for: ``block()`` waits)."""

    def __init__(self, params: list[dict[str, np.ndarray]], xs: np.ndarray, rate: float) -> None:
        if xs.dtype == np.float64:
            jax.config.update("jax_enable_x64", True)
        self.device = jax.devices("cpu")[0]
        self.params = jax.device_put([{k: np.asarray(v) for k, v in p.items()} for p in params],
                                     self.device)

        def step(params: Any, xs: Any, targets: Any) -> tuple[Any, Any]:
            value, grads = jax.value_and_grad(loss)(params, xs, targets)
            return jax.tree.map(lambda w, g: w - rate * g, params, grads), value

        shape = jax.ShapeDtypeStruct(xs.shape, xs.dtype)
        self._step = jax.jit(step, donate_argnums=(0,)).lower(
            self.params, shape, shape).compile()  # compiled once, here, not in a timed call

    def train_step(self, xs: Any, targets: Any) -> Any:
        """One SGD step on ``xs`` (device arrays); the loss before it."""
        self.params, self.value = self._step(self.params, xs, targets)
        return self.value
