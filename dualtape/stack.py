"""A stack of layers over a sequence: each recurrent layer through its sequence protocol, each
feed-forward one over all ``T·batch`` rows at once (ids ``(T, batch)`` as ``T·batch`` ids);
forward keeps one tape per layer, backward
runs them last to first.

This is the private protocol every recurrent thing shares: states as a list (one per recurrent
layer), and backward in the public order ``(tape, dstates, dys)``. The functions are handed the
layers, not the network that holds them, so data flows down: ``RecurrentNetwork`` and the
checkpointed tapes (``checkpointing.py``) call them; they call only the layers.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from .kernels.overlap import overlapping

Array = Any


class RecurrentNetworkTape(NamedTuple):
    """One tape per layer: a sequence tape for recurrent layers, a ``(T·batch)``-row tape for
    feed-forward ones; ``steps`` and ``batch`` give the sequence's shape."""

    tapes: list[Any]
    steps: int
    batch: int


def stack_forward(
    layers: list[Any], xp: Any, states: list[Array], xs: Array, fuse: bool | None = None
) -> tuple[RecurrentNetworkTape, list[Array], Array]:
    """``(tape, states_T, ys)`` of ``layers`` over ``xs`` ``(T, batch, n_in)`` from
    ``states``, one per recurrent layer; ``fuse`` as ``fuses`` decides when None (a memory
    report's probes ask for the tape of another length)."""
    steps, batch = xs.shape[:2]
    tapes, new_states, pending = [], [], iter(states)
    h, rest = xs, layers
    if fuses(layers, steps * batch) if fuse is None else fuse:
        tape, h = layers[0]._forward_rows(xp, xs)
        tapes, rest = [tape], layers[1:]
    for layer in rest:
        if layer.recurrent:
            tape, state, h = layer._forward_sequence(xp, next(pending), h)
            new_states.append(state)
        else:
            tape, y = layer._forward(xp, xp.reshape(h, (steps * batch, *h.shape[2:])))
            h = xp.reshape(y, (steps, batch, y.shape[-1]))
        tapes.append(tape)
    return RecurrentNetworkTape(tapes, steps, batch), new_states, h


def fuses(layers: list[Any], rows: int) -> bool:
    """Whether an ``Embedding`` first hands its ids and weight to the recurrent layer after it
    (``linear_algebra.TableRows``): when it has fewer rows (``vocab``) than the sequence has
    (``rows``), projecting the weight once costs less than projecting every row looked up,
    and so do the gradients (57 ids of 32 into an LSTM of 80 over 1,600 rows: 0.17 ms against
    1.3 for the lookup, projection and gradients on an AMD EPYC Zen 4)."""
    return (len(layers) > 1 and layers[0].takes_ids and layers[0].vocab < rows
            and getattr(layers[1], "takes_one_hot_ids", False))


def stack_backward(
    layers: list[Any], xp: Any, tape: RecurrentNetworkTape, dstates: list[Array | None] | None,
    dys: Array, need_dxs: bool = True,
    grads_out: list[dict[str, Array] | None] | None = None, need_dstates: bool = True,
) -> tuple[list[dict[str, Array]], list[Array | None], Array | None]:
    """``(grads, dstates_0, dxs)`` by backprop through time; ``dstates`` None (or an entry
    None) is zeros. The input gradient is None when not ``need_dxs`` and the first layer is
    recurrent, and when the input is ids (an ``Embedding`` first gives none); the initial
    states' gradients None unless ``need_dstates`` (training skips those products).
    ``grads_out`` (``recurrent.gradient_buffers``: one entry per layer) receives the
    gradients of the layers it has arrays for (``Layer.fills_gradient_buffers``)."""
    steps, batch = tape.steps, tape.batch
    grads: list[dict[str, Array]] = [{} for _ in layers]
    pending = list(dstates) if dstates is not None else \
        [None] * sum(layer.recurrent for layer in layers)
    dstates_0: list[Array | None] = []
    with overlapping():  # the weight gradients' products may run beside the loop
        dh = dys
        for k in reversed(range(len(layers))):
            layer = layers[k]
            if layer.recurrent:
                dstate = pending.pop()
                if dstate is None:
                    dstate = layer._state_gradient(None, batch, "dstate_T")
                grads[k], d0, dh = layer._backward_sequence(
                    xp, tape.tapes[k], dstate, dh, need_dxs or k > 0,
                    None if grads_out is None else grads_out[k], need_dstates)
                dstates_0.insert(0, d0)
            elif not hasattr(dh, "shape"):  # the weight's gradient, summed by the layer after
                grads[k], dh = layer._backward_summed(xp, tape.tapes[k], dh)  # (fuses)
            else:
                flat = xp.reshape(dh, (steps * batch, dh.shape[-1]))
                out = None if grads_out is None else grads_out[k]
                grads[k], dx = layer._backward(xp, tape.tapes[k], flat) if out is None else (
                    layer._backward(xp, tape.tapes[k], flat, grads_out=out))
                dh = None if dx is None else xp.reshape(dx, (steps, batch, dx.shape[-1]))
    return grads, dstates_0, dh
