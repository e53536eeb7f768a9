"""Plain SGD fused into the backward pass of a stack of LSTMs: ``train_recurrent``'s fast path
for Grenade's own networks and optimizer (issue 30: per-call overhead, a training step of few
calls).

``train_recurrent(rnet, xs, targets, SGD(rate))`` with no momentum and no regulariser needs no
gradient arrays: each weight moves by ``−rate`` times its gradient once, so the backward pass
may move it as soon as nothing else reads it. On numpy with the compiled loops, for a network
of ``LSTM`` layers only fed real-valued sequences with the full tape, the backward pass of
every layer is one compiled call (``numba_descent.descend_stack``: per layer, its time loop
and its input gradient for the layer below, then its weights moved in place by BLAS, the
gradients never written), in place of the layers' products into the gradient buffers and the
optimizer's step over them: with the choices kept across calls
(``switches``), the seed network's one-step call (Grenade's 40 → 512 → 40 at batch 1) took
0.52-0.56x its time, the tiny 4 → 8 → 4 network's 0.74-0.76x
(``bench/results/2026-12-04-fused-descent.md``). The weights agree with the unfused
step's to rounding (``tests/test_descent.py``); the forward pass, the loss and its checks are
the same code, and so are the optimizer's bookkeeping (its step count, the parameters' stamps,
which make older tapes stale) and its refusals.

Everything is allocated before the first weight moves, so a failure leaves the network as it
was: the blocks of one layer and one input gradient, sized for the largest layer and shared
by all (less memory than the gradients and blocks of the unfused step).

With ``train_recurrent``'s other defaults too (zero states, no mask, the squared error, the
full tape), ``train_step`` takes the whole call: its checks of the network made once per
network and input form, the layers' own forward functions and loss without the stack's
dispatch, then the same compiled call, the same bits as the layer-by-layer call in 172
Python-level calls where that makes 330 (T = 1: 0.78x its time; the tiny network 0.65x).
"""

from __future__ import annotations

import math
import weakref
from typing import Any

import numpy as np

from .backend import namespace_of
from .kernels import compiled_declined, sequence_path, stack_loops
from .kernels.flush import flushed
from .kernels.lstm_sequence import forward_sequence
from .kernels.numba_descent import (
    check_stack,
    descend_stack,
    stack_scratch,
)
from .kernels.numba_lstm import NumbaLSTM
from .layers.linear_algebra import project_sequence
from .layers.lstm import LSTM, fused_disagreement
from .losses import squared_error
from .optim import Optimizer

Array = Any


def fused_declines(rnet: Any, optimizer: Any, xs: Any, full_tape: bool) -> str | None:
    """Why ``fused_descent`` does not take ``train_recurrent(rnet, xs, ..., optimizer)``
    (``xs`` the input as the network prepared it; ``full_tape``: the tape policy
    ``"full"``), or None: ``optimizer`` not plain SGD (``plain_sgd_declines``), a layer
    other than ``LSTM``, ids or a checkpointed tape, anything but numpy arrays of one float
    dtype (C order, weights writeable), or no compiled loops (``DUALTAPE_JIT``/
    ``DUALTAPE_FUSED`` off, a failed self-check). Changes nothing."""
    why = plain_sgd_declines(optimizer)
    if why is not None:
        return why
    if not all([type(layer) is LSTM for layer in rnet.layers]):
        return "a layer other than LSTM"
    if not full_tape:
        return "a checkpointed tape"
    dtype = rnet.layers[0].params["W"].dtype
    if type(xs) is not np.ndarray or xs.ndim != 3 or xs.dtype != dtype:
        return "the input is not a numpy array of (T, B, i) of the weights' dtype"
    if not all([type(w) is np.ndarray and w.dtype == dtype and w.flags.c_contiguous
                and w.flags.writeable for group in rnet.params for w in group.values()]):
        return "a weight that is not a writeable C-order numpy array of one dtype"
    return _cell_declines(namespace_of(xs), xs)


def fused_descent(rnet: Any, optimizer: Any, found: Any) -> None:
    """Backpropagate ``found`` (``training``'s forward pass and loss of ``rnet``, its full
    tape) and apply ``optimizer``'s step in one pass, where ``fused_declines`` said None."""
    tape, params = found.tape, rnet.params
    optimizer._check_owners(params, "step")
    optimizer._schedule_rate()
    scratch = stack_scratch(_sizes(rnet.layers), tape.steps, tape.batch, found.dy.dtype)
    tapes = [(np.ascontiguousarray(t.xs), t.cells, t.gates) for t in tape.tapes]
    weights = [(p["W"], p["U"], p["b"]) for p in params]
    optimizer._counted_in_backward(params)
    with flushed():  # subnormals flushed, as on the unfused fast path (kernels.flush)
        descend_stack(weights, tapes, np.ascontiguousarray(found.dy), scratch, optimizer.rate)


def whole_step(rnet: Any, xs: Any, targets: Any, optimizer: Any) -> _Plan | str:
    """``train_step``'s plan for ``train_recurrent(rnet, xs, targets, optimizer)`` with its
    defaults, or why it declines (``fused_descent``'s reasons, the input not ``(T, B, i)``
    and the targets not ``(T, B, o)``, C order, the weights' dtype); a plan is made when the
    network or the form of the input is new, or its parameters changed since the step last
    moved them (a new array, another optimizer's step, a weight made read-only). Moves
    nothing."""
    why = plain_sgd_declines(optimizer)
    if why is not None:
        return why
    if type(xs) is not np.ndarray or type(targets) is not np.ndarray or xs.ndim != 3:
        return "the input and targets are not numpy arrays, the input (T, B, i)"
    xp = namespace_of(xs)
    why = _cell_declines(xp, xs)
    if why is not None:
        return why
    plan = _PLANS.get(rnet)
    if plan is None or not plan.fits(rnet.layers, xs, targets):
        plan = _Plan.of(rnet.layers, xs, targets)
        if isinstance(plan, str):
            return plan
        plan.xp = xp
        plan.cell = sequence_path(xp, xs, fused_disagreement).cell  # type: ignore[union-attr]
        _PLANS[rnet] = plan
    return plan


def train_step(plan: _Plan, xs: Any, targets: Any, optimizer: Any
               ) -> tuple[float, list[Array]] | None:
    """``train_recurrent(rnet, xs, targets, optimizer)`` with its defaults (zero states, no
    mask, the squared error, the full tape) by ``plan`` (``whole_step``'s): the layers' own
    forward pass and loss, then ``numba_descent.descend_stack``, the backward pass fused with
    the update in one call; ``(loss, state_T)``, or None, having done nothing, where the input
    or the loss is not finite (the generic code then raises as it does)."""
    xp, cell = plan.xp, plan.cell
    optimizer._check_owners(plan.params, "step")
    optimizer._schedule_rate()
    with flushed():  # subnormals flushed, as on the layer-by-layer path (kernels.flush)
        tapes, h = [], xs
        for (W, U, b), zeros in zip(plan.weights, plan.zeros, strict=True):
            cells, gates, hs = forward_sequence(xp, cell, U, zeros,
                                                project_sequence(xp, h, W, b))
            tapes.append((h, cells, gates))
            h = hs
        loss, dys = squared_error(xp, h, targets)
        if not math.isfinite(loss):
            return None
        steps, batch = xs.shape[:2]
        scratch = stack_scratch(_sizes(plan.layers), steps, batch, xs.dtype)
        if not descend_stack(plan.weights, tapes, dys, scratch, optimizer.rate):
            return None  # NaN or inf in the input: nothing moved
    optimizer._counted_in_backward(plan.params)
    plan.versions = [layer.params.version for layer in plan.layers]
    return float(loss), [cells[-1] for _, cells, _ in tapes]


class _Plan:
    """``train_step``'s checks of one network and input form, made once: its layers, their
    parameter dicts with the stamps they had when this step last moved them, their weights,
    and zero initial states."""

    def __init__(self, layers: list[LSTM], xs: Array, targets: Array) -> None:
        self.layers = list(layers)
        self.params: list[dict[str, Array]] = [layer.params for layer in layers]
        self.versions = [layer.params.version for layer in layers]
        self.weights = [(p["W"], p["U"], p["b"]) for p in self.params]
        self.arrays = [w for group in self.weights for w in group]
        self.zeros = [np.zeros((xs.shape[1], layer.n_out), xs.dtype) for layer in layers]
        self.form = (xs.shape, targets.shape, xs.dtype)
        self.xp: Any = None
        self.cell: Any = None
        """The namespace and the compiled LSTM cell, set by ``whole_step``."""

    @classmethod
    def of(cls, layers: list[Any], xs: Array, targets: Array) -> _Plan | str:
        """The plan for ``layers`` (LSTMs only, of C-order writeable weights of one float
        dtype) over ``xs`` and ``targets``, or why there is none."""
        dtype, (steps, batch, _) = xs.dtype, xs.shape
        if not layers or not all([type(layer) is LSTM for layer in layers]):
            return "a layer other than LSTM"
        if layers[0].params["W"].dtype != dtype:
            return "the input's dtype is not the weights'"
        if dtype not in (np.float32, np.float64) or targets.dtype != dtype or steps == 0 or (
                batch == 0 or targets.shape != (steps, batch, layers[-1].n_out)
                or xs.shape[2] != layers[0].n_in or not xs.flags.c_contiguous
                or not targets.flags.c_contiguous):
            return "the input and targets are not (T, B, i) and (T, B, o), C order, one dtype"
        plan = cls(layers, xs, targets)
        if not all([type(w) is np.ndarray and w.dtype == dtype and w.flags.c_contiguous
                    and w.flags.writeable for w in plan.arrays]):
            return "a weight that is not a writeable C-order numpy array of one dtype"
        return plan

    def fits(self, layers: list[Any], xs: Array, targets: Array) -> bool:
        """Whether this plan still holds for ``layers`` over ``xs`` and ``targets``."""
        if len(layers) != len(self.layers) or (xs.shape, targets.shape, xs.dtype) != self.form \
                or targets.dtype != xs.dtype or not xs.flags.c_contiguous \
                or not targets.flags.c_contiguous:
            return False
        for layer, group, version in zip(layers, self.params, self.versions, strict=True):
            if layer.params is not group or group.version != version:  # a new layer or array
                return False
        for w in self.arrays:
            if not w.flags.writeable:  # made read-only since
                return False
        return True


_PLANS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
"""``train_step``'s plan of each network, for the form of its latest input."""


def plain_sgd_declines(optimizer: Any) -> str | None:
    """Why ``optimizer``'s step cannot run inside the backward pass: its own answer
    (``Optimizer._in_backward_declines``: plain ``SGD`` only); an object that is not an
    ``Optimizer`` (a wrapper such as ``DataParallel``) steps otherwise. None where it can."""
    if not isinstance(optimizer, Optimizer):
        return f"{type(optimizer).__name__} is not SGD itself"
    return optimizer._in_backward_declines()


def _cell_declines(xp: Any, like: Array) -> str | None:
    """Why arrays like ``like`` of namespace ``xp`` do not take the compiled LSTM loops (the
    layers' own choice, self-checked) with the compiled SGD step of a stack (its self-check
    passed), or None."""
    path = sequence_path(xp, like, fused_disagreement)
    if path is None or not isinstance(path.cell, NumbaLSTM):
        return compiled_declined()
    if stack_loops(like, check_stack) is None:
        return "the compiled SGD step of a stack failed its self-check"
    return None


def _sizes(layers: list[LSTM]) -> list[tuple[int, int]]:
    """The ``(inputs, cells)`` of each of ``layers``."""
    return [(layer.n_in, layer.n_out) for layer in layers]
