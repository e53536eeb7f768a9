"""The choice of route of the recurrent training verbs, made before any work, and ``route``,
which says which route a call would take and why each faster one declines, without training
(issue 53 item 3). ``training`` takes these choices and puts each call's on the record
(``routes``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import array_api_compat
import numpy as np

from .kernels import cpu_path
from .kernels.overlap import offered, overlap_requested
from .last_step import full_length
from .losses import Loss
from .planned_backprop import INPUT_FORMS, descent_declines, grads_declines, planned
from .recurrent import RecurrentNetwork
from .routes import COMPILED_STACK, LAYERS, PLANNED, WHOLE_STEP, Route
from .switches import held

Array = Any
VERBS = ("train_recurrent", "backpropagate_sequence")
"""The verbs that choose a route (``train`` and ``backpropagate`` have the layers' only)."""
Declined = tuple[tuple[str, str], ...]


Choice = tuple[Any, str, Declined, Any, bool]
"""``planned_choice``'s answer, ``(plan, taken, declined, xs, single)``: the plan (None:
declined), the route taken (``""``: none), why each faster route declined, and the input as
the plan takes it (the network's preparation of it where the given one, a numpy array or a
list, is not of the plan's form; the layer path then takes it too) with whether it was one
sequence. A plain tuple: the main job makes it every step."""


def planned_choice(rnet: Any, xs: Any, tape: Any, ruled_out: str | None = None,
                   optimizer: Any = None) -> Choice:
    """The planned pass of ``train_recurrent`` with ``optimizer``, or of
    ``backpropagate_sequence`` (None): for ``train_recurrent`` ``WHOLE_STEP`` where the
    optimizer's step moves the weights inside the backward pass
    (``planned_backprop.planned_descent``), else ``PLANNED`` (the gradients into the buffers,
    then ``optimizer.step``); ``ruled_out``: a setting that declines both
    (``learn_initial_state``, ``need_dstate``). Where only the input's form declines it (one
    sequence, a list, another dtype or order), the plan takes the network's preparation of
    the input (the layer path's input) in C order: its bits are the layer path's for that
    C-order array."""
    faster = (PLANNED,) if optimizer is None else (WHOLE_STEP, PLANNED)
    single = False
    plan: Any = ruled_out or planned(rnet, xs, tape)
    if isinstance(plan, str):
        if plan in INPUT_FORMS and (type(xs) is np.ndarray or isinstance(xs, list | tuple)):
            _, prepared, single = rnet._prepare_sequence(xs)  # the network's preparation
            if type(prepared) is np.ndarray:  # (one sequence, a list, another dtype or
                prepared = np.ascontiguousarray(prepared)  # order) may fit, in C order
            if prepared is not xs:
                plan, xs = planned(rnet, prepared, tape), prepared
        if isinstance(plan, str):
            return (None, "", tuple((name, plan) for name in faster), xs, single)
    declined: Declined = ()
    if optimizer is not None:
        in_place = descent_declines(plan, optimizer)
        if in_place is None:
            return (plan, WHOLE_STEP, (), xs, single)
        declined = ((WHOLE_STEP, in_place),)
    why = grads_declines(plan)
    if why is None:
        if plan.stacked is not None:
            declined = (*declined, (COMPILED_STACK, plan.stacked))
        return (plan, PLANNED, declined, xs, single)
    return (None, "", (*declined, (PLANNED, why)), xs, single)


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
    learning = verb == "train_recurrent"
    ruled_out = ("learn_initial_state=True" if learning and learn_initial_state else
                 "need_dstate=True" if not learning and need_dstate else None)
    plan, taken, declined, _, _ = planned_choice(rnet, xs, tape, ruled_out,
                                                 optimizer if learning else None)
    if plan is not None:
        return Route(verb, taken, "compiled", declined, taken == PLANNED and overlap_requested())
    prepared = rnet._prepare_sequence(xs)[1]
    loops, slower = layer_loops(prepared)
    return Route(verb, LAYERS, loops, declined + slower, offered(prepared))
