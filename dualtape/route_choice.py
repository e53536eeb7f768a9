"""The choice of route of the recurrent training verbs, made before any work, and ``route``,
which says which route a call would take and why each faster one declines, without training
(issue 53 item 3). ``training`` takes these choices and puts each call's on the record
(``routes``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import array_api_compat
import numpy as np

from .descent import fused_declines
from .kernels import cpu_path
from .last_step import full_length
from .losses import Loss
from .planned_backprop import descent_declines, grads_declines, planned
from .recurrent import RecurrentNetwork
from .routes import FUSED_SGD, LAYERS, PLANNED, WHOLE_STEP, Route
from .switches import held

Array = Any
VERBS = ("train_recurrent", "backpropagate_sequence")
"""The verbs that choose a route (``train`` and ``backpropagate`` have the layers' only)."""
Declined = tuple[tuple[str, str], ...]


def fused_choice(rnet: Any, optimizer: Any, prepared: Array, tape: Any, learn: bool
                 ) -> str | None:
    """Why ``train_recurrent`` of ``rnet`` over ``prepared`` (the input as the network
    prepared it) does not fuse its SGD step into the layers' backward passes
    (``descent.fused_declines``), or None."""
    if learn:
        return "learn_initial_state=True"
    return fused_declines(rnet, optimizer, prepared, tape == "full")


def planned_choice(rnet: Any, xs: Any, tape: Any, need_dstate: bool) -> Any:
    """``backpropagate_sequence``'s planned pass (``planned_backprop.planned`` and
    ``planned_grads``: the full tape only), or why it declines."""
    if need_dstate:
        return "need_dstate=True"
    if tape != "full":
        return "a checkpointed tape"
    plan = planned(rnet, xs)
    if isinstance(plan, str):
        return plan
    why = grads_declines(plan)
    return plan if why is None else why


def planned_step_choice(rnet: Any, xs: Any, optimizer: Any, tape: Any, learn: bool
                        ) -> tuple[Any, str, Declined]:
    """``train_recurrent``'s planned pass: ``(plan, route, declined)``, the route
    ``WHOLE_STEP`` where the optimizer's step moves the weights inside the backward pass
    (``planned_backprop.planned_descent``), else ``PLANNED`` (the gradients, then
    ``optimizer.step``), with why the faster one declined; or ``(None, "", declined)`` where
    neither applies."""
    why = ("learn_initial_state=True" if learn else "a checkpointed tape" if tape != "full"
           else planned(rnet, xs))
    if isinstance(why, str):
        return None, "", ((WHOLE_STEP, why), (PLANNED, why))
    in_place = descent_declines(why, optimizer)
    if in_place is None:
        return why, WHOLE_STEP, ()
    declined: Declined = ((WHOLE_STEP, in_place),)
    grads = grads_declines(why)
    if grads is None:
        return why, PLANNED, declined
    return None, "", (*declined, (PLANNED, grads))


def layer_loops(like: Array) -> tuple[str, Declined]:
    """The recurrent loops the layers run for arrays like ``like`` and, where those are not
    the compiled ones on numpy, why."""
    if type(like) is np.ndarray:
        kind, why = cpu_path()
        return kind, (() if why is None else (("compiled loops", why),))
    return ("cuda" if array_api_compat.is_cupy_array(like) else "generic"), ()


@held
def route(
    rnet: RecurrentNetwork,
    xs: Any,
    targets: Any,
    *,
    verb: str = "train_recurrent",
    optimizer: Any = None,
    state: Sequence[Array] | None = None,
    mask: Any = None,
    loss: str | Loss = "squared_error",
    tape: str | int = "full",
    need_dstate: bool = False,
    learn_initial_state: bool = False,
) -> Route:
    """The ``Route`` that ``verb`` (``"train_recurrent"`` or ``"backpropagate_sequence"``)
    of ``rnet`` with these arguments takes now, and why each faster route declines, decided
    as the call decides it, without training: no weight moves and the loss is not called (the
    fast paths' self-checks may run, and a planned pass's plan and gradient buffers be made,
    as the call would). What only the call can see is not foreseen: a non-finite input or
    loss, or a loss whose gradient is not C-ordered, sends it down the layers' route, as
    ``dualtape.last_route`` then says."""
    if verb not in VERBS:
        raise ValueError(f"route: verb must be one of {', '.join(VERBS)}, got {verb!r} "
                         "(train and backpropagate have one route, the layers')")
    if not isinstance(rnet, RecurrentNetwork):
        raise TypeError(f"route: expected a RecurrentNetwork, got a {type(rnet).__name__}")
    if verb == "train_recurrent" and not callable(getattr(optimizer, "step", None)):
        raise TypeError(f"route: train_recurrent's route needs its optimizer, got "
                        f"{optimizer!r}")
    targets, mask = full_length(rnet, xs, targets, mask, loss, "route")
    prepared = rnet._prepare_sequence(xs)[1]
    declined: Declined
    if verb == "train_recurrent":
        plan, taken, declined = planned_step_choice(rnet, xs, optimizer, tape,
                                                    learn_initial_state)
        if plan is not None:
            return Route(verb, taken, "compiled", declined)
        fused = fused_choice(rnet, optimizer, prepared, tape, learn_initial_state)
        if fused is None:
            return Route(verb, FUSED_SGD, "compiled", declined)
        declined = (*declined, (FUSED_SGD, fused))
    else:
        why = planned_choice(rnet, xs, tape, need_dstate)
        if not isinstance(why, str):
            return Route(verb, PLANNED, "compiled")
        declined = ((PLANNED, why),)
    loops, slower = layer_loops(prepared)
    return Route(verb, LAYERS, loops, declined + slower)
