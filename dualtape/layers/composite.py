"""What the composite layers share (``Sequential``, ``Merge``, ``Concat``): layers that run
other layers, Grenade's network-as-layer and branches.

A composite holds no parameters of its own (``params`` stays an empty ``ParamDict``): its
parameters are its layers', ``param_groups`` lists their dicts (one per leaf, depth first),
and its backward pass returns one gradient dict per group in that order, so ``net.params``
of a ``Network`` holding composites is the flat list of its leaves' dicts and optimizers step
them as any others. Its tape is a named tuple whose first field holds its layers' tapes
(``SequentialTape.tapes``, ``MergeTape.branches``): each leaf's backward checks the
``version`` its own tape kept, so a stale tape anywhere inside is refused.

Layers live here and networks in ``dualtape.network`` (which imports the layers, never the
reverse), so a ``Network`` becomes a layer through its ``as_layer()``, a ``Sequential`` of
the same layer objects: a branch may be given as a layer, a list of layers or a ``Network``.
"""

from __future__ import annotations

from typing import Any, ClassVar

from .base import Array, Layer, fits
from .chain import _words, check_distinct, check_same_params

COMPOSITE_DEPTH = 32
"""How deeply composites may nest (``dualtape.load`` refuses deeper files unread)."""


def as_layer(item: Any, owner: str, k: int, what: str = "layer") -> Layer:
    """``item`` as a layer: a layer itself, a list or tuple of layers as a ``Sequential``, a
    ``Network`` through its ``as_layer()``; else a one-line ``TypeError``."""
    if isinstance(item, Layer):
        return item
    if isinstance(item, list | tuple):
        from .sequential import Sequential

        return Sequential(item)
    convert = getattr(item, "as_layer", None)
    if callable(convert) and not isinstance(item, type):
        return convert()
    raise TypeError(f"{owner}: {what} {k} is a {type(item).__name__}, not a Layer, a list of "
                    "layers or a Network")


class Composite(Layer):
    """A layer made of ``children`` (feed-forward layers of one dtype and backend, none with
    parameters twice), checked at construction."""

    composite = True
    child_word: ClassVar[str] = "branch"
    child_words: ClassVar[str] = "branches"
    """What a child and the children are called in messages."""

    def __init__(self, children: list[Any]) -> None:
        super().__init__()
        self.children = [as_layer(c, self.kind, k, self.child_word)
                         for k, c in enumerate(children)]
        for k, child in enumerate(self.children):
            if child.recurrent:
                raise TypeError(f"{self.kind}: {self.child_word} {k} {child!r} is recurrent; "
                                "composite layers run feed-forward layers")
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
        return cls(*children)

    def __repr__(self) -> str:
        return f"{self.kind}({', '.join(map(repr, self.children))})"

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


class Branches(Composite):
    """What ``Merge`` and ``Concat`` share: two or more branches on one input, whose input
    shapes must agree (``common_input``) and whose outputs ``output_shape`` combines (checked
    at construction)."""

    def __init__(self, *branches: Any) -> None:
        if len(branches) < 2:
            raise ValueError(f"{self.kind} needs at least two branches, got {len(branches)}")
        super().__init__(list(branches))
        self._in = common_input(self.children, self.kind)
        self.output_shape(self._in)

    @property
    def input_shape(self) -> tuple | None:
        return self._in


def depth(layer: Layer) -> int:
    """How many composites ``layer`` nests (0 for a plain layer)."""
    return 1 + max(map(depth, layer.children)) if layer.composite else 0


def common_input(branches: list[Layer], owner: str) -> tuple | None:
    """The example shape all ``branches`` take (sizes where any states one), or None for any;
    a one-line ``ValueError`` when two cannot take the same input."""
    shape, source = None, 0
    for k, branch in enumerate(branches):
        wanted = branch.input_shape
        if wanted is None:
            continue
        if shape is None:
            shape, source = wanted, k
        elif not fits(shape, wanted):
            raise ValueError(f"{owner}: branch {k} {branch!r} takes {_words(wanted)} but branch "
                             f"{source} {branches[source]!r} takes {_words(shape)}; the "
                             "branches run on one input")
        else:
            shape = tuple(b if isinstance(a, str) else a for a, b in zip(shape, wanted,
                                                                         strict=True))
    return shape


def branch_outputs(branches: list[Layer], shape: tuple | None, owner: str) -> list:
    """What each branch gives for examples of ``shape`` (None: any)."""
    outputs = []
    for k, branch in enumerate(branches):
        try:
            outputs.append(branch.output_shape(shape))
        except ValueError as exc:
            raise ValueError(f"{owner}: branch {k} {branch!r}: {exc}") from None
    return outputs


def run_branches(branches: list[Layer], xp: Any, x: Array) -> tuple[tuple, list[Array]]:
    """Every branch on the same batch ``x``: ``(tapes, outputs)``."""
    tapes, outputs = [], []
    for branch in branches:
        tape, y = branch._forward(xp, x)
        tapes.append(tape)
        outputs.append(y)
    return tuple(tapes), outputs


def back_through_branches(branches: list[Layer], xp: Any, tapes: tuple, dys: list[Array]
                          ) -> tuple[list[dict[str, Array]], Array]:
    """Each branch back from its output's gradient: ``(grads, dx)``, the gradients in the
    order of ``param_groups`` and ``dx`` the sum of the branches' input gradients (they all
    read the same input)."""
    grads: list[dict[str, Array]] = []
    dx = None
    for branch, tape, dy in zip(branches, tapes, dys, strict=True):
        groups, d = branch._backward_groups(xp, tape, dy)
        grads.extend(groups)
        dx = d if dx is None else dx + d
    return grads, dx
