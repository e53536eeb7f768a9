"""Elu: the exponential linear unit (alpha = 1), as Grenade's ``Elu``."""

from __future__ import annotations

from typing import Any

from .base import Activation, Array


class Elu(Activation):
    """``y = x`` for ``x > 0``, else ``exp(x) - 1``; the tape keeps ``y``.

    The derivative is 1 where ``y > 0`` and ``exp(x) = y + 1`` elsewhere, so backward needs no exp.
    """

    kind = "Elu"

    def activate(self, xp: Any, x: Array) -> Array:
        negative = xp.expm1(xp.where(x > 0, xp.zeros_like(x), x))
        return xp.where(x > 0, x, negative)

    def derivative(self, xp: Any, y: Array, dy: Array) -> Array:
        return xp.where(y > 0, dy, dy * (y + 1.0))
