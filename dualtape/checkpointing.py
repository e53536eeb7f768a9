"""The tape policy of a sequence through a stack of layers (``sequence_forward``,
``sequence_backward``: the one place that chooses between a full tape and a checkpointed one),
and the checkpointed tapes: the states every k steps, not every step.

The forward pass runs the sequence in segments of ``every`` steps and keeps, for each
segment, only the states it starts from (and what the Dropout layers' generators were then);
backward runs the segments last to first, recomputing each one's full tape from its states
through the same code (fast paths included) and backpropagating through it at once, so only
one segment's tape exists at a time. That is Chen et al. (2016)'s trade, as
``torch.utils.checkpoint`` makes it: one more forward pass, less the last segment's (kept
from the first), for memory that grows with ``T / every + every`` instead of ``T``;
``every = ⌈√T⌉`` (``"sqrt"``) balances the two.
The functions take the layers (``stack.py`` runs them), never the network that holds them,
so a single recurrent layer is a stack of one and layers may use this module.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

from .backend import out_module
from .kernels.flush import flushed_for
from .stack import RecurrentNetworkTape, stack_backward, stack_forward

Array = Any

POLICIES = ("full", "sqrt")
"""The named tape policies; an integer k >= 1 checkpoints every k steps."""


class CheckpointedTape(NamedTuple):
    """A checkpointed tape: the inputs ``xs`` (T, B, n_in), or ids (T, B), ``states``
    (per segment, the list of every recurrent layer's state at its start), ``every`` (the
    segment length), ``rng_states`` (per segment, each Dropout layer's generator state at its
    start), ``steps``, ``batch``, and ``last``: the last segment's own full tape, which
    backward, beginning there, would otherwise recompute at once; its layers' tapes hold the
    parameters' versions, so a tape made with other parameters is refused before any
    segment is recomputed."""

    xs: Array
    states: list[list[Array]]
    every: int
    rng_states: list[list[dict]]
    steps: int
    batch: int
    last: Any


def segment_length(policy: Any, steps: int) -> int | None:
    """The steps per segment of a tape ``policy`` for a sequence of ``steps``: None for the
    full tape (``"full"``), ``⌈√steps⌉`` for ``"sqrt"``, or the integer given (>= 1)."""
    if policy == "full":
        return None
    if policy == "sqrt":
        return max(1, math.isqrt(steps - 1) + 1) if steps > 1 else 1
    if isinstance(policy, bool) or not isinstance(policy, int) or policy < 1:
        raise ValueError(f"tape must be 'full', 'sqrt' or a number of steps >= 1, got "
                         f"{policy!r}")
    return policy


def sequence_forward(
    layers: list[Any], xp: Any, states: list[Array], xs: Array, every: int | None = None,
    fuse: bool | None = None,
) -> tuple[RecurrentNetworkTape | CheckpointedTape, list[Array], Array]:
    """``(tape, states_T, ys)`` of ``layers`` over ``xs`` from ``states``: the full tape when
    ``every`` is None (``fuse`` as ``stack_forward``'s), else a checkpointed one of segments
    of ``every`` steps (``segment_length`` gives ``every`` from a tape policy)."""
    with flushed_for(xp):  # subnormals flushed to zero on the fast paths (kernels.flush)
        if every is None:
            return stack_forward(layers, xp, states, xs, fuse)
        return checkpointed_forward(layers, xp, states, xs, every)


def sequence_backward(
    layers: list[Any], xp: Any, tape: RecurrentNetworkTape | CheckpointedTape,
    dstates: list[Array | None] | None, dys: Array, need_dxs: bool = True,
    grads_out: list[dict[str, Array] | None] | None = None, need_dstates: bool = True,
) -> tuple[list[dict[str, Array]], list[Array | None], Array | None]:
    """``(grads, dstates_0, dxs)`` from either kind of tape ``sequence_forward`` makes;
    the arguments as ``stack.stack_backward``'s."""
    with flushed_for(xp):
        if isinstance(tape, CheckpointedTape):
            return checkpointed_backward(layers, xp, tape, dstates, dys, need_dxs, grads_out,
                                         need_dstates)
        return stack_backward(layers, xp, tape, dstates, dys, need_dxs, grads_out,
                              need_dstates)


def checkpointed_forward(
    layers: list[Any], xp: Any, states: list[Array], xs: Array, every: int
) -> tuple[CheckpointedTape, list[Array], Array]:
    """``(tape, states_T, ys)`` of ``layers`` over ``xs``, keeping a copy of the states at the
    start of every segment of ``every`` steps instead of the full tape."""
    steps, batch = xs.shape[:2]
    dropouts = _dropouts(layers)
    starts, rng_states, pieces = [], [], []
    for start in range(0, steps, every):
        starts.append([xp.asarray(s, copy=True) for s in states])  # not views of a tape
        rng_states.append([layer.rng.bit_generator.state for layer in dropouts])
        last, states, ys = stack_forward(
            layers, xp, states, xs[start : min(start + every, steps), ...])
        pieces.append(ys)
    ys = pieces[0] if len(pieces) == 1 else xp.concat(pieces, axis=0)
    tape = CheckpointedTape(xs, starts, every, rng_states, steps, batch, last)
    return tape, states, ys


def checkpointed_backward(
    layers: list[Any], xp: Any, tape: CheckpointedTape, dstates: list[Array | None] | None,
    dys: Array, need_dxs: bool = True,
    grads_out: list[dict[str, Array] | None] | None = None, need_dstates: bool = True,
) -> tuple[list[dict[str, Array]], list[Array | None], Array | None]:
    """``(grads, dstates_0, dxs)`` from a checkpointed tape: each segment, last first, is
    recomputed from its states (its Dropout masks redrawn from the generator states it started
    with, the generators left as the forward pass left them) and backpropagated through; the
    segments' weight gradients are summed, in place on numpy and CuPy. ``grads_out``
    (``gradient_buffers``) receives the fast paths' gradients of every segment but the first
    before they are added. ``RuntimeError`` when a layer's parameters changed since the
    forward pass; ``ValueError`` for a tape of another number of layers or inputs."""
    first = layers[0]
    example, wanted = tuple(tape.xs.shape[2:]), first.input_shape  # (n_in,), or () for ids
    if example == () and getattr(first, "takes_one_hot_ids", False):
        wanted = ()  # ids in place of one-hot rows
    if len(tape.last.tapes) != len(layers) or (wanted is not None and example != wanted):
        owner = repr(first) if len(layers) == 1 else "RecurrentNetwork"
        given = f"inputs of {example[0]}" if example else "ids"
        raise ValueError(f"{owner}: the checkpointed tape is of {len(tape.last.tapes)} layers "
                         f"and {given}, not this one's; pass the tape its forward_sequence "
                         "returned")
    dropouts = _dropouts(layers)
    after = [layer.rng.bit_generator.state for layer in dropouts]
    grads: list[dict[str, Array]] | None = None
    dxs: list[Array | None] = []
    try:
        for k in reversed(range(len(tape.states))):
            start, stop = k * tape.every, min((k + 1) * tape.every, tape.steps)
            segment = tape.last
            if k < len(tape.states) - 1:
                for layer, state in zip(dropouts, tape.rng_states[k], strict=True):
                    layer.rng.bit_generator.state = state
                segment, _, _ = stack_forward(layers, xp, tape.states[k],
                                              tape.xs[start:stop, ...])
            found, dstates, dx = stack_backward(
                layers, xp, segment, dstates, dys[start:stop, ...], need_dxs,
                None if grads is None else grads_out, need_dstates or k > 0)
            grads = found if grads is None else _added(grads, found)
            dxs.insert(0, dx)
    finally:
        for layer, state in zip(dropouts, after, strict=True):
            layer.rng.bit_generator.state = state
    assert grads is not None and dstates is not None  # a tape has at least one segment
    whole = None
    if need_dxs and dxs[0] is not None:  # None: the input is ids
        whole = dxs[0] if len(dxs) == 1 else xp.concat(dxs, axis=0)
    return grads, dstates, whole


def _added(total: list[dict[str, Array]], more: list[dict[str, Array]]
           ) -> list[dict[str, Array]]:
    """``total`` plus ``more``, group by group, into ``total``'s own arrays where they take
    ``out=`` (numpy, CuPy: the first segment's gradients, which nothing else holds)."""
    for group, mine in zip(total, more, strict=True):
        for name, g in mine.items():
            mod = out_module(group[name])
            if mod is None:
                group[name] = group[name] + g
            else:
                mod.add(group[name], g, out=group[name])
    return total


def _dropouts(layers: list[Any]) -> list[Any]:
    return [layer for layer in layers if hasattr(layer, "rng")]
