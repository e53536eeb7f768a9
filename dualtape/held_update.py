"""An optimizer's step kept for the steps after it (issue 30: a training step of fewer Python
calls): while they are given the very same arrays, a step checks their identity instead of
their shapes, dtypes and places, and updates them with one compiled call per
``kernels.numba_optim.BATCH`` parameters instead of one call, and its checks, per parameter.
``optim.Optimizer.step`` makes and uses it; the update is the compiled one, the same bits."""

from __future__ import annotations

from collections.abc import Callable
from itertools import chain
from operator import methodcaller
from typing import Any

from .kernels import cpu_path
from .layers.params import ParamDict

Array = Any


class HeldUpdate:
    """The compiled in-place update of ``params`` by ``grads`` (``runs``: the compiled loops
    and one batch of flat views for each call), as a full step planned it, with the optimizer
    ``state`` it read. ``serves`` says whether a later step is given the same: the same group
    dicts holding the same array objects under the same names, the gradients the same arrays
    under those names, the state the same slot arrays, the weights and slots still writeable,
    and the compiled loops still chosen (``DUALTAPE_JIT``, ``DUALTAPE_FUSED``)."""

    def __init__(self, params: list[dict[str, Array]], grads: list[dict[str, Array]],
                 state: dict[Any, dict[str, Array]], runs: list[tuple[Any, Any]]) -> None:
        self.groups = list(params)
        self.names = _names(params), _names(grads)
        weights, self.grad_arrays = group_values(params), group_values(grads)
        self.arrays = weights + self.grad_arrays
        self.slots = list(state.values())
        self.slot_arrays = group_values(self.slots)
        self.written = weights + self.slot_arrays
        self.stamped = [group for group in params if isinstance(group, ParamDict)]
        self.all_stamped = len(self.stamped) == len(self.groups)
        self.versions: list[int] = []
        """The stamps ``run`` left on the parameter dicts: while they are still theirs, no
        array was set in or taken out of them since."""
        self.runs = runs

    def serves(self, params: Any, grads: Any, state: dict[Any, dict[str, Array]]) -> bool:
        """Whether ``run`` is this step of ``params`` by ``grads`` with ``state``; False for
        anything else, malformed input included (the full step then says what is wrong)."""
        try:
            if not (cpu_path()[0] == "compiled" and same_objects(params, self.groups)):
                return False
            if self.all_stamped and [group.version for group in params] == self.versions:
                same = (same_objects(group_values(grads), self.grad_arrays)
                        and _names(grads) == self.names[1])
            else:  # changed since this step ran (or never ran): every array is looked at
                same = (same_objects(group_values(params) + group_values(grads), self.arrays)
                        and (_names(params), _names(grads)) == self.names)
            return (same and same_objects(list(state.values()), self.slots)
                    and same_objects(group_values(self.slots), self.slot_arrays)
                    and all([a.flags.writeable for a in self.written]))
        except (AttributeError, TypeError):
            return False

    def run(self, update: Callable[[Any, Any], None]) -> None:
        """Stamp the parameter dicts as changed (their tapes go stale), then ``update(loops,
        batch)`` for each compiled call."""
        for group in self.stamped:
            group.touch()
        self.versions = [group.version for group in self.stamped]
        for loops, batch in self.runs:
            update(loops, batch)


def group_values(groups: Any) -> list[Array]:
    """The arrays of the mappings ``groups``, in order (the loop in C: a step asks this for
    every group it is given)."""
    return list(chain.from_iterable(map(_VALUES, groups)))


def _names(groups: Any) -> list[str]:
    return list(chain.from_iterable(groups))


_VALUES = methodcaller("values")


def same_objects(found: Any, held: list[Any]) -> bool:
    """Whether ``found`` holds exactly the objects of ``held``, in order (by ``id``: both
    lists hold their objects alive while they are compared, so equal ids are one object)."""
    return list(map(id, found)) == list(map(id, held))
