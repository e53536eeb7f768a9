"""Logit: the logistic sigmoid, Grenade's ``Logit`` layer."""

from __future__ import annotations

from typing import Any

from .base import Activation, Array


def sigmoid(xp: Any, x: Array) -> Array:
    """σ(x) in its tanh form, ``0.5*tanh(0.5x) + 0.5``: no overflow, no clipping."""
    return 0.5 * xp.tanh(0.5 * x) + 0.5


class Logit(Activation):
    """``y = σ(x)``; the tape keeps ``y`` and the derivative is ``y(1 - y)``."""

    kind = "Logit"

    def activate(self, xp: Any, x: Array) -> Array:
        return sigmoid(xp, x)

    def derivative(self, xp: Any, y: Array, dy: Array) -> Array:
        return dy * y * (1.0 - y)
