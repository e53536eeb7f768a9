"""What one training call's arrays peak at, measured: ``tape_report``'s call peaks.

A call of ``backpropagate_sequence`` (``backpropagate`` for a ``Network``) allocates its tape
and, around it, the temporaries of the forward pass, the loss and the backward pass; the peak of
those held at once is what a training step needs beyond the parameters, the optimizer's state
and the gradient arrays kept between calls (``recurrent.gradient_buffers``). It is not derived:
it is measured with the backend's meter (``meters``: tracemalloc on numpy, the memory pool on
CuPy; other backends are not measured, and the report says so), on a copy of the network, on
zeros, after one call that warms the kept buffers, so the network itself is left untouched.

A ``Network`` is measured at the batch given. A ``RecurrentNetwork`` is measured at ``T`` when
that is cheap (at most ``3·P`` steps, ``P = max(16, ⌈√T⌉)``); else on probes and scaled, as its
tape is (``tape_report``): every array of the full tape and of its temporaries is affine in the
steps, so the peak of three probes of ``P``, ``2P`` and ``3P`` steps is a line, extended to
``T`` from the two longest and checked on the first. A checkpointed tape of segments of ``k``
steps, the last of ``L``, is probed with 3, 4 and 5 segments of the same ``k`` and ``L`` and
extended to its number of segments. Sizes below 16 steps are not probed: fast paths switch
method for small blocks (the LSTM joins its gate products up to ``lstm.JOIN_UP_TO`` entries), so
a tiny probe would measure another method than ``T`` runs; a layer of your own that switches
method above ``3·P`` steps would escape the probes the same way.
"""

from __future__ import annotations

import copy
import math
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .backend import Backend, from_host
from .losses import ALIASES, LOSSES, check_loss_for, loss_function, takes_labels
from .meters import PoolMeter, TracedMeter
from .network import Chain, Network
from .recurrent import RecurrentNetwork, gradient_buffers
from .training import backpropagate, backpropagate_sequence

PROBE_MIN_STEPS = 16
"""The fewest steps a recurrent network is probed at (``P``'s floor)."""
SEGMENT_PROBES = (3, 4, 5)
"""The numbers of segments a checkpointed call is probed with."""
AFFINE_TOLERANCE = 0.02
"""How far the largest phase's first probe may lie off the line through its other two, as a
share of it, before the report says the peak did not scale as a line."""


@dataclass(frozen=True)
class CallPeaks:
    """``full``/``checkpointed``: the measured peak bytes of one call with the full and the
    checkpointed tape (None: not measured, or no checkpointed tape asked); ``kept`` the bytes
    of the gradient arrays kept between calls; ``by``: how they were measured, or why not."""

    full: int | None
    checkpointed: int | None
    kept: int
    by: str


def default_loss(net: Chain) -> str:
    """The loss a network's training would take: ``cross_entropy`` after a final Softmax,
    else ``squared_error``."""
    return "cross_entropy" if getattr(net.layers[-1], "kind", None) == "Softmax" \
        else "squared_error"


def checked_loss(net: Chain, loss: str | None) -> str:
    """``loss`` (or ``default_loss``) after ``check_loss_for``; ``ValueError`` in one line."""
    if loss is None:
        return default_loss(net)
    if not isinstance(loss, str) or loss not in LOSSES and loss not in ALIASES:
        raise ValueError(f"tape_report: loss must be one of {', '.join(LOSSES)}, got {loss!r}")
    check_loss_for(loss, net.layers[-1], net.n_out, "tape_report")
    return loss


def call_peaks(net: Chain, backend: Backend, shape: tuple[int, ...], every: int | None,
               loss: str) -> CallPeaks:
    """Measure (see the module) the call peaks of ``net`` on inputs of ``shape``; ``every``:
    the checkpointed tape's segment length (None: none)."""
    meter, name = _meter(backend)
    if meter is None:
        return CallPeaks(None, None, 0, name)
    probe = copy.deepcopy(net)
    with np.errstate(all="ignore"):  # zeros can saturate a long sequence's softmax
        if isinstance(probe, Network):
            peak = max(_measured(meter, probe, backend, shape, None, loss))
            return CallPeaks(peak, None, 0, f"{name}, one backpropagate on zeros of {shape}")
        assert isinstance(probe, RecurrentNetwork)
        steps, rest = shape[0], shape[1:]
        def at(t: int, policy: str | int) -> tuple[int, ...]:
            return _measured(meter, probe, backend, (t, *rest), policy, loss)
        full, how = _full(at, steps)
        checkpointed = None
        if every is not None:
            checkpointed, more = _checkpointed(at, steps, every)
            how = f"{how}; checkpointed, {more}"
        kept = sum(g.nbytes for group in gradient_buffers(probe) if group
                   for g in group.values())  # numpy's or CuPy's: the measured backends
    return CallPeaks(full, checkpointed, kept, f"{name}, {how}")


def fed_ids(net: Chain, example: tuple[int, ...]) -> bool:
    """Whether examples of shape ``example`` are integer ids: ``net`` begins with an
    ``Embedding``, or with a layer that takes one-hot rows (a recurrent cell) and ``example``
    is ``()``, its ids in their place (as train-text feeds them)."""
    first = net.layers[0]
    return first.takes_ids or (example == () and getattr(first, "takes_one_hot_ids", False))


def output_shape(net: Chain, example: tuple[int, ...]) -> tuple:
    """``net``'s output shape for examples of shape ``example``, ids (``fed_ids``) included."""
    first = net.layers[0]
    if example == () and not first.takes_ids and fed_ids(net, example) and first.n_in:
        example = (first.n_in,)  # the one-hot rows the ids stand for
    found = net.output_shape(example)
    assert found is not None  # a shape given, one comes back (or a ValueError)
    return found


def input_dtype(net: Chain, shape: tuple[int, ...]) -> str:
    """The dtype of ``net``'s input of ``shape``: int64 ids when its examples are
    (``fed_ids``), else the network's."""
    ids = fed_ids(net, shape[2 if isinstance(net, RecurrentNetwork) else 1:])
    return "int64" if ids else net.dtype or "float32"


def zeros_input(net: Chain, backend: Backend, shape: tuple[int, ...]) -> Any:
    """Zeros of ``shape`` that ``net`` takes (``input_dtype``), on ``backend``."""
    return from_host(np.zeros(shape, dtype=input_dtype(net, shape)), backend)


def _meter(backend: Backend) -> tuple[type | None, str]:
    if backend.name == "numpy":
        if tracemalloc.is_tracing():
            return None, "not measured: tracemalloc is already tracing (its peak would mix)"
        return TracedMeter, "tracemalloc"
    if backend.name == "cupy":
        return PoolMeter, "CuPy's memory pool"
    return None, (f"not measured: {backend.name}'s allocations are seen by neither "
                  "tracemalloc nor a memory pool hook")


def _measured(meter: type, net: Any, backend: Backend, shape: tuple[int, ...],
              policy: str | int | None, loss: str) -> tuple[int, ...]:
    """``(forward, loss, backward)``: the peaks of one call's three phases (each counting
    what the earlier ones left held), after one unmeasured call (the kept buffers, compiled
    code)."""
    x = zeros_input(net, backend, shape)
    leading = shape[:2] if policy is not None else shape[:1]
    out = output_shape(net, shape[len(leading):])
    if takes_labels(loss):
        target = np.zeros((*leading, *out[:-1]), dtype="int64")  # class 0
    else:
        target = np.zeros((*leading, *out), dtype=net.dtype or "float32")
    targets = from_host(target, backend)
    phases: list[int] = []
    watching: list[Any] = []  # the meter, once one watches
    objective = loss_function(loss)
    def phase_ends() -> None:
        for m in watching:
            phases.append(m.peak)
            m.reset_peak()
    def marked(xp: Any, y: Any, t: Any, weights: Any = None) -> Any:
        phase_ends()  # the forward pass
        found = objective(xp, y, t)
        phase_ends()  # the loss
        return found
    def call() -> None:
        if policy is None:
            backpropagate(net, x, targets, loss=marked)
        else:
            backpropagate_sequence(net, x, targets, loss=marked, tape=policy)
    call()
    with meter() as m:
        watching.append(m)
        call()
        phases.append(m.peak)
    return phases[0], phases[1], phases[2]


def probe_steps(steps: int, every: int | None = None) -> list[int]:
    """The lengths one call over ``steps`` steps is measured at (see the module): with the full
    tape (``every`` None), ``steps`` itself up to ``3·P``, else ``P``, ``2P`` and ``3P``; with
    segments of ``every`` steps, ``steps`` itself up to 5 segments, else 3, 4 and 5 segments,
    the last as long as ``steps``' last."""
    if every is None:
        p = max(PROBE_MIN_STEPS, math.ceil(math.sqrt(steps)))
        return [steps] if steps <= 3 * p else [p, 2 * p, 3 * p]
    segments = -(-steps // every)
    if segments <= 5:
        return [steps]
    last = steps - (segments - 1) * every
    return [last + (n - 1) * every for n in SEGMENT_PROBES]


def _full(at: Callable[[int, str | int], tuple[int, ...]], steps: int) -> tuple[int, str]:
    probes = probe_steps(steps)
    if probes == [steps]:
        return max(at(steps, "full")), f"one backpropagate_sequence at {steps}"
    return _lines(probes, [at(t, "full") for t in probes], steps, "steps")


def _checkpointed(at: Callable[[int, str | int], tuple[int, ...]], steps: int, every: int
                  ) -> tuple[int, str]:
    probes = probe_steps(steps, every)
    if probes == [steps]:
        return max(at(steps, every)), f"one call at {steps}"
    peaks = [at(t, every) for t in probes]
    last = probes[0] - (SEGMENT_PROBES[0] - 1) * every
    return _lines(list(SEGMENT_PROBES), peaks, -(-steps // every),
                  f"segments of {every} steps (the last {last})")


def _lines(xs: list[int], peaks: list[tuple[int, ...]], x: int, unit: str) -> tuple[int, str]:
    """The largest of the phases' peaks at ``x``, each on the line through its last two
    probes, and how it was found (with a warning when that phase's first probe lies off its
    line)."""
    lines = []
    for phase in zip(*peaks, strict=True):
        slope = (phase[2] - phase[1]) / (xs[2] - xs[1])
        off = abs(phase[1] - slope * (xs[1] - xs[0]) - phase[0]) / max(phase[0], 1)
        lines.append((round(phase[2] + slope * (x - xs[2])), off))
    scaled, off = max(lines)
    how = f"probes of {', '.join(map(str, xs))} {unit} scaled to {x:,}"
    if off > AFFINE_TOLERANCE:
        how += f" (approximate: its first probe lies {off:.0%} off the line)"
    return scaled, how
