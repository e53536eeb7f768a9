"""Training, as two verbs: ``backpropagate`` (the loss and the gradients of a ``Network`` on a
batch) and ``backpropagate_sequence`` (of a ``RecurrentNetwork`` over a sequence), nothing read
back from the device, then the optimizer's update; ``train``/``train_recurrent`` are the two
with the loss read (non-finite refused) in between. And gradient clipping by global norm.
This module sits above ``network.py`` and ``recurrent.py``: data flows down from here to the
networks, their layers and the kernels, and nothing below imports it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, MutableMapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from .backend import (
    backend_of,
    check_same_place,
    dtype_name,
    from_host,
    namespace_of,
    out_module,
    to_numpy,
    zeros_like_place,
)
from .checkpointing import segment_length
from .kernels.overlap import offered, overlap_requested
from .last_step import full_length
from .layers.base import Array
from .layers.edges import check_real, prepare_like, restore
from .losses import Loss, check_loss_for, loss_function, mask_weights
from .network import Chain, Network
from .optim import Optimizer, StateGroup
from .planned_backprop import planned_descent, planned_forward, planned_grads
from .recurrent import RecurrentNetwork, gradient_buffers
from .route_choice import layer_loops, planned_choice
from .routes import LAYERS, PLANNED, WHOLE_STEP, record
from .switches import held


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


def check_kind(net: Any, kind: type, other: str, where: str) -> None:
    """``TypeError`` unless ``net`` is a ``kind``, pointing to ``other``, the function for the
    other kind of network."""
    if not isinstance(net, kind):
        raise TypeError(f"{where}: expected a {kind.__name__}, got a {type(net).__name__}; "
                        f"{other}")


def objective_for(loss: str | Loss, net: Chain, where: str) -> LossCall:
    """The ``LossCall`` of one training call of ``net`` by ``loss``: a callable of the losses'
    signature, or the loss function it names, once that fits ``net``'s output
    (``losses.check_loss_for``)."""
    batch_axis = -2 if isinstance(net, RecurrentNetwork) else 0
    if callable(loss):
        return LossCall(loss, where, batch_axis)
    last = net.layers[-1]
    key = (loss, getattr(last, "kind", None), net.n_out)
    objective = _FITTING.get(key) if type(loss) is str else None
    if objective is None:
        objective = loss_function(loss)
        check_loss_for(loss, last, net.n_out, where)
        _FITTING[key] = objective
    return LossCall(objective, where, batch_axis)


_FITTING: dict[tuple[str, Any, Any], Loss] = {}
"""The loss each name gives where it fits a network's last layer (by its kind) and output
count (``check_loss_for`` passed): the check made once for each."""


class LossCall:
    """The loss of one training call, ``loss(xp, ys, targets[, weights]) -> (value, dys)``,
    called once: a second call returns the first one's result (the layer path after a
    planned pass that took the loss but not its gradient's layout, ``planned_backprop``: the
    same outputs, bit for bit), checked by ``checked_loss`` (``batch_axis``: that of the
    outputs)."""

    __slots__ = ("batch_axis", "found", "loss", "where")

    def __init__(self, loss: Loss, where: str, batch_axis: int) -> None:
        self.loss, self.where, self.batch_axis = loss, where, batch_axis
        self.found: tuple[Array, Array] | None = None

    def __call__(self, xp: Any, ys: Array, targets: Any, *weights: Array) -> tuple[Array, Array]:
        if self.found is None:
            self.found = checked_loss(self.loss(xp, ys, targets, *weights), ys, self.where,
                                      self.batch_axis)
        return self.found


def checked_loss(found: Any, ys: Array, where: str, batch_axis: int) -> tuple[Array, Array]:
    """What a loss returned for the outputs ``ys`` (batch axis ``batch_axis``), ``(value,
    dys)``, as training takes it: the value a 0-d real array (a Python number made one, of
    ``ys``'s dtype and place), the gradient as ``backward`` takes ``dy`` (``ys``'s shape and
    place; a list converted, another float dtype cast to ``ys``'s); anything else raises a
    one-line error naming it."""
    try:
        value, dys = found
    except (TypeError, ValueError):
        raise TypeError(f"{where}: the loss must return (value, gradient), got "
                        f"{type(found).__name__}") from None
    if type(dys) is not np.ndarray or type(ys) is not np.ndarray or dys.dtype != ys.dtype or (
            dys.shape != ys.shape):  # else nothing to check: numpy's own, as it should be
        _, dys, _ = prepare_like(dys, tuple(ys.shape), ys, where, "the loss gradient",
                                 batch_axis=batch_axis)
    if type(value) in (float, int):  # the most natural thing for a loss to return
        return from_host(np.asarray(value, dtype_name(ys.dtype)), backend_of(ys)), dys
    if isinstance(value, np.floating) and type(ys) is np.ndarray:  # numpy's sums give these
        return value, dys
    if getattr(value, "shape", None) != () or not hasattr(value, "dtype"):
        raise TypeError(f"{where}: the loss value must be a number or a 0-d array, got "
                        f"{type(value).__name__} of shape {getattr(value, 'shape', ())}")
    check_same_place(value, ys, "the loss value", where)
    if not namespace_of(value).isdtype(value.dtype, "real floating"):
        raise TypeError(f"{where}: the loss value must be real floating point, got "
                        f"{value.dtype}")
    return value, dys


def read_loss(xp: Any, value: Array, finite: Array, where: str, optimizer: Any = None,
              suspects: Callable[[], dict[str, list[Array]]] = dict) -> float:
    """The loss ``value`` as a float, read from the device together with ``finite``, whether
    the input is finite (0-d, one transfer, one sync); NaN or inf in either raises
    ``FloatingPointError`` (the caller has applied no update yet), naming the first of the
    arrays ``suspects()`` gives (asked only then) that holds NaN or inf
    (``blame_non_finite``). With an ``optimizer`` that spans processes
    (``distributed.DataParallel``) both are averaged over them first, so every process
    raises, or none."""
    try:
        return _read_loss(xp, value, finite, where, optimizer)
    except FloatingPointError:
        blame_non_finite(where, suspects())
        raise


def _read_loss(xp: Any, value: Array, finite: Array, where: str, optimizer: Any) -> float:
    if isinstance(value, np.ndarray | np.generic):  # on the host: nothing to batch
        local = [float(value), float(finite)]
    else:  # one transfer from the device for both
        local = [float(v) for v in to_numpy(xp.stack([value, xp.astype(finite, value.dtype)]))]
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


class Backprop(NamedTuple):
    """What ``backpropagate_sequence`` returns: the ``loss`` (a 0-d array on the device),
    the ``grads`` (one dict per parameter group, aligned with ``rnet.params``), the final
    ``state`` (one array per recurrent layer) and, when asked for, ``dstate``: the initial
    state's gradient (None otherwise); states in the form of ``xs``."""

    loss: Array
    grads: list[dict[str, Array]]
    state: list[Array]
    dstate: list[Array] | None


class _Forward(NamedTuple):
    """A forward pass and its loss, in the networks' own forms: the namespace, the loss and
    whether the input is finite (0-d arrays), the tape and the output's gradient, the final
    and initial states (``(batch, o)`` each; none for a ``Network``), whether the input
    was one sequence and the input as prepared. Training reads the loss from it before any
    backward pass, so a refused input costs no backward pass (nor its warnings of NaN
    products)."""

    xp: Any
    loss: Array
    finite: Array
    tape: Any
    dy: Array
    state: list[Array]
    initial: list[Array]
    single: bool
    x: Array


@held
def backpropagate(
    net: Network, x: Any, target: Any, *, loss: str | Loss = "squared_error"
) -> tuple[Array, list[dict[str, Array]]]:
    """``(loss, grads)`` of ``net`` on a batch, as ``train`` computes them, with no update.

    ``loss`` is a 0-d array left on the device (nothing is read back: ``float(loss)`` reads
    it), NaN when the input holds NaN or inf (which can give a finite loss through a
    saturating layer yet NaN gradients), so one check of the loss refuses both, as ``train``
    does; ``grads`` has one dict per parameter group, aligned with ``net.params``, ready for
    ``clip_gradients`` and ``optimizer.step(net.params, grads)``. ``loss`` is a name, as in
    ``train``, or a callable of the losses' signature, ``loss(xp, y, target) -> (value, dy)``
    (``dualtape.losses``), called once: ``value`` a number or a 0-d array, ``dy`` taken as
    ``Network.backward`` takes it (``checked_loss``). An empty batch raises ``ValueError``.
    """
    check_kind(net, Network, "backpropagate_sequence takes a RecurrentNetwork", "backpropagate")
    found = _forward(net, x, target, loss, "backpropagate")
    return _flagged(found), net._backward(found.xp, found.tape, found.dy)[0]


@held
def backpropagate_sequence(
    rnet: RecurrentNetwork,
    xs: Any,
    targets: Any,
    *,
    state: Sequence[Array] | None = None,
    mask: Any = None,
    loss: str | Loss = "squared_error",
    tape: str | int = "full",
    need_dstate: bool = False,
) -> Backprop:
    """The loss and gradients of ``rnet`` over a sequence, as ``train_recurrent`` computes them,
    with no update: a ``Backprop(loss, grads, state, dstate)``.

    ``xs``, ``targets`` (every step's, or the last step's alone), ``state``, ``mask``,
    ``tape`` as in ``train_recurrent``; ``loss`` a
    name or a callable ``loss(xp, ys, targets, weights=None) -> (value, dys)`` of the losses'
    signature (``dualtape.losses``; ``weights`` given only with a ``mask``), called once
    whatever path runs, its result taken as ``backpropagate`` says. ``loss`` is a 0-d
    array left on the device, NaN when the input holds NaN or inf (see ``backpropagate``);
    ``state`` the states the sequence ended in; ``dstate`` the gradient of ``state``'s initial
    states, computed only with ``need_dstate=True`` (else None; it costs a product per layer
    and step). An empty batch raises ``ValueError``.

    On numpy and CuPy the fast paths of LSTM, StandardLSTM, GRU and FullyConnected write
    their gradients into arrays kept with the network and reused
    (``recurrent.gradient_buffers``): the next ``backpropagate_sequence`` or
    ``train_recurrent`` of ``rnet`` overwrites ``grads`` (copy them to keep them, as a loop
    that accumulates gradients over calls does, or make them read-only: the next call then
    writes new arrays); ``clip_gradients`` returns new arrays, or scales them where they are
    with ``in_place=True``. A stack of LSTMs, StandardLSTMs or GRUs (an Embedding first, a
    FullyConnected on top or not) on numpy takes a pass of few Python-level calls with the
    layer path's bits (``planned_backprop``).
    """
    check_kind(rnet, RecurrentNetwork, "backpropagate takes a Network",
               "backpropagate_sequence")
    objective = objective_for(loss, rnet, "backpropagate_sequence")
    targets, mask = full_length(rnet, xs, targets, mask, loss, "backpropagate_sequence")
    plan, _, declined, prepared, single = planned_choice(
        rnet, xs, tape, "need_dstate=True" if need_dstate else None)
    if plan is not None:
        done = planned_forward(plan, rnet, prepared, targets, objective, mask, state, False,
                               single)
        if done is not None:
            handing = overlap_requested()
            record(rnet, "backpropagate_sequence", PLANNED, "compiled", declined, handing)
            loss_now = np.asarray(done.value)
            return Backprop(loss_now if done.finite else np.full_like(loss_now, math.nan),
                            planned_grads(plan, prepared, done, handing), done.states, None)
        declined = ((PLANNED, "the loss gradient is not C order"),)
    found = _forward_sequence(rnet, prepared, targets, state, mask, objective, tape,
                              "backpropagate_sequence", None if prepared is xs else single)
    loops, slower = layer_loops(found.x)
    record(rnet, "backpropagate_sequence", LAYERS, loops, (*declined, *slower),
           offered(found.x))
    grads, dstates = _sequence_gradients(rnet, found, need_dstate)
    dstate = [restore(d, found.single) for d in dstates] if need_dstate else None
    return Backprop(_flagged(found), grads, [restore(s, found.single) for s in found.state],
                    dstate)


def _flagged(found: _Forward) -> Array:
    """The loss, NaN where the input is not finite."""
    xp = found.xp
    return xp.where(found.finite, found.loss, xp.full_like(found.loss, math.nan))


def _forward(net: Network, x: Any, target: Any, loss: str | Loss, where: str) -> _Forward:
    objective = objective_for(loss, net, where)
    xp, x, _ = net._prepare(x)
    if x.shape[0] == 0:
        raise ValueError(f"{where}: the batch is empty (0 examples); give at least one")
    tapes, y = net._forward(xp, x)
    value, dy = objective(xp, y, target)
    return _Forward(xp, value, xp.all(xp.isfinite(x)), tapes, dy, [], [], False, x)


def _forward_sequence(
    rnet: RecurrentNetwork, xs: Any, targets: Any, state: Sequence[Array] | None, mask: Any,
    objective: LossCall, tape: str | int, where: str, single: bool | None = None,
) -> _Forward:
    """The layers' forward pass and loss; ``single`` None: ``xs`` as given, prepared here;
    else already prepared (by ``route_choice.planned_choice``), one sequence or not."""
    if single is None:
        xp, xs, single = rnet._prepare_sequence(xs)
    else:
        xp = namespace_of(xs)
    steps, batch = xs.shape[:2]
    if batch == 0:
        raise ValueError(f"{where}: the batch is empty (0 sequences); give at least one")
    states = rnet._check_states(state, batch)
    kept, states_last, ys = rnet._forward_sequence(xp, states, xs, segment_length(tape, steps))
    if mask is None:
        value, dys = objective(xp, ys, targets)
    else:
        value, dys = objective(xp, ys, targets, mask_weights(mask, steps, batch, ys))
    return _Forward(xp, value, xp.all(xp.isfinite(xs)), kept, dys, states_last, states, single,
                    xs)


def _sequence_gradients(rnet: RecurrentNetwork, found: _Forward, need_dstate: bool
                        ) -> tuple[list[dict[str, Array]], list[Array | None]]:
    """The weight gradients (into ``gradient_buffers`` where the layers fill them) and the
    initial states' (None entries unless ``need_dstate``) of a ``_forward_sequence``."""
    grads, dstates, _ = rnet._backward_sequence(found.xp, found.tape, None, found.dy,
                                                need_dxs=False,
                                                grads_out=gradient_buffers(rnet),
                                                need_dstates=need_dstate)
    return grads, dstates


@held
def train(
    net: Network, x: Any, target: Any, optimizer: Optimizer, loss: str | Loss = "squared_error"
) -> float:
    """One training step: ``backpropagate`` with the loss read (and refused when not finite)
    between its forward and backward passes, then ``optimizer.step``. Returns the loss as a
    float.

    The loss is averaged over the batch. A NaN or infinite input, or a non-finite loss, raises
    ``FloatingPointError`` before any parameter changes (an infinite input can give a finite
    loss through a saturating layer such as ``Tanh``, yet NaN gradients); an empty batch
    raises ``ValueError``, as does a loss that does not fit the network's output
    (``losses.check_loss_for``: ``"softmax_cross_entropy"`` after a final ``Softmax``,
    ``"cross_entropy"`` without one); integer class labels with ``"squared_error"`` raise
    ``TypeError`` naming the losses that take them. ``loss`` may also be a callable, as in
    ``backpropagate``.
    """
    check_kind(net, Network, "train_recurrent trains a RecurrentNetwork on sequences", "train")
    check_optimizer(optimizer, "train")
    found = _forward(net, x, target, loss, "train")
    result = read_loss(found.xp, found.loss, found.finite, "train", optimizer,
                       lambda: {"the network's parameters": list(all_params(net))})
    grads, _ = net._backward(found.xp, found.tape, found.dy)
    optimizer.step(net.params, grads)
    return result


@held
def train_recurrent(
    rnet: RecurrentNetwork,
    xs: Any,
    targets: Any,
    optimizer: Optimizer,
    state: Sequence[Array] | None = None,
    mask: Any = None,
    loss: str | Loss = "squared_error",
    learn_initial_state: bool = False,
    tape: str | int = "full",
) -> tuple[float, list[Array]]:
    """One training call over a sequence: ``backpropagate_sequence`` (forward, loss,
    backprop through time) with the loss read (and refused when not finite) before the
    backward pass, then one ``optimizer.step``.

    Shapes (``T`` steps, ``B`` sequences, ``n_in``/``n_out`` the network's sizes):

    - ``xs``: ``(T, B, n_in)``, or ``(T, n_in)`` for one sequence; floating point.
    - ``targets``: the outputs' shape, ``(T, B, n_out)`` or ``(T, n_out)``; for the two cross
      entropies also integer class labels ``(T, B)`` or ``(T,)``, on the network's backend.
      Or the last step's alone, for a many-to-one model (a forecaster, a sequence
      classifier): ``(B, n_out)`` or ``(n_out,)``, labels ``(B,)`` or ``()``, taken as the
      full-length target with zeros before it and a mask of the last step (the same bits,
      the same route; its gradient reaches the other steps through the recurrence only) and
      so with no ``mask`` of its own (``ValueError``); where the two forms have one shape
      (T = B = n_out), integers are labels of every step, reals the last step's. A target of
      neither shape for a named loss raises ``ValueError`` naming both (a callable loss is
      handed any other target as given).
    - ``mask``: None (every step has a target), or ``(T,)`` or ``(T, B)``, boolean or real 0/1;
      1 = the step has a target (the others' targets are ignored, any value).
    - ``state``: None (zeros), or a list with one state per recurrent layer, each ``(B, o)`` or
      ``(o,)``, as ``rnet.initial_state(B)`` gives (an entry None: zeros).
    - ``loss``: ``"squared_error"`` (½·Σ(y − t)²), ``"softmax_cross_entropy"`` (on logits: a
      network without a final ``Softmax``) or ``"cross_entropy"`` (after a ``Softmax``); the
      other pairings, and either cross entropy over one output, raise ``ValueError``. Or one
      of torch's, averaged over the elements that count (see each in ``dt.losses``):
      ``"mean_squared_error"``, ``"mean_absolute_error"``, ``"huber"``, ``"smooth_l1"``,
      ``"binary_cross_entropy_with_logits"``; or an alias (``losses.ALIASES``: ``"mse"``...).
      Or a callable, as in ``backpropagate_sequence``.

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
    CuPy the gradients handed to ``optimizer.step`` are written into arrays reused by the next
    call (``gradient_buffers``; its step is then kept, ``held_update``): an optimizer must not
    keep them. A stack of LSTMs, StandardLSTMs or GRUs on numpy with the compiled loops (an
    Embedding first or not, a ``FullyConnected`` on top or not, ids or inputs, a state and a
    mask or none, any tape) takes the planned pass (``planned_backprop``: its checks made
    once per network, input form and tape): with ``SGD`` itself (not a subclass), no momentum
    and no regulariser, on LSTMs only fed real-valued inputs with the full tape, the backward
    pass and update of every layer are one compiled call (no gradient arrays, the same step
    to rounding); otherwise ``backpropagate_sequence``'s pass, then the optimizer's step.
    """
    check_kind(rnet, RecurrentNetwork, "train trains a Network", "train_recurrent")
    check_optimizer(optimizer, "train_recurrent")
    if learn_initial_state and not isinstance(state, list):
        raise ValueError("train_recurrent: learn_initial_state=True needs `state`, a list to learn")
    targets, mask = full_length(rnet, xs, targets, mask, loss, "train_recurrent")
    objective = objective_for(loss, rnet, "train_recurrent")
    plan, taken, declined, prepared, single = planned_choice(
        rnet, xs, tape, "learn_initial_state=True" if learn_initial_state else None, optimizer)
    if plan is not None:
        done = planned_forward(plan, rnet, prepared, targets, objective, mask, state,
                               taken == WHOLE_STEP, single)
        if done is not None:
            result = read_loss(np, done.value, done.finite,
                               "train_recurrent", optimizer, lambda: {
                                   "the initial state": rnet._check_states(state,
                                                                           prepared.shape[1]),
                                   "the network's parameters": list(all_params(rnet))})
            handing = taken == PLANNED and overlap_requested()
            record(rnet, "train_recurrent", taken, "compiled", declined, handing)
            if taken == WHOLE_STEP:
                planned_descent(plan, prepared, done, optimizer)
            else:
                optimizer.step(rnet.params, planned_grads(plan, prepared, done, handing))
            return result, done.states
        declined = (*declined, (taken, "the loss gradient is not C order"))
    found = _forward_sequence(rnet, prepared, targets, state, mask, objective, tape,
                              "train_recurrent", None if prepared is xs else single)
    result = read_loss(found.xp, found.loss, found.finite, "train_recurrent", optimizer,
                       lambda: {"the initial state": found.initial,
                                "the network's parameters": list(all_params(rnet))})
    loops, slower = layer_loops(found.x)
    record(rnet, "train_recurrent", LAYERS, loops, (*declined, *slower), offered(found.x))
    if learn_initial_state:
        grads, dstates = _sequence_gradients(rnet, found, True)
        learned = StateGroup(state, {str(k): s for k, s in enumerate(found.initial)})
        gradients = {str(k): d for k, d in enumerate(dstates)}
        optimizer.step([*rnet.params, learned], [*grads, gradients])
        for k in range(len(found.initial)):
            # each state keeps the form it came in, (o,) or (batch, o), whatever xs's form
            own_form_single = np.ndim(state[k]) == 1  # type: ignore[index]
            state[k] = restore(learned[str(k)], own_form_single)  # type: ignore[index]
    else:
        optimizer.step(rnet.params, _sequence_gradients(rnet, found, False)[0])
    return result, [restore(s, found.single) for s in found.state]


def clip_gradients(grads: Any, max_norm: float, *, in_place: bool = False) -> tuple[Any, Any]:
    """``(clipped, norm)``: ``grads`` scaled by ``min(1, max_norm / norm)``, ``norm`` the
    global L2 norm of all their arrays together (torch's ``clip_grad_norm_``).

    ``grads`` is what a backward pass returns, a list of gradient dicts (one per layer), or
    one dict; the result has the same form, with new arrays. With ``in_place=True`` the
    result is ``grads`` itself, its dicts (mutable mappings) changed: an array that owns its
    memory and takes writes (numpy, CuPy; not a view, not read-only) is scaled in place, once
    however many entries hold it, and any other entry is replaced by a new array; the same
    numbers, bit for bit. A training loop whose gradients are used up at once (the
    ``gradient_buffers`` of ``backpropagate_sequence``) saves a copy of every gradient and
    hands its optimizer the same arrays each step (``Optimizer.step`` keeps such a step).
    ``norm`` is a 0-d array on the
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
    kind = MutableMapping if in_place else Mapping
    if not isinstance(groups, list | tuple) or not all(isinstance(g, kind) for g in groups):
        raise TypeError(f"clip_gradients: expected a gradient dict or a list of them (what "
                        f"backward returns{', changeable for in_place=True' * in_place}), got "
                        f"{type(grads).__name__}")
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
    if in_place:
        _scale_in_place(groups, factor)
        return grads, norm
    clipped = [{k: g * factor for k, g in group.items()} for group in groups]
    return (clipped[0] if single else clipped), norm


def _scale_in_place(groups: Sequence[MutableMapping[str, Array]], factor: Array) -> None:
    """Every entry of ``groups`` times ``factor``: in place where the array owns its memory and
    takes writes, each such array once; else a new array (one per array), made first (a view
    may look into an array that is then scaled in place)."""
    owners: dict[int, tuple[Any, Array]] = {}
    new: dict[int, Array] = {}  # one new array for an array under several names
    for group in groups:
        for k, g in group.items():
            mod = out_module(g)
            if mod is None or g.base is not None or (mod is np and not g.flags.writeable):
                if id(g) not in new:
                    new[id(g)] = g * factor
                group[k] = new[id(g)]
            else:
                owners[id(g)] = mod, g
    for mod, g in owners.values():
        mod.multiply(g, factor, out=g)


def _largest(xp: Any, arrays: list[Array]) -> Array:
    """The largest magnitude in ``arrays`` (0-d; 0 when all are empty)."""
    peaks = [xp.max(xp.abs(a)) if math.prod(a.shape) else zeros_like_place((), a)
             for a in arrays]
    return xp.max(xp.stack(peaks))
