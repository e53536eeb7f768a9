"""``backpropagate_sequence`` in few Python-level calls: its checks made once per network and
input form, the layers' own forward functions, then every layer's backward pass in one
compiled call (``kernels.numba_grads``) into the gradient buffers (issue 30: a training step
of few calls). The same bits as the layer path (``tests/test_planned_backprop.py``).

It applies on numpy with the compiled loops (and the fast paths on: ``DUALTAPE_JIT``,
``DUALTAPE_FUSED``) to a network of ``LSTM`` layers with at most one ``FullyConnected`` on
top, fed ids ((T, B) int64, the first LSTM's one-hot rows, as ``train-text`` feeds it) or
(T, B, i) of the weights' dtype (C order), over more than one row, with the full tape and no
initial states' gradient (a given state only starts the forward pass, a mask only weighs the
loss) and the gradients' products not handed to a second core (``overlap_gradients``). It serves
``backpropagate_sequence``, and ``train_recurrent`` before ``optimizer.step`` where the
optimizer does not move the weights inside the backward pass itself (``descent``).
Anything else, ids outside the vocabulary, or a read-only parameter, takes the layer path,
which checks and says what is wrong. So does a loss gradient that is not C-ordered (the
layer path's products of a strided one round otherwise), after the loss was called:
``objective`` (``training.LossCall``) then gives the layer path its first result (the same
outputs, bit for bit), so that the loss is called once.
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np

from .backend import namespace_of
from .held_update import group_values, same_objects
from .kernels import compiled_declined, grads_loops, scatter_loops, sequence_path
from .kernels.flush import flushed
from .kernels.lstm_sequence import forward_sequence
from .kernels.numba_grads import StackGrads, check_compiled, ids_within, scratch_sizes, stack_grads
from .kernels.numba_lstm import NumbaLSTM
from .kernels.overlap import overlap_requested
from .kernels.scatter import check_compiled as check_scatter
from .layers.fully_connected import FullyConnected
from .layers.linear_algebra import project_sequence
from .layers.lstm import JOIN_UP_TO, LSTM, fused_disagreement
from .losses import mask_weights
from .recurrent import gradient_buffers, kept_gradient_buffers
from .switches import held_choice

Array = Any


def planned(rnet: Any, xs: Any) -> _Plan | str:
    """``planned_backprop``'s plan of ``rnet`` over ``xs`` (its checks made once per network
    and input form), or why this path does not apply (the module's docstring says where);
    moves nothing."""
    if type(xs) is not np.ndarray:
        return "the input is not a numpy array"
    if overlap_requested():
        return "the weight gradients go to a second core (overlap_gradients)"
    plan = _PLANS.get(rnet)
    if plan is None or not plan.fits(rnet, xs):
        plan = _Plan.of(rnet, xs)
        if isinstance(plan, str):
            return plan
        _PLANS[rnet] = plan
    W0 = plan.weights[0][0]
    cell = held_choice(("planned_backprop", W0.dtype, plan.by_id),
                       lambda: _compiled_cell(W0, plan.by_id))
    if type(cell) is str:
        return cell
    if plan.by_id and not ids_within(xs, plan.layers[0].n_in):
        return "an id outside the vocabulary"
    plan.cell = cell
    return plan


def planned_backprop(plan: _Plan, rnet: Any, xs: Any, targets: Any, objective: Any,
                     mask: Any = None, state: Any = None
                     ) -> tuple[Array, bool, list[dict[str, Array]], list[Array]] | None:
    """``(loss, input finite, grads, state_T)`` of ``rnet`` over ``xs`` from ``state`` (None:
    zeros; checked as the layer path checks it) by ``objective(np, ys, targets[, weights])``
    (a ``training.LossCall``: its gradient of the outputs' shape and dtype; ``weights``
    ``losses.mask_weights`` of ``mask`` where one is given) by ``plan`` (``planned``'s), the
    gradients in ``recurrent.gradient_buffers``; or None, having changed nothing, where the
    loss's gradient is not C-ordered."""
    W0, cell = plan.weights[0][0], plan.cell
    steps, batch = xs.shape[:2]
    starts = plan.zeros if state is None else [
        np.ascontiguousarray(s) for s in rnet._check_states(state, batch)[0]]
    with flushed():  # subnormals flushed, as on the layer path (kernels.flush)
        tapes, h = [], xs
        for (W, U, b), start in zip(plan.weights, starts, strict=True):
            tapes.append(forward_sequence(np, cell, U, start,
                                          project_sequence(np, h, W, b)))
            h = tapes[-1][2]
        if plan.top is not None:
            h = plan.top._forward(np, h.reshape(steps * batch, -1))[1].reshape(steps, batch, -1)
    weights = () if mask is None else (mask_weights(mask, steps, batch, h),)
    value, dys = objective(np, h, targets, *weights)
    if not dys.flags.c_contiguous:  # numpy's products of a strided one round otherwise
        return None
    finite = plan.by_id or bool(np.isfinite(xs).all())
    work = [np.empty(n, W0.dtype) for n in plan.scratch]
    cells, gates, hs = zip(*tapes, strict=True)
    with flushed():
        stack_grads(plan.operands, work, xs, cells, gates, hs, dys)
    return value, finite, [dict(group) for group in plan.groups], [c[-1] for c in cells]


def _compiled_cell(like: Array, by_id: bool) -> NumbaLSTM | str:
    """The compiled LSTM loops where the layers take them for arrays like ``like`` and this
    pass's kernel (with ids, the row sums by id too) passed its self-check; else why not."""
    path = sequence_path(namespace_of(like), like, fused_disagreement)  # the layers' choice
    if path is None or not isinstance(path.cell, NumbaLSTM):
        return compiled_declined()
    if grads_loops(like, check_compiled) is None:
        return "the compiled gradients of a stack failed their self-check"
    if by_id and scatter_loops(like, check_scatter) is None:
        return "the compiled row sums by id failed their self-check"
    return path.cell


class _Plan:
    """``planned_backprop``'s checks of one network and input form, made once: its layers and
    their parameter arrays, the LSTMs' weights and zero initial states, the gradient buffers
    and the compiled call's operands."""

    def __init__(self, rnet: Any, xs: Array) -> None:
        self.layers = list(rnet.layers)
        params = [layer.params for layer in self.layers]
        self.arrays = group_values(params)
        last = self.layers[-1]
        self.top = last if type(last) is FullyConnected else None
        lstms = self.layers[:-1] if self.top is not None else self.layers
        self.weights = [(p["W"], p["U"], p["b"]) for p in params[: len(lstms)]]
        self.form = (xs.shape, xs.dtype)
        self.by_id = xs.ndim == 2
        steps, batch = xs.shape[:2]
        dtype = self.weights[0][0].dtype
        self.zeros = [np.zeros((batch, layer.n_out), dtype) for layer in lstms]
        self.buffers = gradient_buffers(rnet)
        self.groups = groups = [group for group in self.buffers if group is not None]
        self.written = group_values(groups)
        self.flagged = [*self.arrays, *self.written]
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
        self.scratch = scratch_sizes([(layer.n_in, layer.n_out) for layer in lstms], steps,
                                     batch, self.layers[0].n_in if self.by_id else 0,
                                     self.top is not None, JOIN_UP_TO)

    @classmethod
    def of(cls, rnet: Any, xs: Array) -> _Plan | str:
        """The plan for ``rnet`` over ``xs``, or why this path does not apply."""
        layers = rnet.layers
        if not layers or not all([type(layer) is LSTM for layer in layers[:-1]]) or (
                type(layers[-1]) not in (LSTM, FullyConnected)) or type(layers[0]) is not LSTM:
            return "not a stack of LSTMs with at most a FullyConnected on top"
        dtype = layers[0].params["W"].dtype
        if xs.ndim == 3 and xs.dtype != dtype:
            return "the input's dtype is not the weights'"
        if dtype not in (np.float32, np.float64) or not xs.flags.c_contiguous or (
                xs.ndim == 2 and xs.dtype != np.int64) or (
                xs.ndim == 3 and xs.shape[2] != layers[0].n_in) or (
                xs.ndim not in (2, 3) or xs.shape[0] * xs.shape[1] < 2):
            return ("the input is not (T, B) int64 ids or (T, B, i), C order, of two rows "
                    "or more")
        if not all([type(w) is np.ndarray and w.dtype == dtype and w.flags.c_contiguous
                    for w in group_values([layer.params for layer in layers])]):
            return "a weight that is not a C-order numpy array of one dtype"
        plan = cls(rnet, xs)
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

    def fits(self, rnet: Any, xs: Array) -> bool:
        """Whether this plan still holds for ``rnet`` over ``xs``: the same layers holding
        the same parameter arrays (changed in place only), the same gradient buffers kept,
        all writeable, the same form of input."""
        layers = rnet.layers
        return (same_objects(layers, self.layers)
                and (xs.shape, xs.dtype) == self.form and xs.flags.c_contiguous
                and kept_gradient_buffers(rnet) is self.buffers and self.writeable()
                and same_objects(group_values([layer.params for layer in layers]), self.arrays))


_PLANS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
"""``planned_backprop``'s plan of each network, for the form of its latest input."""
