"""Checkpointed tapes for ``RecurrentNetwork`` and recurrent layers: the states every k
steps, not every step.

The forward pass runs the sequence in segments of ``every`` steps and keeps, for each
segment, only the states it starts from (and what the Dropout layers' generators were then);
backward runs the segments last to first, recomputing each one's full tape from its states
through the same code (fast paths included) and backpropagating through it at once, so only
one segment's tape exists at a time. That is Chen et al. (2016)'s trade, as
``torch.utils.checkpoint`` makes it: one more forward pass, less the last segment's (kept
from the first), for memory that grows with ``T / every + every`` instead of ``T``;
``every = ⌈√T⌉`` (``"sqrt"``) balances the two.
The functions take a network's private sequence methods (``layers``, ``_forward_sequence``,
``_backward_sequence`` over lists of states); ``OneLayer`` gives a single recurrent layer
those, so this module knows no network and layers may use it.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

from .backend import out_module

Array = Any

POLICIES = ("full", "sqrt")
"""The named tape policies; an integer k >= 1 checkpoints every k steps."""


class CheckpointedTape(NamedTuple):
    """A checkpointed tape: the inputs ``xs`` (T, B, n_in), ``states``
    (per segment, the list of every recurrent layer's state at its start), ``every`` (the
    segment length), ``rng_states`` (per segment, each Dropout layer's generator state at its
    start), the parameters' ``versions`` (one per layer) it was made with, ``steps``,
    ``batch``, and ``last``: the last segment's own full tape, which backward, beginning
    there, would otherwise recompute at once."""

    xs: Array
    states: list[list[Array]]
    every: int
    rng_states: list[list[dict]]
    versions: list[int]
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


def checkpointed_forward(
    rnet: Any, xp: Any, states: list[Array], xs: Array, every: int
) -> tuple[CheckpointedTape, list[Array], Array]:
    """``(tape, states_T, ys)`` of ``rnet`` over ``xs``, keeping a copy of the states at the
    start of every segment of ``every`` steps instead of the full tape."""
    steps, batch = xs.shape[:2]
    dropouts = _dropouts(rnet)
    starts, rng_states, pieces = [], [], []
    for start in range(0, steps, every):
        starts.append([xp.asarray(s, copy=True) for s in states])  # not views of a tape
        rng_states.append([layer.rng.bit_generator.state for layer in dropouts])
        last, states, ys = rnet._forward_sequence(
            xp, states, xs[start : min(start + every, steps), ...])
        pieces.append(ys)
    ys = pieces[0] if len(pieces) == 1 else xp.concat(pieces, axis=0)
    versions = [layer.params.version for layer in rnet.layers]
    tape = CheckpointedTape(xs, starts, every, rng_states, versions, steps, batch, last)
    return tape, states, ys


def checkpointed_backward(
    rnet: Any, xp: Any, tape: CheckpointedTape, dys: Array, dstates: list[Array] | None,
    need_dxs: bool = True, need_dstates: bool = True,
    scratch: list[dict[str, Array] | None] | None = None,
) -> tuple[list[dict[str, Array]], list[Array | None], Array | None]:
    """``(grads, dstate_0, dxs)`` from a checkpointed tape: each segment, last first, is
    recomputed from its states (its Dropout masks redrawn from the generator states it started
    with, the generators left as the forward pass left them) and backpropagated through; the
    segments' weight gradients are summed, in place on numpy and CuPy. ``scratch``
    (``gradient_buffers``) receives the fast paths' gradients of every segment but the first
    before they are added. ``RuntimeError`` when a layer's parameters changed since the
    forward pass; ``ValueError`` for a tape of another number of layers or inputs."""
    layer = rnet.layers[0]
    if len(tape.versions) != len(rnet.layers) or tape.xs.shape[-1] != layer.n_in:
        owner = repr(layer) if len(rnet.layers) == 1 else type(rnet).__name__
        raise ValueError(f"{owner}: the checkpointed tape is of {len(tape.versions)} layers "
                         f"and inputs of {tape.xs.shape[-1]}, not this one's; pass the tape "
                         "its forward_sequence returned")
    for layer, version in zip(rnet.layers, tape.versions, strict=True):
        layer._check_version(_Version(version))
    dropouts = _dropouts(rnet)
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
                segment, _, _ = rnet._forward_sequence(xp, tape.states[k],
                                                       tape.xs[start:stop, ...])
            found, dstates, dx = rnet._backward_sequence(
                xp, segment, dys[start:stop, ...], dstates, need_dxs,
                None if grads is None else scratch, need_dstates or k > 0)
            grads = found if grads is None else _added(grads, found)
            dxs.insert(0, dx)
    finally:
        for layer, state in zip(dropouts, after, strict=True):
            layer.rng.bit_generator.state = state
    whole = None
    if need_dxs:
        whole = dxs[0] if len(dxs) == 1 else xp.concat(dxs, axis=0)
    return grads, dstates, whole


class OneLayer:
    """A recurrent layer as the one-layer network the checkpointing functions take."""

    def __init__(self, layer: Any) -> None:
        self.layers = [layer]

    def _forward_sequence(self, xp: Any, states: list[Array], xs: Array
                          ) -> tuple[Any, list[Array], Array]:
        tape, state, ys = self.layers[0]._forward_sequence(xp, states[0], xs)
        return tape, [state], ys

    def _backward_sequence(
        self, xp: Any, tape: Any, dys: Array, dstates: list[Array], need_dxs: bool = True,
        scratch: list[dict[str, Array] | None] | None = None, need_dstates: bool = True,
    ) -> tuple[list[dict[str, Array]], list[Array | None], Array | None]:
        grads, dstate, dxs = self.layers[0]._backward_sequence(
            xp, tape, dstates[0], dys, need_dxs, None if scratch is None else scratch[0],
            need_dstates)
        return [grads], [dstate], dxs


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


class _Version(NamedTuple):
    version: int


def _dropouts(rnet: Any) -> list[Any]:
    return [layer for layer in rnet.layers if hasattr(layer, "rng")]
