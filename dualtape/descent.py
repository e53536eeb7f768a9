"""Plain SGD fused into the backward pass of a stack of LSTMs: ``train_recurrent``'s fast path
for Grenade's own networks and optimizer (issue 30: per-call overhead, a training step of few
calls).

``train_recurrent(rnet, xs, targets, SGD(rate))`` with no momentum and no regulariser needs no
gradient arrays: each weight moves by ``−rate`` times its gradient once, so the backward pass
may move it as soon as nothing else reads it. On numpy with the compiled loops, for a network
of ``LSTM`` layers only fed real-valued sequences with the full tape, each layer's backward
pass is then two compiled calls, its time loop (``_numba_lstm.backward_sequence``) and
``numba_descent.descend`` (its input gradient for the layer below, then the weights moved in
place by BLAS, the gradients never written), in place of the layer's products into the
gradient buffers and the optimizer's step over them: the seed network's one-step call
(Grenade's 40 → 512 → 40 at batch 1) took 0.75x its time, the tiny 4 → 8 → 4 network's
0.70x (``bench/results/2026-12-04-fused-descent.md``). The weights agree with the unfused
step's to rounding (``tests/test_descent.py``); the forward pass, the loss and its checks are
the same code, and so are the optimizer's bookkeeping (its step count, the parameters' stamps,
which make older tapes stale) and its refusals.

Everything is allocated before the first weight moves, so a failure leaves the network as it
was: the blocks of one layer and one input gradient, sized for the largest layer and shared
by all (less memory than the gradients and blocks of the unfused step).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from .kernels import blas, descent_loops, sequence_path
from .kernels.flush import flushed
from .kernels.numba_descent import check_compiled, descend
from .kernels.numba_lstm import NumbaLSTM, compiled_loops
from .layers.lstm import LSTM, fused_disagreement
from .optim import SGD
from .stack import RecurrentNetworkTape

Array = Any


class _Scratch(NamedTuple):
    """Flat buffers the layers' backward passes share: the pre-activation blocks ``dfi``
    (2 per cell), ``da_o``, ``dg`` and the cell gradients ``dc`` (1 per cell), the carries
    (``carry``, ``rec``, ``first``: batch × cells) and the input gradient ``dxs``, which
    becomes the layer below's output gradient (its backward loop reads that before its input
    gradient is written over it)."""

    dfi: Array
    da_o: Array
    dg: Array
    dc: Array
    carry: Array
    rec: Array
    first: Array
    dxs: Array


def fused_descent(rnet: Any, optimizer: Any, found: Any) -> bool:
    """Backpropagate ``found`` (``training``'s forward pass and loss of ``rnet``) and apply
    ``optimizer``'s step in one pass, or return False, having done nothing, where this path
    does not apply: ``optimizer`` not exactly ``SGD`` (a subclass or a wrapper such as
    ``DataParallel`` may step otherwise), momentum or a regulariser, a layer other than
    ``LSTM``, ids or a checkpointed tape, anything but numpy arrays of one float dtype (C
    order, weights writeable), or no compiled loops (``DUALTAPE_JIT``/``DUALTAPE_FUSED`` off, a
    failed self-check)."""
    if type(optimizer) is not SGD or optimizer.momentum or optimizer.regulariser:
        return False
    tape, dys = found.tape, found.dy
    layers = rnet.layers
    if not isinstance(tape, RecurrentNetworkTape) or not all(
            [type(layer) is LSTM for layer in layers]) or type(dys) is not np.ndarray:
        return False
    params = rnet.params
    dtype = dys.dtype
    xs = tape.tapes[0].xs
    if dys.shape != (tape.steps, tape.batch, layers[-1].n_out) or type(xs) is not np.ndarray or (
            xs.ndim != 3) or xs.dtype != dtype or not all(
            [type(w) is np.ndarray and w.dtype == dtype and w.flags.c_contiguous
             and w.flags.writeable for group in params for w in group.values()]):
        return False
    path = sequence_path(found.xp, dys, fused_disagreement)  # the forward pass's choice
    if path is None or not isinstance(path.cell, NumbaLSTM) or (
            descent_loops(dys, check_compiled) is None):
        return False
    optimizer._check_owners(params, "step")
    scratch = _scratch(layers, tape, dtype)
    dys, xs = np.ascontiguousarray(dys), np.ascontiguousarray(xs)
    optimizer.steps += 1  # optim.Optimizer.step's bookkeeping, before any weight moves
    optimizer._stamp(params)
    _descend(layers, tape, xs, dys, scratch, optimizer.rate)
    return True


def _scratch(layers: list[LSTM], tape: RecurrentNetworkTape, dtype: Any) -> _Scratch:
    """The buffers for ``tape``'s backward pass through ``layers``, sized for the largest."""
    rows, batch = tape.steps * tape.batch, tape.batch
    cells = max(layer.n_out for layer in layers)
    inputs = max([layer.n_in for layer in layers[1:]], default=0)

    def empty(size: int) -> Array:
        return np.empty(size, dtype=dtype)

    return _Scratch(empty(rows * 2 * cells), empty(rows * cells), empty(rows * cells),
                    empty(rows * cells), empty(batch * cells), empty(batch * cells),
                    empty(batch * cells), empty(rows * inputs))


def _descend(layers: list[LSTM], tape: RecurrentNetworkTape, xs: Array, dys: Array,
             scratch: _Scratch, rate: float) -> None:
    """Each layer from the last: its backward loop from ``dys`` (the first cell's gradient
    not wanted, the last one's zero), then its input gradient (for the layer below: the next
    ``dys``) and its weights moved (``numba_descent.descend``)."""
    steps, batch = tape.steps, tape.batch
    rows, dtype = steps * batch, dys.dtype
    gemm, gemv = blas.addresses(dtype)
    loops, one = compiled_loops(), dtype.type(1)
    with flushed():  # subnormals flushed, as on the unfused fast path (kernels.flush)
        for k in reversed(range(len(layers))):
            layer, layer_tape = layers[k], tape.tapes[k]
            n, p = layer.n_out, layer.params
            shape = (steps, batch, n)
            dfi = scratch.dfi[: rows * 2 * n].reshape(steps, batch, 2 * n)
            da_o, dg, dc = (a[: rows * n].reshape(shape)
                            for a in (scratch.da_o, scratch.dg, scratch.dc))
            carry, rec, first = (a[: batch * n].reshape(batch, n)
                                 for a in (scratch.carry, scratch.rec, scratch.first))
            carry[...] = 0
            loops.backward_sequence(gemm, gemv, p["U"], layer_tape.gates, layer_tape.cells,
                                    dys, dg, da_o, dfi, dc, carry, rec, first, False, one)
            inputs = xs if k == 0 else layer_tape.xs
            dxs = None if k == 0 else scratch.dxs[: rows * layer.n_in].reshape(
                rows, layer.n_in)
            descend(p["W"], p["U"], p["b"], inputs.reshape(rows, layer.n_in),
                              layer_tape.cells[:-1].reshape(rows, n),
                              (dfi.reshape(rows, 2 * n), da_o.reshape(rows, n),
                               dg.reshape(rows, n)), dxs, rate)
            if dxs is not None:
                dys = dxs.reshape(steps, batch, layer.n_in)

