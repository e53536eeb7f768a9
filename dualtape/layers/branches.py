"""What ``Merge`` and ``Concat`` share: two or more branches (layers, lists of layers or
networks, ``sequential.as_layer``) run on one input."""

from __future__ import annotations

from typing import Any

from .base import Array, Layer
from .chain import _words
from .composite import Composite
from .edges import fits
from .sequential import as_layers


class Branches(Composite):
    """What ``Merge`` and ``Concat`` share: two or more branches on one input, whose input
    shapes must agree (``common_input``) and whose outputs ``output_shape`` combines (checked
    at construction)."""

    def __init__(self, *branches: Any) -> None:
        if len(branches) < 2:
            raise ValueError(f"{self.kind} needs at least two branches, got {len(branches)}")
        super().__init__(as_layers(branches, self.kind, self.child_word))
        self._in = common_input(self.children, self.kind)
        self.output_shape(self._in)

    @property
    def input_shape(self) -> tuple | None:
        return self._in


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
