"""Targets for the last step only (issue 54 item 1): ``train_recurrent`` and
``backpropagate_sequence`` take, besides a target for every step, one for the last step alone,
``(B, o)`` or integer class labels ``(B,)``, as a many-to-one model (a forecaster, a sequence
classifier) has. ``full_length`` makes it the full-length target it stands for, zeros at the
other steps and a mask selecting the last one, before any route is chosen, so every route
takes the one form it already handles, with the same bits as that masked target."""

from __future__ import annotations

from typing import Any

import numpy as np

from .backend import backend_of, from_host, namespace_of, zeros_like_place
from .layers.edges import holds_integers
from .losses import takes_labels


def full_length(rnet: Any, xs: Any, targets: Any, mask: Any, loss: Any, where: str
                ) -> tuple[Any, Any]:
    """``(targets, mask)`` as ``where`` (a recurrent verb of ``rnet`` over ``xs``) takes them:
    a target for the last step (``(B, o)``, ``(B,)`` labels; ``(o,)``, ``()`` at batch 1)
    becomes zeros at the other steps and it at the last, with a ``(T,)`` mask of the last step;
    a full-length one (``(T, B, o)``, ``(T, B)`` labels; ``(T, o)``, ``(T,)`` at batch 1) is
    returned as given, as is any other target of a callable ``loss``. At the same shape a
    full-length one holds integer labels, a last-step one dense values. A last-step target
    with a ``mask``, or a target of neither shape for a named ``loss``, raises ``ValueError``
    naming it."""
    shape, given = getattr(targets, "shape", None), getattr(xs, "shape", None)
    if shape is not None and given is not None and len(given) > 1 and (
            tuple(shape[:2]) == tuple(given[:2])) and (
            len(shape) == 3 or holds_integers(targets)):
        return targets, mask  # full length, as most calls give it: the loss checks the rest
    if shape is None and callable(loss):
        return targets, mask  # not an array: the loss's own kind of target
    _, prepared, _ = rnet._prepare_sequence(xs)
    steps, batch = (int(n) for n in prepared.shape[:2])
    out = rnet.n_out if rnet.n_out is not None else int(prepared.shape[-1])
    if shape is None:  # a list or a number: an array where the network is, as losses make it
        targets = from_host(np.asarray(targets), backend_of(prepared))
    got, labels = tuple(targets.shape), holds_integers(targets)
    one = batch == 1  # the forms without the batch axis, as for any target at batch 1
    full = {(steps, batch, out), (steps, batch)} | ({(steps, out), (steps,)} if one else set())
    last = {(batch, out), (batch,)} | ({(out,), ()} if one else set())
    if got in full and (got not in last or steps == 1 or labels):
        return targets, mask  # at T = 1 the two forms mean the same
    if got not in last:
        if callable(loss):
            return targets, mask
        classes = (f", or integer class labels {(steps, batch)} or {(batch,)}"
                   if takes_labels(loss) else "")
        raise ValueError(f"{where}: targets must have shape {(steps, batch, out)} (every step) "
                         f"or {(batch, out)} (the last step only){classes}, got {got}")
    if mask is not None:
        raise ValueError(f"{where}: mask must be None with a target for the last step only "
                         f"(shape {got}), which scores that step alone; to mask steps give "
                         f"the full-length target {(steps, batch, out)}")
    if steps == 1:  # the whole target: no mask to take (nor the faster routes to lose)
        return targets[None, ...], None
    zeros = zeros_like_place((steps - 1, *got), targets)
    return (namespace_of(targets).concat([zeros, targets[None, ...]], axis=0),
            from_host(np.arange(steps) == steps - 1, backend_of(prepared)))
