"""Relu: the rectified linear unit."""

from __future__ import annotations

from typing import Any

from .base import Activation, Array


class Relu(Activation):
    """``y = max(x, 0)``; the tape keeps ``y`` and the gradient passes where ``y > 0``.

    NaN propagates (as in ``numpy.maximum``), so a NaN input cannot turn into a finite loss.
    """

    kind = "Relu"

    def activate(self, xp: Any, x: Array) -> Array:
        return xp.where(x < 0, xp.zeros_like(x), x)

    def derivative(self, xp: Any, y: Array, dy: Array) -> Array:
        return xp.where(y > 0, dy, xp.zeros_like(dy))
