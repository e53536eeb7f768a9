"""Pad: zeros around each channel of an image."""

from __future__ import annotations

from typing import Any

from ..backend import zeros_like_place
from .base import Array
from .spatial import IMAGE, ShapeLayer, check_pair


def inner(shape: tuple[int, ...], margins: tuple[int, int, int, int]) -> tuple[slice, ...]:
    """The index of the part of an image batch of ``shape`` inside ``margins``."""
    left, top, right, bottom = margins
    return (slice(None), slice(None), slice(top, shape[2] - bottom),
            slice(left, shape[3] - right))


class MarginLayer(ShapeLayer):
    """A layer that adds or cuts ``margins`` ``(left, top, right, bottom)`` of images, each a
    non-negative integer (Grenade's argument order)."""

    spatial = True

    def __init__(self, left: int, top: int, right: int, bottom: int) -> None:
        super().__init__()
        (left, top), (right, bottom) = (
            check_pair(self.kind, "left and top", (left, top), 0),
            check_pair(self.kind, "right and bottom", (right, bottom), 0))
        self.margins = (left, top, right, bottom)

    def config(self) -> dict[str, Any]:
        return dict(zip(("left", "top", "right", "bottom"), self.margins, strict=True))

    @property
    def input_shape(self) -> tuple:
        return IMAGE


class Pad(MarginLayer):
    """Grenade's ``Pad``: ``left`` and ``right`` columns and ``top`` and ``bottom`` rows of
    zeros around each channel of images (batch, channels, height, width), in Grenade's
    argument order (torch's ``pad`` takes ``(left, right, top, bottom)``). Before a
    ``Convolution`` it gives torch's ``conv2d(padding=...)``. Backward crops the gradient."""

    kind = "Pad"
    keeps_input = False

    def output_shape(self, shape: tuple | None) -> tuple:
        left, top, right, bottom = self.margins
        channels, height, width = shape or IMAGE
        return (channels, grown(height, top + bottom), grown(width, left + right))

    def move(self, xp: Any, x: Array) -> Array:
        y = zeros_like_place((x.shape[0], *self.output_shape(tuple(x.shape[1:]))), x)
        y[inner(tuple(y.shape), self.margins)] = x
        return y

    def move_back(self, xp: Any, dy: Array, shape: tuple[int, ...]) -> Array:
        return dy[inner(tuple(dy.shape), self.margins)]


def grown(size: int | str, by: int) -> int | str:
    """``size + by``, or a free axis's name as it is."""
    return size if isinstance(size, str) else size + by
