"""What the composite layers share (``Sequential``, ``Merge``, ``Concat``): layers that run
other layers, Grenade's network-as-layer and branches (``branches.py``).

A composite holds no parameters of its own (``params`` stays an empty ``ParamDict``): its
parameters are its layers', ``param_groups`` lists their dicts (one per leaf, depth first),
and its backward pass returns one gradient dict per group in that order, so ``net.params``
of a ``Network`` holding composites is the flat list of its leaves' dicts and optimizers step
them as any others. Its tape is a named tuple whose first field holds its layers' tapes
(``SequentialTape.tapes``, ``MergeTape.branches``): each leaf's backward checks the
``version`` its own tape kept, so a stale tape anywhere inside is refused.

Layers live here and networks in ``dualtape.network`` (which imports the layers, never the
reverse), so a ``Network`` becomes a layer through its ``as_layer()``, a ``Sequential`` of
the same layer objects: a branch may be given as a layer, a list of layers or a ``Network``
(``sequential.as_layer``; a ``Composite`` is handed its children as layers).
"""

from __future__ import annotations

from typing import Any, ClassVar, cast

from .base import Array, Layer
from .chain import check_distinct, check_same_params

COMPOSITE_DEPTH = 32
"""How deeply composites may nest (``dualtape.load`` refuses deeper files unread)."""


class Composite(Layer):
    """A layer made of ``children`` (feed-forward layers of one dtype and backend, none with
    parameters twice), checked at construction."""

    composite = True
    child_word: ClassVar[str] = "branch"
    child_words: ClassVar[str] = "branches"
    """What a child and the children are called in messages."""

    def __init__(self, children: list[Layer]) -> None:
        super().__init__()
        self.children = children
        for k, child in enumerate(self.children):
            if child.recurrent:
                raise TypeError(f"{self.kind}: {self.child_word} {k} {child!r} is recurrent; "
                                "composite layers run feed-forward layers")
            if child.takes_ids:
                raise TypeError(f"{self.kind}: {self.child_word} {k} {child!r} takes integer "
                                "ids; it goes first in a Network or RecurrentNetwork, not "
                                "inside a composite layer")
        check_same_params(self.leaves(), self.kind)
        check_distinct(self.leaves(), self.kind)
        self.keeps_input = any(c.keeps_input for c in self.children)
        if depth(self) > COMPOSITE_DEPTH:
            raise ValueError(f"{self.kind}: composites nest more than {COMPOSITE_DEPTH} deep")

    def leaves(self) -> list[Layer]:
        return [leaf for child in self.children for leaf in child.leaves()]

    def _reference(self) -> Array | None:
        return next((p for leaf in self.leaves() for p in leaf.params.values()), None)

    @property
    def dtype(self) -> str | None:
        return next((leaf.dtype for leaf in self.leaves() if leaf.dtype), None)

    @classmethod
    def from_children(cls, children: list[Layer]) -> Layer:
        """The composite of ``children`` (what ``dualtape.load`` rebuilds)."""
        # the composites that keep this default (Merge, Concat) take their layers as arguments
        return cls(*children)  # type: ignore[arg-type]

    def __repr__(self) -> str:
        return f"{self.kind}({', '.join(map(repr, self.children))})"

    # a composite's backward gives its leaves' gradient dicts, a list (the module docstring)
    def _backward(  # type: ignore[override]
        self, xp: Any, tape: Any, dy: Array
    ) -> tuple[list[dict[str, Array]], Array]:
        raise NotImplementedError

    def _backward_groups(self, xp: Any, tape: Any, dy: Array) -> tuple[list[dict], Array]:
        return self._backward(xp, tape, dy)

    def _check_tape(self, tape: Any, owner: str, k: int | None = None) -> None:
        super()._check_tape(tape, owner, k)
        inner = tape[0]
        if not isinstance(inner, tuple) or len(inner) != len(self.children):
            held = len(inner) if isinstance(inner, tuple) else "no"
            raise ValueError(f"{owner}: the {type(tape).__name__} holds {held} tapes but "
                             f"{self!r} has {len(self.children)} {self.child_words}; pass the "
                             "tape its forward returned")
        for child, t in zip(self.children, inner, strict=True):
            child._check_tape(t, f"{owner} (inside {self.kind})")


def depth(layer: Layer) -> int:
    """How many composites ``layer`` nests (0 for a plain layer)."""
    return 1 + max(map(depth, cast(Composite, layer).children)) if layer.composite else 0
