"""Sequential: layers run one after another as one layer, Grenade's network-as-layer; and
``as_layer``, how a composite takes a list of layers or a ``Network`` as one layer."""

from __future__ import annotations

from typing import Any, NamedTuple

from .base import Array, Layer
from .chain import backward_chain, check_chain, forward_chain
from .composite import Composite


def as_layer(item: Any, owner: str, k: int, what: str) -> Layer:
    """``item`` as a layer: a layer itself, a list or tuple of layers as a ``Sequential``, a
    ``Network`` through its ``as_layer()``; else a one-line ``TypeError`` naming it ``what``
    ``k`` of ``owner``."""
    if isinstance(item, Layer):
        return item
    if isinstance(item, list | tuple):
        return Sequential(item)
    convert = getattr(item, "as_layer", None)
    if callable(convert) and not isinstance(item, type):
        return convert()
    raise TypeError(f"{owner}: {what} {k} is a {type(item).__name__}, not a Layer, a list of "
                    "layers or a Network")


def as_layers(items: Any, owner: str, what: str) -> list[Layer]:
    """Each of ``items`` ``as_layer``, named ``what`` and its index in messages."""
    return [as_layer(item, owner, k, what) for k, item in enumerate(items)]


class SequentialTape(NamedTuple):
    """The tapes of the layers, in order."""

    tapes: tuple


class Sequential(Composite):
    """``layers`` chained as one layer (a ``Network`` inside a ``Network``, or a branch of a
    ``Merge`` or ``Concat``), their shapes checked at construction as a ``Network`` checks
    them. ``Network.as_layer()`` gives one of the network's own layer objects (the same
    parameters); a list of layers given as a branch becomes one. Its parameters, tapes and
    gradients are its layers'."""

    kind = "Sequential"
    child_word, child_words = "layer", "layers"

    def __init__(self, layers: Any) -> None:
        if not isinstance(layers, list | tuple) or not layers:
            raise ValueError(f"Sequential needs a non-empty list of layers, got {layers!r}")
        super().__init__(as_layers(layers, self.kind, self.child_word))
        self._in, self._out = check_chain(self.children, self.kind)

    @classmethod
    def from_children(cls, children: list[Layer]) -> Layer:
        return cls(children)

    def __repr__(self) -> str:
        return f"Sequential([{', '.join(map(repr, self.children))}])"

    @property
    def input_shape(self) -> tuple | None:
        return self._in

    def output_shape(self, shape: tuple | None) -> tuple | None:
        return self._out if shape is None else check_chain(self.children, self.kind, shape)[1]

    def _forward(self, xp: Any, x: Array) -> tuple[SequentialTape, Array]:
        tapes, y = forward_chain(self.children, xp, x)
        return SequentialTape(tuple(tapes)), y

    # a list of gradient dicts, one per leaf (Composite._backward)
    def _backward(self, xp: Any, tape: SequentialTape, dy: Array  # type: ignore[override]
                  ) -> tuple[list[dict[str, Array]], Array]:
        return backward_chain(self.children, xp, tape.tapes, dy)

    def _output_shape(self, tape: SequentialTape) -> tuple[int, ...]:
        return self.children[-1]._output_shape(tape.tapes[-1])
