"""Merge: branches on one input, their outputs summed (a residual block's join)."""

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


class MergeTape(NamedTuple):
    """The tapes of the branches, in order."""

    branches: tuple


class Merge(Branches):
    """Grenade's ``Merge``: two or more branches (layers, lists of layers or ``Network``\\ s)
    run on the same input, and their outputs, all of one shape, are added. The input's
    gradient is the sum of the branches'. A residual block is ``Merge([Pad(1, 1, 1, 1),
    Convolution(c, c, 3), Relu(), ...], Trivial())``. Branches whose outputs cannot have one
    shape fail at construction; sizes left free are compared when the data comes."""

    kind = "Merge"

    def output_shape(self, shape: tuple | None) -> tuple | None:
        outputs = branch_outputs(self.children, shape, self.kind)
        known = [(k, s) for k, s in enumerate(outputs) if s is not None]
        result = None
        for k, s in known:
            if result is not None and not fits(s, result):
                raise ValueError(f"Merge: branch {k} {self.children[k]!r} gives examples of "
                                 f"shape {shape_text(s)} but branch {known[0][0]} gives "
                                 f"{shape_text(result)}; Merge adds outputs of one shape")
            result = s if result is None else tuple(
                b if isinstance(a, str) else a for a, b in zip(result, s, strict=True))
        return result

    def _forward(self, xp: Any, x: Array) -> tuple[MergeTape, Array]:
        tapes, outputs = run_branches(self.children, xp, x)
        for k, y in enumerate(outputs[1:], start=1):
            if tuple(y.shape) != tuple(outputs[0].shape):
                raise ValueError(f"Merge: branch {k} {self.children[k]!r} gives "
                                 f"{tuple(y.shape)} but branch 0 gives "
                                 f"{tuple(outputs[0].shape)} for input {tuple(x.shape)}; "
                                 "Merge adds outputs of one shape")
        total = outputs[0]
        for y in outputs[1:]:
            total = total + y
        return MergeTape(tapes), total

    # a list of gradient dicts, one per leaf (Composite._backward)
    def _backward(self, xp: Any, tape: MergeTape, dy: Array  # type: ignore[override]
                  ) -> tuple[list[dict[str, Array]], Array]:
        return back_through_branches(self.children, xp, tape.branches, [dy] * len(tape.branches))

    def _output_shape(self, tape: MergeTape) -> tuple[int, ...]:
        return self.children[0]._output_shape(tape.branches[0])
