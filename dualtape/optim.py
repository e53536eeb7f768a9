"""Optimizers. Their state lives here, never in the layers.

``step(params, grads)`` takes a list of parameter dicts (``net.params``) and a matching list of
gradient dicts, and replaces each parameter by its updated value.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .backend import backend_of, dtype_name, from_host, namespace_of, to_numpy
from .layers.base import Array


def _check_number(owner: str, name: str, value: Any, low: float, high: float = math.inf) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value < high:
        raise ValueError(f"{owner}: {name} must be a number in [{low}, {high}), got {value!r}")
    return float(value)


class Optimizer:
    """Shared bookkeeping: per-parameter state, keyed ``(group index, name)``."""

    def __init__(self) -> None:
        self.state: dict[tuple[int, str], dict[str, Array]] = {}
        self.steps = 0

    def step(self, params: list[dict[str, Array]], grads: list[dict[str, Array]]) -> None:
        """Update every parameter in ``params`` in place (the dicts get new arrays)."""
        if len(params) != len(grads):
            raise ValueError(f"{type(self).__name__}: {len(params)} parameter groups but "
                             f"{len(grads)} gradient groups")
        self.steps += 1
        for k, (group, grad) in enumerate(zip(params, grads, strict=True)):
            if group.keys() != grad.keys():
                raise ValueError(f"{type(self).__name__}: group {k} has parameters "
                                 f"{sorted(group)} but gradients {sorted(grad)}")
            for name, w in group.items():
                g = grad[name]
                if tuple(g.shape) != tuple(w.shape):
                    raise ValueError(f"{type(self).__name__}: gradient of {name} in group {k} has "
                                     f"shape {tuple(g.shape)}, the parameter {tuple(w.shape)}")
                slot = self.state.setdefault((k, name), {})
                group[name] = self._update(namespace_of(w, g), w, g, slot)

    def _update(self, xp: Any, w: Array, g: Array, slot: dict[str, Array]) -> Array:
        raise NotImplementedError

    def state_dict(self) -> dict[str, np.ndarray]:
        """The state as host arrays named ``"k/param/slot"``, plus ``"steps"``."""
        flat = {f"{k}/{name}/{s}": to_numpy(a) for (k, name), slots in self.state.items()
                for s, a in slots.items()}
        flat["steps"] = np.asarray(self.steps)
        return flat

    def load_state_dict(
        self, flat: dict[str, np.ndarray], params: list[dict[str, Array]]
    ) -> None:
        """Restore ``state_dict()`` output for ``params`` (the groups it will update), on their
        backend and dtype; state that does not fit them raises ``ValueError``, changing nothing.
        """
        state: dict[tuple[int, str], dict[str, Array]] = {}
        for key, value in flat.items():
            if key == "steps":
                continue
            k, name, slot = _split_key(key)
            w = params[k].get(name) if 0 <= k < len(params) else None
            if w is None or tuple(w.shape) != np.shape(value):
                raise ValueError(f"{type(self).__name__}: state {key!r} of shape "
                                 f"{np.shape(value)} fits no parameter of the network")
            state.setdefault((k, name), {})[slot] = from_host(
                np.asarray(value, dtype=dtype_name(w.dtype)), backend_of(w))
        self.state, self.steps = state, int(flat.get("steps", 0))


def _split_key(key: str) -> tuple[int, str, str]:
    """``"k/param/slot"`` as ``(k, param, slot)``; any other key raises ``ValueError``."""
    parts = key.split("/")
    if len(parts) != 3 or not parts[0].isdigit():
        raise ValueError(f"optimizer state key {key!r} is not 'group/parameter/slot'")
    return int(parts[0]), parts[1], parts[2]


class SGD(Optimizer):
    """Grenade's rule: ``m' = momentum·m − rate·g``; ``w' = w + m' − rate·regulariser·w``."""

    def __init__(self, rate: float, momentum: float = 0.0, regulariser: float = 0.0) -> None:
        super().__init__()
        self.rate = _check_number("SGD", "rate", rate, 0.0)
        self.momentum = _check_number("SGD", "momentum", momentum, 0.0, 1.0)
        self.regulariser = _check_number("SGD", "regulariser", regulariser, 0.0)
        if self.rate == 0.0:
            raise ValueError("SGD: rate must be positive, got 0")

    def _update(self, xp: Any, w: Array, g: Array, slot: dict[str, Array]) -> Array:
        m = -self.rate * g
        if self.momentum:
            if "m" in slot:
                m = self.momentum * slot["m"] + m
            slot["m"] = m
        if self.regulariser:
            return w + m - (self.rate * self.regulariser) * w
        return w + m


class Adam(Optimizer):
    """Adam (Kingma & Ba) with bias correction."""

    def __init__(
        self, rate: float = 0.001, beta1: float = 0.9, beta2: float = 0.999, eps: float = 1e-8
    ) -> None:
        super().__init__()
        self.rate = _check_number("Adam", "rate", rate, 0.0)
        self.beta1 = _check_number("Adam", "beta1", beta1, 0.0, 1.0)
        self.beta2 = _check_number("Adam", "beta2", beta2, 0.0, 1.0)
        self.eps = _check_number("Adam", "eps", eps, 0.0)
        if self.rate == 0.0:
            raise ValueError("Adam: rate must be positive, got 0")

    def _update(self, xp: Any, w: Array, g: Array, slot: dict[str, Array]) -> Array:
        m = (1.0 - self.beta1) * g
        v = (1.0 - self.beta2) * g * g
        if "m" in slot:
            m = self.beta1 * slot["m"] + m
            v = self.beta2 * slot["v"] + v
        slot["m"], slot["v"] = m, v
        step_size = self.rate * math.sqrt(1.0 - self.beta2**self.steps) / (
            1.0 - self.beta1**self.steps
        )
        return w - step_size * m / (xp.sqrt(v) + self.eps)
