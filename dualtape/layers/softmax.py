"""Softmax over the feature axis."""

from __future__ import annotations

from typing import Any

from .base import Activation, Array


class Softmax(Activation):
    """``y = exp(x - max x) / Σ exp(x - max x)`` per row; the tape keeps ``y``.

    Backward is O(n), not a Jacobian: ``dx = y * (dy - Σ y*dy)``.
    """

    kind = "Softmax"

    def activate(self, xp: Any, x: Array) -> Array:
        if x.shape[-1] == 0:
            raise ValueError("Softmax: the input has 0 features; a softmax needs at least one")
        e = xp.exp(x - xp.max(x, axis=-1, keepdims=True))
        return e / xp.sum(e, axis=-1, keepdims=True)

    def derivative(self, xp: Any, y: Array, dy: Array) -> Array:
        return y * (dy - xp.sum(y * dy, axis=-1, keepdims=True))
