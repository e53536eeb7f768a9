"""What chains of layers share, in a ``Network`` or inside a ``Sequential`` layer: the shape
check at construction, one dtype and backend for all parameters, no layer with parameters
twice, and running the layers forward and back over their tapes."""

from __future__ import annotations

from typing import Any

from ..backend import describe, dtype_name
from .base import Array, Layer
from .edges import fits, shape_text


def check_chain(layers: list[Layer], owner: str, shape: tuple | None = None
                ) -> tuple[tuple | None, tuple | None]:
    """Check that the layers' example shapes chain (``Layer.input_shape`` and
    ``output_shape``), from examples of ``shape`` when given; return the chain's
    ``(input_shape, output_shape)`` (None: any; the input shape is None when ``shape`` is
    given)."""
    first = previous = None
    for k, layer in enumerate(layers):
        wanted = layer.input_shape
        if wanted is not None and shape is not None:
            if not fits(shape, wanted):
                source = "it is given" if previous is None else \
                    f"layer {previous[0]} {previous[1]!r} gives"
                raise ValueError(f"{owner}: layer {k} {layer!r} takes {_words(wanted)} but "
                                 f"{source} "
                                 f"{_words(shape, bare=feature_count(wanted) is not None)}")
            wanted = tuple(a if isinstance(b, str) else b
                           for a, b in zip(shape, wanted, strict=True))
        if first is None and shape is None:
            first = wanted
        try:
            given = layer.output_shape(wanted if wanted is not None else shape)
        except ValueError as exc:
            raise ValueError(f"{owner}: layer {k} {layer!r}: {exc}") from None
        if given != shape:
            shape, previous = given, (k, layer)
    return first, shape


def _words(shape: tuple, bare: bool = False) -> str:
    """``4 features`` (``4`` when ``bare``) for a feature count, else ``examples of shape
    (3, height, width)``."""
    if shape == ():
        return "integer ids"
    if feature_count(shape) is None:
        return f"examples of shape {shape_text(shape)}"
    return str(shape[0]) if bare else f"{shape[0]} features"


def feature_count(shape: tuple | None) -> int | None:
    """The number of features of an example shape ``(n,)``; None for any other."""
    return shape[0] if shape is not None and len(shape) == 1 and isinstance(shape[0], int) \
        else None


def check_same_params(layers: list[Layer], owner: str) -> None:
    """All parameters of ``layers`` (leaves: layers that hold their own) share one dtype,
    backend and device."""
    first = None
    for layer in layers:
        for key, p in layer.params.items():
            if first is None:
                first = (layer, key, p)
                continue
            if dtype_name(p.dtype) != dtype_name(first[2].dtype) or describe(p) != describe(
                first[2]
            ):
                raise ValueError(
                    f"{owner}: {layer!r}.{key} is a {p.dtype} {describe(p)} but "
                    f"{first[0]!r}.{first[1]} is a {first[2].dtype} {describe(first[2])}; "
                    "build all layers with one dtype on one backend"
                )


def check_distinct(layers: list[Layer], owner: str) -> None:
    """No layer with parameters appears twice among ``layers`` (leaves): an optimizer would
    step its parameters once per appearance, each time with part of the gradient."""
    seen: set[int] = set()
    for layer in layers:
        if layer.params and id(layer) in seen:
            raise ValueError(f"{owner}: the layer {layer!r} appears more than once; shared "
                             "parameters are not supported (build one layer per place)")
        seen.add(id(layer))


def forward_chain(layers: list[Layer], xp: Any, x: Array) -> tuple[list[Any], Array]:
    """Run ``layers`` on the batch ``x``: ``(tapes, y)``, one tape per layer."""
    tapes = []
    for layer in layers:
        tape, x = layer._forward(xp, x)
        tapes.append(tape)
    return tapes, x


def backward_chain(layers: list[Layer], xp: Any, tapes: Any, dy: Array
                   ) -> tuple[list[dict[str, Array]], Array]:
    """Back through ``layers`` from their ``tapes`` and the output's gradient ``dy``:
    ``(grads, dx)``, ``grads`` one dict per parameter group, in the order of the layers'
    ``param_groups``."""
    per_layer: list[list[dict[str, Array]]] = [[] for _ in layers]
    for k in reversed(range(len(layers))):
        per_layer[k], dy = layers[k]._backward_groups(xp, tapes[k], dy)
    return [g for groups in per_layer for g in groups], dy
