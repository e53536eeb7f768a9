"""Which route a training call took, on the record (issue 53 item 3): for each network and
verb, the route of its latest call and why each faster one declined, so that users and tests
can read what ran instead of guessing; ``DUALTAPE_TRACE=1`` prints one line to stderr for
each new choice (a route or a reason that differs from that network's and verb's last)."""

from __future__ import annotations

import sys
import weakref
from typing import Any, NamedTuple

from .switches import trace_on

WHOLE_STEP = "whole-step"
"""``train_recurrent``'s planned pass with the backward pass and plain SGD step of the whole
stack in one call (``planned_backprop.planned_descent``)."""
PLANNED = "planned"
"""The backward pass of the whole stack into the gradient buffers, its checks made once per
network and input form: one compiled call for LSTMs, else the layers' own functions
(``backpropagate_sequence``'s; ``train_recurrent``'s, then ``optimizer.step``)."""
COMPILED_STACK = "compiled stack"
"""The planned pass's one compiled call for a stack of LSTMs: declined, with why, where the
pass runs the layers' own functions (``planned_backprop._Plan.stacked``)."""
LAYERS = "layers"
"""Each layer's own backward pass (then the optimizer's step): the reference route."""


class Route(NamedTuple):
    """A call's route: the ``verb``, the route ``taken``, the recurrent ``loops`` the layers
    run (``"compiled"``, ``"ufuncs"``, ``"generic"`` or ``"cuda"``), for each faster route or
    loop that was not taken (and, under ``planned``, the ``"compiled stack"``), fastest
    first, ``(name, why)``, and whether the weight
    gradients' products were offered to a second core (``second_core``: inside
    ``overlap_gradients()``, on numpy with the fast paths on; each one large enough is handed
    over, ``kernels.overlap``)."""

    verb: str
    taken: str
    loops: str
    declined: tuple[tuple[str, str], ...] = ()
    second_core: bool = False

    def __str__(self) -> str:
        why = "; ".join(f"{name}: {reason}" for name, reason in self.declined)
        return f"{self.verb}: {self.taken}, {self.loops} loops" + (
            ", weight gradients on a second core" if self.second_core else "") + (
            f" (declined {why})" if why else "")


_LAST: dict[tuple[int, str], Route] = {}
"""The latest route of each live network (by ``id``) and verb."""


def record(owner: Any, verb: str, taken: str, loops: str,
           declined: tuple[tuple[str, str], ...], second_core: bool) -> None:
    """Put ``owner``'s call of ``verb`` on the record as ``Route(verb, taken, loops,
    declined, second_core)``; a new choice is printed under ``DUALTAPE_TRACE`` (a bad value
    raises ``ValueError`` naming it). Costs a lookup when the choice is kept."""
    key = (id(owner), verb)
    last = _LAST.get(key)
    if last is not None and last.taken == taken and last.loops == loops and (
            last.declined == declined and last.second_core == second_core):
        return
    route = Route(verb, taken, loops, declined, second_core)
    if trace_on():
        print(f"dualtape route: {route}", file=sys.stderr)
    if last is None:
        weakref.finalize(owner, _LAST.pop, key, None)
    _LAST[key] = route


def last_route(owner: Any, verb: str) -> Route | None:
    """The route of ``owner``'s latest call of ``verb`` (None: no call yet)."""
    return _LAST.get((id(owner), verb))
