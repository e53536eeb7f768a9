"""Crop: rows and columns cut from the edges of each channel of an image."""

from __future__ import annotations

from typing import Any

from ..backend import zeros_like_place
from .base import Array
from .pad import MarginLayer, grown, inner
from .spatial import IMAGE


class Crop(MarginLayer):
    """Grenade's ``Crop``: ``left`` and ``right`` columns and ``top`` and ``bottom`` rows cut
    from each channel of images (batch, channels, height, width), in Grenade's argument
    order; the inverse of ``Pad``. At least one row and column must remain. Backward pads the
    gradient with zeros."""

    kind = "Crop"

    def output_shape(self, shape: tuple | None) -> tuple:
        left, top, right, bottom = self.margins
        channels, height, width = shape or IMAGE
        for size, cut, what in ((height, top + bottom, "height"), (width, left + right, "width")):
            if not isinstance(size, str) and size <= cut:
                raise ValueError(f"cropping {cut} of the input's {what} {size} leaves nothing")
        return (channels, grown(height, -(top + bottom)), grown(width, -(left + right)))

    def move(self, xp: Any, x: Array) -> Array:
        return x[inner(tuple(x.shape), self.margins)]

    def move_back(self, xp: Any, dy: Array, shape: tuple[int, ...]) -> Array:
        dx = zeros_like_place(shape, dy)
        dx[inner(shape, self.margins)] = dy
        return dx
