"""Tanh: the hyperbolic tangent layer."""

from __future__ import annotations

from typing import Any

from .base import Activation, Array


class Tanh(Activation):
    """``y = tanh(x)``; the tape keeps ``y`` and the derivative is ``1 - y²``."""

    kind = "Tanh"

    def activate(self, xp: Any, x: Array) -> Array:
        return xp.tanh(x)

    def derivative(self, xp: Any, y: Array, dy: Array) -> Array:
        return dy * (1.0 - y * y)
