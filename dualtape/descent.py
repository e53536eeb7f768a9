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

Where the planned pass takes the call (``planned_backprop.planned_descent``: the input as
given, C order, and a loss gradient in C order), the same compiled call follows its forward
pass; this module's ``fused_descent`` serves the rest after the layers' forward pass (an input
the network prepared anew, a strided loss gradient).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .backend import namespace_of
from .kernels import compiled_declined, numba_descent, sequence_path, stack_loops
from .kernels.flush import flushed
from .kernels.numba_lstm import NumbaLSTM
from .layers.lstm import LSTM, fused_disagreement
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
    scratch = numba_descent.stack_scratch(_sizes(rnet.layers), tape.steps, tape.batch,
                                          found.dy.dtype)
    tapes = [(np.ascontiguousarray(t.xs), t.cells, t.gates) for t in tape.tapes]
    weights = [(p["W"], p["U"], p["b"]) for p in params]
    optimizer._counted_in_backward(params)
    with flushed():  # subnormals flushed, as on the unfused fast path (kernels.flush)
        numba_descent.descend_stack(weights, tapes, np.ascontiguousarray(found.dy), scratch,
                                    optimizer.rate)


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
    return stack_declines(like)


def stack_declines(like: Array) -> str | None:
    """Why the compiled SGD step of a stack (``numba_descent.descend_stack``) does not serve
    arrays like ``like``: its self-check failed; or None."""
    if stack_loops(like, numba_descent.check_stack) is None:
        return "the compiled SGD step of a stack failed its self-check"
    return None


def _sizes(layers: list[LSTM]) -> list[tuple[int, int]]:
    """The ``(inputs, cells)`` of each of ``layers``."""
    return [(layer.n_in, layer.n_out) for layer in layers]
