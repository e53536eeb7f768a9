"""Training: one step of a ``Network`` (``train``) or a ``RecurrentNetwork`` over a sequence
(``train_recurrent``), the loss read back from the device, and gradient clipping by global
norm. This module sits above ``network.py`` and ``recurrent.py``: data flows down from here
to the networks, their layers and the kernels, and nothing below imports it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from .backend import check_same_place, namespace_of, to_numpy, zeros_like_place
from .checkpointing import checkpointed_backward, checkpointed_forward, segment_length
from .layers.base import Array, check_real, restore
from .losses import check_loss_for, loss_function, mask_weights
from .network import Chain, Network
from .optim import Optimizer, StateGroup
from .recurrent import RecurrentNetwork, gradient_buffers


def check_optimizer(optimizer: Any, where: str) -> None:
    """Raise ``TypeError`` unless ``optimizer`` is an object with a ``step`` (not a string such
    as "sgd", nor the class ``SGD`` itself)."""
    if isinstance(optimizer, type) or not callable(getattr(optimizer, "step", None)):
        raise TypeError(
            f"{where}: optimizer must be an optimizer object such as dualtape.SGD(0.1) or "
            f"dualtape.Adam(), got {optimizer!r}"
        )


def blame_non_finite(where: str, suspects: dict[str, list[Array]]) -> None:
    """After a non-finite loss: raise ``FloatingPointError`` naming the first of ``suspects``
    (the initial state, the parameters) that holds NaN or inf; return if none does."""
    for what, arrays in suspects.items():
        for a in arrays:
            xp = namespace_of(a)
            if not bool(xp.all(xp.isfinite(a))):
                raise FloatingPointError(
                    f"{where}: NaN or inf in {what}, so the loss is not finite; no update was "
                    "applied"
                )


def checked_objective(net: Any, kind: type, other: str, optimizer: Any, loss: str,
                      where: str) -> Any:
    """The loss function named ``loss``, once ``net`` is a ``kind`` (``TypeError`` pointing
    to ``other``, the function for the other kind), ``optimizer`` an optimizer and ``loss``
    one that fits ``net``'s output."""
    if not isinstance(net, kind):
        raise TypeError(f"{where}: expected a {kind.__name__}, got a {type(net).__name__}; "
                        f"{other}")
    check_optimizer(optimizer, where)
    objective = loss_function(loss)
    check_loss_for(loss, net.layers[-1], net.n_out, where)
    return objective


def read_loss(xp: Any, value: Array, x: Array, where: str, optimizer: Any = None,
              suspects: Callable[[], dict[str, list[Array]]] = dict) -> float:
    """The loss ``value`` as a float, read from the device together with whether the input
    ``x`` is finite (one transfer, one sync); NaN or inf in either raises
    ``FloatingPointError`` (the caller has applied no update yet), naming the first of the
    arrays ``suspects()`` gives (asked only then) that holds NaN or inf
    (``blame_non_finite``). With an ``optimizer`` that spans processes
    (``distributed.DataParallel``) both are averaged over them first, so every process
    raises, or none."""
    try:
        return _read_loss(xp, value, x, where, optimizer)
    except FloatingPointError:
        blame_non_finite(where, suspects())
        raise


def _read_loss(xp: Any, value: Array, x: Array, where: str, optimizer: Any) -> float:
    finite = xp.astype(xp.all(xp.isfinite(x)), value.dtype)
    local = [float(v) for v in to_numpy(xp.stack([value, finite]))]
    loss, input_ok = mean_over_processes(optimizer, local)
    if not local[1]:
        raise FloatingPointError(f"{where}: the input holds NaN or inf; no update was applied")
    if input_ok < 1.0:
        raise FloatingPointError(f"{where}: another process's input holds NaN or inf; no "
                                 "update was applied on any process")
    if not math.isfinite(loss):
        raise FloatingPointError(
            f"{where}: the loss is {loss}; no update was applied. Check the targets for "
            "NaN/inf, or lower the learning rate"
        )
    return loss


def mean_over_processes(optimizer: Any, values: list[float]) -> list[float]:
    """``values`` averaged over the processes that train with ``optimizer``: one that spans
    processes (``distributed.DataParallel``) has a collective ``mean``; others train alone."""
    mean = getattr(optimizer, "mean", None)
    return values if mean is None else mean(values)


def all_params(net: Chain) -> Iterable[Array]:
    """Every parameter array of ``net``."""
    return (p for group in net.params for p in group.values())


def train(
    net: Network, x: Any, target: Any, optimizer: Optimizer, loss: str = "squared_error"
) -> float:
    """One training step: forward, loss, backward, update. Returns the loss as a float.

    The loss is averaged over the batch. A NaN or infinite input, or a non-finite loss, raises
    ``FloatingPointError`` before any parameter changes (an infinite input can give a finite
    loss through a saturating layer such as ``Tanh``, yet NaN gradients); an empty batch
    raises ``ValueError``, as does a loss that does not fit the network's output
    (``losses.check_loss_for``: ``"softmax_cross_entropy"`` after a final ``Softmax``,
    ``"cross_entropy"`` without one); integer class labels with ``"squared_error"`` raise
    ``TypeError`` naming the losses that take them.
    """
    objective = checked_objective(net, Network, "train_recurrent trains a RecurrentNetwork on "
                                  "sequences", optimizer, loss, "train")
    xp, x, _ = net._prepare(x)
    if x.shape[0] == 0:
        raise ValueError("train: the batch is empty (0 examples); give at least one")
    tapes, y = net._forward(xp, x)
    value, dy = objective(xp, y, target)
    result = read_loss(xp, value, x, "train", optimizer,
                       lambda: {"the network's parameters": list(all_params(net))})
    grads, _ = net._backward(xp, tapes, dy)
    optimizer.step(net.params, grads)
    return result


def train_recurrent(
    rnet: RecurrentNetwork,
    xs: Any,
    targets: Any,
    optimizer: Optimizer,
    state: Sequence[Array] | None = None,
    mask: Any = None,
    loss: str = "squared_error",
    learn_initial_state: bool = False,
    tape: str | int = "full",
) -> tuple[float, list[Array]]:
    """One training call over a sequence: forward, loss, backprop through time, one update.

    Shapes (``T`` steps, ``B`` sequences, ``n_in``/``n_out`` the network's sizes):

    - ``xs``: ``(T, B, n_in)``, or ``(T, n_in)`` for one sequence; floating point.
    - ``targets``: the outputs' shape, ``(T, B, n_out)`` or ``(T, n_out)``; for the two cross
      entropies also integer class labels ``(T, B)`` or ``(T,)``, on the network's backend.
    - ``mask``: None (every step has a target), or ``(T,)`` or ``(T, B)``, boolean or real 0/1;
      1 = the step has a target (the others' targets are ignored, any value).
    - ``state``: None (zeros), or a list with one state per recurrent layer, each ``(B, o)`` or
      ``(o,)``, as ``rnet.initial_state(B)`` gives (an entry None: zeros).
    - ``loss``: ``"squared_error"`` (½·Σ(y − t)²), ``"softmax_cross_entropy"`` (on logits: a
      network without a final ``Softmax``) or ``"cross_entropy"`` (after a ``Softmax``); the
      other pairings, and either cross entropy over one output, raise ``ValueError``.

    The loss is summed over the time steps that have a target and averaged over the batch, so
    at batch 1 each step's gradient is Grenade's ``output − target``. The gradients of all steps
    are summed into one update; with momentum and L2 at 0 that equals Grenade's per-step fold.
    ``tape`` is the tape policy (``"full"``, ``"sqrt"`` or a number of steps k, as in
    ``RecurrentNetwork.forward_sequence``): ``"sqrt"`` keeps the states every ⌈√T⌉ steps and
    recomputes one segment at a time in backward, for long sequences that a full tape would
    not fit in memory.
    With ``learn_initial_state=True`` the list ``state`` is updated in place by the optimizer,
    as Grenade's ``trainRecurrent`` learns its recurrent inputs. Returns ``(loss, state_T)``,
    the loss a float, ``state_T`` in the form of ``xs``; a NaN or infinite input, or a
    non-finite loss, raises ``FloatingPointError`` before any update (naming the state or the
    parameters when they hold NaN or inf); an empty batch raises ``ValueError``. On numpy and
    CuPy the LSTM gradients handed to ``optimizer.step`` are written into arrays reused by the
    next call (``gradient_buffers``): an optimizer must not keep them.
    """
    objective = checked_objective(rnet, RecurrentNetwork, "train trains a Network", optimizer,
                                  loss, "train_recurrent")
    xp, xs, single = rnet._prepare_sequence(xs)
    steps, batch = xs.shape[:2]
    if batch == 0:
        raise ValueError("train_recurrent: the batch is empty (0 sequences); give at least one")
    if learn_initial_state and not isinstance(state, list):
        raise ValueError("train_recurrent: learn_initial_state=True needs `state`, a list to learn")
    states, _ = rnet._check_states(state, batch)
    every = segment_length(tape, steps)
    if every is None:
        kept, states_last, ys = rnet._forward_sequence(xp, states, xs)
    else:
        kept, states_last, ys = checkpointed_forward(rnet, xp, states, xs, every)
    weights = None if mask is None else mask_weights(mask, steps, batch, ys)
    value, dys = objective(xp, ys, targets, weights)
    result = read_loss(xp, value, xs, "train_recurrent", optimizer, lambda: {
        "the initial state": states, "the network's parameters": list(all_params(rnet))})
    if every is None:
        grads, dstates, _ = rnet._backward_sequence(xp, kept, dys, None, need_dxs=False,
                                                    grads_out=gradient_buffers(rnet),
                                                    need_dstates=learn_initial_state)
    else:
        grads, dstates, _ = checkpointed_backward(rnet, xp, kept, dys, None, need_dxs=False,
                                                  need_dstates=learn_initial_state,
                                                  scratch=gradient_buffers(rnet))
    if learn_initial_state:
        learned = StateGroup(state, {str(k): s for k, s in enumerate(states)})
        gradients = {str(k): d for k, d in enumerate(dstates)}
        optimizer.step([*rnet.params, learned], [*grads, gradients])
        for k in range(len(states)):
            # each state keeps the form it came in, (o,) or (batch, o), whatever xs's form
            own_form_single = np.ndim(state[k]) == 1  # type: ignore[index]
            state[k] = restore(learned[str(k)], own_form_single)  # type: ignore[index]
    else:
        optimizer.step(rnet.params, grads)
    return result, [restore(s, single) for s in states_last]


def clip_gradients(grads: Any, max_norm: float) -> tuple[Any, Any]:
    """``(clipped, norm)``: ``grads`` scaled by ``min(1, max_norm / norm)``, ``norm`` the
    global L2 norm of all their arrays together (torch's ``clip_grad_norm_``, not in place).

    ``grads`` is what a backward pass returns, a list of gradient dicts (one per layer), or
    one dict; the result has the same form, with new arrays. ``norm`` is a 0-d array on the
    gradients' device, in their dtype: ``float(norm)`` reads it (on CuPy that waits for the
    GPU, so a training loop can leave it there). It is computed with the largest magnitude
    factored out, so a float32 norm beyond 3.4e38 is still finite and still clips instead of
    zeroing every gradient. ``max_norm`` is a positive number (``inf``: measure only). A NaN
    or infinite gradient gives a NaN or infinite norm and non-finite clipped gradients: check
    ``norm`` before an update. No arrays at all: ``(grads, 0.0)``. Gradients of two backends
    or devices raise ``TypeError``/``ValueError`` naming both.
    """
    check_real("clip_gradients", "max_norm", max_norm, "(0, inf]")
    single = isinstance(grads, Mapping)
    groups = [grads] if single else grads
    if not isinstance(groups, list | tuple) or not all(isinstance(g, Mapping) for g in groups):
        raise TypeError("clip_gradients: expected a gradient dict or a list of them (what "
                        f"backward returns), got {type(grads).__name__}")
    arrays = [g for group in groups for g in group.values()]
    if not arrays:
        return grads, 0.0
    for k, a in enumerate(arrays[1:], start=1):
        check_same_place(a, arrays[0], f"gradient {k}", "clip_gradients")
    xp = namespace_of(arrays[0])
    largest = _largest(xp, arrays)
    scale = xp.where(xp.isfinite(largest) & (largest > 0), largest, xp.ones_like(largest))
    inverse = 1.0 / scale
    total = sum(xp.sum((g * inverse) ** 2) for g in arrays)
    norm = scale * xp.sqrt(total)
    limit = min(float(max_norm), float(xp.finfo(norm.dtype).max))  # inf / inf would warn
    # below the limit exactly 1 (a quotient limit / max(norm, limit) may round, torch's does)
    factor = xp.where(norm > limit, limit / xp.maximum(norm, xp.full_like(norm, limit)),
                      xp.ones_like(norm))
    clipped = [{k: g * factor for k, g in group.items()} for group in groups]
    return (clipped[0] if single else clipped), norm


def _largest(xp: Any, arrays: list[Array]) -> Array:
    """The largest magnitude in ``arrays`` (0-d; 0 when all are empty)."""
    peaks = [xp.max(xp.abs(a)) if math.prod(a.shape) else zeros_like_place((), a)
             for a in arrays]
    return xp.max(xp.stack(peaks))
