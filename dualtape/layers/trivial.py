"""Trivial: the identity."""

from __future__ import annotations

from typing import Any

from .base import Array
from .spatial import ShapeLayer


class Trivial(ShapeLayer):
    """Grenade's ``Trivial``: the output is the input and the gradient passes unchanged. Like
    the activations it takes any shape inside a ``Network`` and ``(batch, features)`` or
    ``(features,)`` on its own. The tape keeps only the input's shape."""

    kind = "Trivial"

    def move(self, xp: Any, x: Array) -> Array:
        return x

    def move_back(self, xp: Any, dy: Array, shape: tuple[int, ...]) -> Array:
        return dy
