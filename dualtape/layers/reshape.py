"""Reshape: the same elements in another example shape."""

from __future__ import annotations

import math
from typing import Any

from .base import Array
from .spatial import Setting, ShapeLayer, check_shape


class Reshape(ShapeLayer):
    """Grenade's ``Reshape``: each example of ``shape_in`` as one of ``shape_out`` (the same
    number of elements, row-major), e.g. ``Reshape((4, 13, 13), (676,))`` between a
    ``Pooling`` and a ``FullyConnected``, or ``Reshape((784,), (1, 28, 28))`` before a
    ``Convolution``. Backward reshapes the gradient back.

    Each shape is checked when assigned, after construction too; that the two hold as many
    elements is checked here and, for a layer edited since, by ``dualtape.save``."""

    kind = "Reshape"
    spatial = True
    shape_in = Setting(check_shape)
    shape_out = Setting(check_shape)

    def __init__(self, shape_in: Any, shape_out: Any) -> None:
        super().__init__()
        self.shape_in, self.shape_out = shape_in, shape_out
        if math.prod(self.shape_in) != math.prod(self.shape_out):
            raise ValueError(f"Reshape: shape_in {self.shape_in} has {math.prod(self.shape_in)} "
                             f"elements but shape_out {self.shape_out} has "
                             f"{math.prod(self.shape_out)}")

    def config(self) -> dict[str, Any]:
        return {"shape_in": self.shape_in, "shape_out": self.shape_out}

    @property
    def input_shape(self) -> tuple:
        return self.shape_in

    def output_shape(self, shape: tuple | None) -> tuple:
        return self.shape_out

    def move(self, xp: Any, x: Array) -> Array:
        return xp.reshape(x, (x.shape[0], *self.shape_out))

    def move_back(self, xp: Any, dy: Array, shape: tuple[int, ...]) -> Array:
        return xp.reshape(dy, shape)
