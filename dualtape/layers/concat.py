"""Concat: branches on one input, their outputs joined along the first axis of an example."""

from __future__ import annotations

from typing import Any, NamedTuple

from .base import Array
from .branches import (
    Branches,
    back_through_branches,
    branch_outputs,
    run_branches,
)
from .edges import fits, shape_text


class ConcatTape(NamedTuple):
    """The tapes of the branches, in order, and the ``sizes`` of their outputs along the
    joined axis (where backward splits the gradient)."""

    branches: tuple
    sizes: tuple[int, ...]


class Concat(Branches):
    """Grenade's ``Concat``: two or more branches (layers, lists of layers or ``Network``\\ s)
    run on the same input, and their outputs are joined along the first axis of an example:
    features for vectors ``(batch, features)``, channels for images ``(batch, channels,
    height, width)``. The outputs must agree on every other axis (checked at construction,
    and when the data comes for sizes left free); the input's gradient is the sum of the
    branches'."""

    kind = "Concat"

    def output_shape(self, shape: tuple | None) -> tuple | None:
        outputs = branch_outputs(self.children, shape, self.kind)
        if any(s is None for s in outputs):
            return None
        first = outputs[0]
        for k, s in enumerate(outputs[1:], start=1):
            if len(s) != len(first) or not fits(s[1:], first[1:]):
                raise ValueError(f"Concat: branch {k} {self.children[k]!r} gives examples of "
                                 f"shape {shape_text(s)} but branch 0 gives {shape_text(first)};"
                                 " Concat joins outputs that agree on all but their first axis")
        sizes = [s[0] for s in outputs]
        joined = sum(sizes) if all(isinstance(n, int) for n in sizes) else \
            ("features" if len(first) == 1 else "channels")
        rest = tuple(next((s[i] for s in outputs if not isinstance(s[i], str)), first[i])
                     for i in range(1, len(first)))
        return (joined, *rest)

    def _forward(self, xp: Any, x: Array) -> tuple[ConcatTape, Array]:
        tapes, outputs = run_branches(self.children, xp, x)
        first = tuple(outputs[0].shape)
        for k, y in enumerate(outputs[1:], start=1):
            if y.ndim != len(first) or tuple(y.shape[2:]) != first[2:] or y.shape[0] != first[0]:
                raise ValueError(f"Concat: branch {k} {self.children[k]!r} gives "
                                 f"{tuple(y.shape)} but branch 0 gives {first} for input "
                                 f"{tuple(x.shape)}; Concat joins outputs that agree on all "
                                 "but their first axis")
        sizes = tuple(int(y.shape[1]) for y in outputs)
        return ConcatTape(tapes, sizes), xp.concat(outputs, axis=1)

    # a list of gradient dicts, one per leaf (Composite._backward)
    def _backward(self, xp: Any, tape: ConcatTape, dy: Array  # type: ignore[override]
                  ) -> tuple[list[dict[str, Array]], Array]:
        parts, start = [], 0
        for size in tape.sizes:
            parts.append(dy[:, start:start + size, ...])
            start += size
        return back_through_branches(self.children, xp, tape.branches, parts)

    def _output_shape(self, tape: ConcatTape) -> tuple[int, ...]:
        shape = self.children[0]._output_shape(tape.branches[0])
        return (shape[0], sum(tape.sizes), *shape[2:])
