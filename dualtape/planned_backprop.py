"""The planned pass of a recurrent stack on numpy: both training verbs in few Python-level
calls (issue 30: a training step of few calls; issue 53: one planned stack). Its checks are
made once per network, input form and tape (``planned``), before the forward pass, so a
decline costs nothing and the loss is called once; then the layers' own forward functions and
the loss (``planned_forward``), then the backward pass into the gradient buffers
(``planned_grads``).

On the compiled stack (``LSTM`` layers with at most a ``FullyConnected`` on top, the full
tape) every layer's backward pass is one compiled call, which either writes the gradients
(``kernels.numba_grads``, the layer path's bits, ``tests/test_planned_backprop.py``; more than
one row; under ``overlap_gradients`` each layer's weight gradients go to a second core) or,
for plain SGD of LSTMs fed (T, B, i), moves the weights in place (``planned_descent``:
``kernels.numba_descent``, the layer path's step to rounding, where the optimizer says it
can: ``Optimizer._in_backward_declines``). Off it (``StandardLSTM`` or ``GRU`` layers, an
``Embedding`` first, a checkpointed tape: ``_Plan.stacked`` says which), the backward pass is
the layers' own (``checkpointing.sequence_backward``), the layer path's bits by construction
(``tests/test_planned_layers.py``), without the layer path's checks of each call.

It applies on numpy with the compiled loops (and the fast paths on: ``DUALTAPE_JIT``,
``DUALTAPE_FUSED``) to a network of ``LSTM``, ``StandardLSTM`` or ``GRU`` layers (an
``Embedding`` first or not) with at most one ``FullyConnected`` on top, fed ids ((T, B)
int64: the Embedding's, or the first layer's one-hot rows, as ``train-text`` feeds them) or
(T, B, i) of the weights' dtype (C order; any other input the network prepares into one of
these forms first: ``route_choice.planned_choice``), with no initial states' gradient (a
given state only starts the forward pass, a mask only weighs the loss). Anything else, ids
outside the vocabulary, or a read-only parameter, takes the layer path, which checks and says
what is wrong. So does a loss gradient that is not C-ordered, for the gradients (the layer
path's products of a strided one round otherwise), after the loss was called: ``objective``
(``training.LossCall``) then gives the layer path its first result (the same outputs, bit for
bit), so that the loss is called once; the step in place takes a C-ordered copy of it.
"""

from __future__ import annotations

import math
import weakref
from typing import Any, NamedTuple

import numpy as np

from .backend import namespace_of
from .checkpointing import segment_length, sequence_backward, sequence_forward
from .held_update import group_values, same_objects
from .kernels import (
    compiled_declined,
    cpu_path,
    grads_loops,
    numba_descent,
    scatter_loops,
    sequence_path,
    stack_loops,
)
from .kernels.flush import flushed
from .kernels.lstm_sequence import forward_sequence
from .kernels.numba_grads import StackGrads, check_compiled, ids_within, scratch_sizes, stack_grads
from .kernels.numba_lstm import NumbaLSTM
from .kernels.overlap import call_later, overlapping
from .kernels.scatter import check_compiled as check_scatter
from .layers.edges import restore
from .layers.embedding import Embedding
from .layers.fully_connected import FullyConnected
from .layers.gated import GatedRecurrent
from .layers.gru import GRU
from .layers.linear_algebra import project_sequence
from .layers.lstm import JOIN_UP_TO, LSTM, fused_disagreement
from .layers.standard_lstm import StandardLSTM
from .losses import mask_weights
from .optim import Optimizer
from .recurrent import gradient_buffers, kept_gradient_buffers
from .switches import held_choice

Array = Any


NOT_NUMPY = "the input is not a numpy array"
OTHER_DTYPE = "the input's dtype is not the weights'"
OTHER_FORM = "the input is not (T, B) int64 ids or (T, B, i), C order, not empty"
INPUT_FORMS = (NOT_NUMPY, OTHER_DTYPE, OTHER_FORM)
"""``planned``'s reasons that the network's own preparation of the input may take away (one
sequence, a list, another dtype or order: ``route_choice.planned_choice``)."""


def planned(rnet: Any, xs: Any, tape: Any = "full") -> _Plan | str:
    """The plan of ``rnet`` over ``xs`` with the tape policy ``tape`` (its checks made once
    per network, input form and tape), or why no planned pass applies (the module's docstring
    says where); moves nothing."""
    if type(xs) is not np.ndarray:
        return NOT_NUMPY
    every = None if tape == "full" or not xs.ndim else segment_length(tape, xs.shape[0])
    plan = _PLANS.get(rnet)
    if plan is None or not plan.fits(rnet, xs, every):
        plan = _Plan.of(rnet, xs, every)
        if isinstance(plan, str):
            return plan
        _PLANS[rnet] = plan
    like = plan.arrays[0]
    if plan.stacked is None:
        cell = held_choice(("planned", like.dtype), lambda: _compiled_cell(like))
        if type(cell) is str:
            return cell
        plan.cell = cell
    else:
        why = held_choice(("planned layers", like.dtype, plan.kinds),
                          lambda: _layer_loops_declined(plan.layers, like))
        if why is not None:
            return why
    if plan.by_id and not ids_within(xs, plan.vocab):
        return "an id outside the vocabulary"
    return plan


def grads_declines(plan: _Plan) -> str | None:
    """Why ``planned_grads`` does not take ``plan``'s pass, or None."""
    if plan.stacked is not None:  # the layers' own functions: every form they take
        return None
    if plan.rows < 2:  # numpy's products of one row are gemv's: other bits than the kernel's
        return "one row (T x B = 1)"
    W0 = plan.weights[0][0]
    return held_choice(("planned grads", W0.dtype, plan.by_id),
                       lambda: _grads_declined(W0, plan.by_id))


def descent_declines(plan: _Plan, optimizer: Any) -> str | None:
    """Why ``planned_descent`` does not move ``plan``'s weights by ``optimizer``'s step inside
    the backward pass (plain SGD of LSTMs only, fed real-valued inputs), or None."""
    if not isinstance(optimizer, Optimizer):  # a wrapper such as DataParallel steps otherwise
        return f"{type(optimizer).__name__} is not SGD itself"
    why = optimizer._in_backward_declines() or plan.stacked
    if why is not None:
        return why
    if plan.top is not None:
        return "a FullyConnected on top"
    if plan.by_id:
        return "ids for input"
    W0 = plan.weights[0][0]
    return held_choice(("planned descent", W0.dtype), lambda: _descent_declined(W0))


class Pass(NamedTuple):
    """``planned_forward``'s forward pass and loss: the loss, whether the input is finite,
    the tapes (on the compiled stack each LSTM's ``(cells, gates, outputs)``, else the
    layers' tape of the network), the loss's gradient of the network's outputs, and the
    recurrent layers' last states in the form of the input (``(s,)`` each for one
    sequence)."""

    value: Array
    finite: bool
    tapes: Any
    dys: Array
    states: list[Array]


def planned_forward(plan: _Plan, rnet: Any, xs: Any, targets: Any, objective: Any,
                    mask: Any, state: Any, stepped: bool, single: bool) -> Pass | None:
    """The forward pass of ``rnet`` over ``xs`` from ``state`` (None: zeros; checked as the
    layer path checks it) and its loss by ``objective(np, ys, targets[, weights])`` (a
    ``training.LossCall``; ``weights`` ``losses.mask_weights`` of ``mask`` where one is given)
    by ``plan`` (``planned``'s); or None, having changed nothing, where the loss's gradient is
    not C-ordered (numpy's products of a strided one round otherwise). ``stepped``: the pass
    goes on to ``planned_descent``, which looks at the input itself, so a finite loss needs
    no look here, and takes a C-ordered copy of such a gradient (its step agrees with the
    layer path's to rounding, not bit for bit). ``single``: ``xs`` is one sequence's, prepared
    with a batch axis (``route_choice.planned_choice``)."""
    steps, batch = xs.shape[:2]
    starts = plan.zeros if state is None else rnet._check_states(state, batch)
    tapes: Any
    if plan.stacked is not None:
        tapes, ends, h = sequence_forward(plan.layers, np, starts, xs, plan.every)
    else:
        tapes, h = [], xs
        if state is not None:
            starts = [np.ascontiguousarray(s) for s in starts]
        with flushed():  # subnormals flushed, as on the layer path (kernels.flush)
            for (W, U, b), start in zip(plan.weights, starts, strict=True):
                tapes.append(forward_sequence(np, plan.cell, U, start,
                                              project_sequence(np, h, W, b)))
                h = tapes[-1][2]
            if plan.top is not None:
                h = plan.top._forward(np, h.reshape(steps * batch, -1))[1].reshape(
                    steps, batch, -1)
        ends = [cells[-1] for cells, _, _ in tapes]
    weights = () if mask is None else (mask_weights(mask, steps, batch, h),)
    value, dys = objective(np, h, targets, *weights)
    if not dys.flags.c_contiguous:
        if not stepped:
            return None
        dys = np.ascontiguousarray(dys)
    finite = plan.by_id or stepped and math.isfinite(value) or bool(np.isfinite(xs).all())
    return Pass(value, finite, tapes, dys, [restore(s, True) for s in ends] if single else ends)


def planned_grads(plan: _Plan, xs: Array, done: Pass, handing: bool
                  ) -> list[dict[str, Array]]:
    """The gradients of ``done`` (``planned_forward``'s pass of ``xs``), every layer's backward
    pass in one compiled call into ``recurrent.gradient_buffers``, where ``grads_declines``
    said None. ``handing`` (the caller's ``overlap_requested()``, put on the record): the same
    compiled pieces run one by one, each layer's weight gradients on a second core while the
    pass goes on to the layer below (``kernels.overlap``): the same bits. Off the compiled
    stack, the layers' own backward pass (``checkpointing.sequence_backward``), which hands
    over its products itself."""
    if plan.stacked is not None:
        return sequence_backward(plan.layers, np, done.tapes, None, done.dys, False,
                                 plan.buffers, False)[0]
    dtype = plan.arrays[0].dtype
    cells, gates, hs = zip(*done.tapes, strict=True)
    if not handing:
        work = [np.empty(n, dtype) for n in plan.scratch]
        with flushed():
            stack_grads(plan.operands, work, xs, cells, gates, hs, done.dys)
    else:
        work = [np.empty(n, dtype) for n in plan.handing_scratch]
        with flushed(), overlapping():
            stack_grads(plan.operands, work, xs, cells, gates, hs, done.dys, call_later)
    return [dict(group) for group in plan.groups]


def planned_descent(plan: _Plan, xs: Array, done: Pass, optimizer: Any) -> None:
    """``optimizer``'s plain SGD step of ``done`` (``planned_forward``'s pass of ``xs``) inside
    the backward pass, every layer's in one compiled call (``numba_descent.descend_stack``:
    no gradient arrays, the layer path's step to rounding), where ``descent_declines`` said
    None; the optimizer's checks and bookkeeping as its own step keeps them. NaN or inf in
    the input raises ``FloatingPointError`` before any weight moves."""
    params = [layer.params for layer in plan.layers]
    optimizer._check_owners(params, "step")
    optimizer._schedule_rate()
    steps, batch = xs.shape[:2]
    scratch = numba_descent.stack_scratch(plan.sizes, steps, batch, xs.dtype)
    cells, gates, hs = zip(*done.tapes, strict=True)
    tapes = list(zip((xs, *hs[:-1]), cells, gates, strict=True))
    with flushed():
        moved = numba_descent.descend_stack(plan.weights, tapes, done.dys, scratch,
                                            optimizer.rate)
    if not moved:  # a finite loss of an infinite input: saturated gates
        raise FloatingPointError("train_recurrent: the input holds NaN or inf; no update was "
                                 "applied")
    optimizer._counted_in_backward(params)
    plan.stamped()


def _compiled_cell(like: Array) -> NumbaLSTM | str:
    """The compiled LSTM loops where the layers take them for arrays like ``like``; else why
    not."""
    path = sequence_path(namespace_of(like), like, fused_disagreement)  # the layers' choice
    if path is None or not isinstance(path.cell, NumbaLSTM):
        return compiled_declined()
    return path.cell


def _off_the_compiled_stack(kinds: list[type], first: int, every: int | None) -> str | None:
    """Why a planned stack of layers of ``kinds`` (after an ``Embedding`` when ``first``) in
    segments of ``every`` runs the layers' own functions, not the compiled stack of LSTMs
    (None: it runs that)."""
    if first:
        return "an Embedding first"
    if any([kind not in (LSTM, FullyConnected) for kind in kinds]):
        return "StandardLSTM or GRU layers"
    return None if every is None else "a checkpointed tape"


def _layer_loops_declined(layers: list[Any], like: Array) -> str | None:
    """Why the recurrent ``layers`` would not run their compiled loops on arrays like
    ``like`` (each layer's own choice, self-checks included), or None."""
    for layer in layers:
        if type(layer) is LSTM:
            cell = _compiled_cell(like)
            if type(cell) is str:
                return cell
        elif isinstance(layer, GatedRecurrent) and layer._fast_loops(like) is None:
            return cpu_path()[1] or f"the compiled {layer.kind} loops failed their self-check"
    return None


def _descent_declined(like: Array) -> str | None:
    """Why ``planned_descent``'s kernel (``numba_descent.descend_stack``) failed its
    self-check for arrays like ``like``, or None."""
    if stack_loops(like, numba_descent.check_stack) is None:
        return "the compiled SGD step of a stack failed its self-check"
    return None


def _grads_declined(like: Array, by_id: bool) -> str | None:
    """Why ``planned_grads``'s kernel (with ids, the row sums by id too) failed its
    self-check for arrays like ``like``, or None."""
    if grads_loops(like, check_compiled) is None:
        return "the compiled gradients of a stack failed their self-check"
    if by_id and scatter_loops(like, check_scatter) is None:
        return "the compiled row sums by id failed their self-check"
    return None


class _Plan:
    """``planned``'s checks of one network, input form and tape, made once: its layers and
    their parameter arrays, zero initial states, the gradient buffers and, on the compiled
    stack (``stacked`` None), the LSTMs' weights and the compiled call's operands; else
    ``stacked`` says why the pass runs the layers' own functions."""

    def __init__(self, rnet: Any, xs: Array, every: int | None, stacked: str | None) -> None:
        self.layers = list(rnet.layers)
        params = [layer.params for layer in self.layers]
        self.arrays = group_values(params)
        self.versions = [group.version for group in params]
        self.form = (xs.shape, xs.dtype, every)
        self.every, self.stacked = every, stacked
        self.kinds = tuple(sorted({layer.kind for layer in self.layers if layer.recurrent}))
        first = self.layers[0]
        self.by_id = xs.ndim == 2
        self.vocab = first.vocab if type(first) is Embedding else first.n_in
        steps, batch = xs.shape[:2]
        self.rows = steps * batch
        dtype = self.arrays[0].dtype
        self.zeros = [np.zeros((batch, layer.state_size), dtype) for layer in self.layers
                      if layer.recurrent]
        self.buffers = gradient_buffers(rnet)
        self.groups = groups = [group for group in self.buffers if group is not None]
        self.written = group_values(groups)
        self.flagged = [*self.arrays, *self.written]
        if stacked is None:
            self._compiled_operands(params, steps, batch)

    def _compiled_operands(self, params: list[Any], steps: int, batch: int) -> None:
        """The compiled stack's operands: the LSTMs' weights, the top, the buffers and
        scratch sizes of ``numba_grads.stack_grads``."""
        last, groups = self.layers[-1], self.groups
        self.top = last if type(last) is FullyConnected else None
        lstms = self.layers[:-1] if self.top is not None else self.layers
        self.weights = [(p["W"], p["U"], p["b"]) for p in params[: len(lstms)]]
        self.sizes = [(layer.n_in, layer.n_out) for layer in lstms]
        lstm_grads = groups[: len(lstms)]
        self.operands = StackGrads(
            tuple(W for W, _, _ in self.weights), tuple(U for _, U, _ in self.weights),
            tuple(g["W"] for g in lstm_grads), tuple(g["U"] for g in lstm_grads),
            tuple(g["b"] for g in lstm_grads),
            None if self.top is None else (self.top.params["W"],
                                           (groups[-1]["W"], groups[-1]["b"])),
            JOIN_UP_TO)
        self.cell: Any = None
        """The compiled LSTM cell, set by ``planned``."""
        sizes = (self.sizes, steps, batch, self.vocab if self.by_id else 0,
                 self.top is not None, JOIN_UP_TO)
        self.scratch = scratch_sizes(*sizes)
        self.handing_scratch = scratch_sizes(*sizes, handing=True)

    @classmethod
    def of(cls, rnet: Any, xs: Array, every: int | None) -> _Plan | str:
        """The plan for ``rnet`` over ``xs`` with segments of ``every`` steps (None: the full
        tape), or why this path does not apply."""
        layers = rnet.layers
        first = int(bool(layers) and type(layers[0]) is Embedding)
        kinds = [type(layer) for layer in layers[first:]]
        if not kinds or kinds[0] not in CELLS or not all([k in CELLS for k in kinds[:-1]]) or (
                kinds[-1] not in (*CELLS, FullyConnected)):
            return ("not a stack of LSTM, StandardLSTM or GRU layers with at most an "
                    "Embedding first and a FullyConnected on top")
        arrays = group_values([layer.params for layer in layers])
        dtype = arrays[0].dtype
        if xs.ndim == 3 and xs.dtype != dtype:
            return OTHER_DTYPE
        if dtype not in (np.float32, np.float64) or not xs.flags.c_contiguous or (
                xs.ndim == 2 and xs.dtype != np.int64) or (
                xs.ndim == 3 and (first or xs.shape[2] != layers[0].n_in)) or (
                xs.ndim not in (2, 3) or xs.shape[0] * xs.shape[1] == 0):
            return OTHER_FORM
        if not all([type(w) is np.ndarray and w.dtype == dtype and w.flags.c_contiguous
                    for w in arrays]):
            return "a weight that is not a C-order numpy array of one dtype"
        plan = cls(rnet, xs, every, _off_the_compiled_stack(kinds, first, every))
        if not all([type(g) is np.ndarray and g.flags.c_contiguous for g in plan.written]) \
                or not plan.writeable():
            return "a parameter or gradient buffer that is read-only or not C order"
        return plan

    def writeable(self) -> bool:
        """Whether every parameter and gradient buffer still takes writes: numba types a
        read-only parameter (frozen, memory-mapped) apart, so that a tuple of the LSTMs'
        weights mixing both has no compiled call; the call writes the buffers through their
        addresses, past any flag."""
        return all([a.flags.writeable for a in self.flagged])

    def fits(self, rnet: Any, xs: Array, every: int | None) -> bool:
        """Whether this plan still holds for ``rnet`` over ``xs`` in segments of ``every``:
        the same layers holding the same parameter arrays (changed in place only: the
        parameters' stamps as this plan left them, or else the arrays compared), the same
        gradient buffers kept, all writeable, the same form of input and tape."""
        layers = rnet.layers
        if not (same_objects(layers, self.layers) and (xs.shape, xs.dtype, every) == self.form
                and xs.flags.c_contiguous and kept_gradient_buffers(rnet) is self.buffers
                and self.writeable()):
            return False
        params = [layer.params for layer in layers]
        if [group.version for group in params] == self.versions:
            return True
        if not same_objects(group_values(params), self.arrays):
            return False
        self.stamped()
        return True

    def stamped(self) -> None:
        """Take the parameters' stamps as they are now as this plan's (after a check of their
        arrays, or a step of this plan's own that changed them in place only)."""
        self.versions = [layer.params.version for layer in self.layers]


CELLS = (LSTM, StandardLSTM, GRU)
"""The recurrent layers a planned pass takes."""

_PLANS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
"""``planned``'s plan of each network, for the form of its latest input."""
