"""Sinusoid: the elementwise sine."""

from __future__ import annotations

from typing import Any, NamedTuple

from .base import Array, Layer


class SinusoidTape(NamedTuple):
    """The input ``x``: the derivative is ``cos x``, which the output ``sin x`` cannot give
    (its sign is lost), so backward evaluates it; keeping ``cos x`` instead would cost every
    forward pass a cosine, tapes that never go back (``predict``) included."""

    x: Array


class Sinusoid(Layer):
    """Grenade's ``Sinusoid``: ``y = sin x`` elementwise, ``dx = cos x · dy``. Like the
    activations it takes any shape inside a ``Network`` and ``(batch, features)`` or
    ``(features,)`` on its own; the tape keeps the input, as Grenade's does."""

    kind = "Sinusoid"

    @classmethod
    def from_config(cls, config: dict[str, Any], dtype: str) -> Layer:
        return cls(**config)

    def _forward(self, xp: Any, x: Array) -> tuple[SinusoidTape, Array]:
        return SinusoidTape(x), xp.sin(x)

    def _backward(self, xp: Any, tape: SinusoidTape, dy: Array) -> tuple[dict[str, Array], Array]:
        return {}, xp.cos(tape.x) * dy
