"""What a tape keeps, before you run out of memory: ``tape_report(net, ...)``.

Layer by layer, the arrays a network's tape holds (their fields, shapes, dtypes and bytes), the
total, and for a ``RecurrentNetwork`` what a checkpointed tape (``tape="sqrt"`` or k) would keep
instead and what it costs in recomputed steps; and the bytes of the parameters, of their
gradients and of an optimizer's state.

How the numbers are found: nothing is derived from a layer's source or declared by it. A
``Network`` runs one ``forward`` on zeros of the given batch shape, on the network's backend,
and the report reads the tapes it returned. A ``RecurrentNetwork`` runs the full tape on zeros of
1, 2 and 3 steps: every tape array's shape is affine in the steps (``(T+1, B, o)``, ``(T·B,
n)``), so the sizes at T follow from the first two probes and are checked against the third;
a tape that is not affine in T (none of dualtape's) is measured by one forward pass at T
instead. So a report for T = 100,000 costs three tiny passes, and a layer of your own is
reported as it keeps its tape. Arrays are counted once: a tape field that views memory an
earlier field holds (a ``Relu``'s output that the next layer keeps as its input) is listed as
shared, with 0 bytes. Dropout generators are restored after the probes, so a report changes
nothing in the network.

A training call needs more than its tape: the temporaries of the forward pass, the loss and
the backward pass. Their peak is measured, not derived (``call_peak.py``).

The checkpointed tape (``checkpointing.py``) keeps the inputs, the states at the start of each
segment of ``every`` steps, and the last segment's full tape; backward recomputes the other
segments one at a time, so while it runs one more segment's tape (``every`` steps) exists:
``checkpoint_peak_bytes``. The recomputation is ``recompute_steps`` forward steps (the whole
sequence less the last segment, whose tape is kept).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from .backend import Backend, get_backend
from .call_peak import call_peaks, checked_loss, output_shape, zeros_input
from .checkpointing import segment_length, sequence_forward
from .network import Chain, Network
from .recurrent import RecurrentNetwork
from .stack import RecurrentNetworkTape, fuses

OPTIMIZER_SLOTS = {"sgd": ("SGD with momentum", 1), "adam": ("Adam", 2), "none": ("none", 0)}
"""The optimizers by name: what they are called in the report and how many arrays of state
each keeps per parameter (``SGD.slots``: ``m``, kept only with momentum; ``Adam.slots``:
``m`` and ``v``)."""

PROBE_STEPS = (1, 2, 3)
"""The sequence lengths a recurrent network's tape is measured at (affine fit, then check)."""


@dataclass(frozen=True)
class TapeField:
    """One array a tape keeps: ``path`` in the layer's tape (``"gates"``, ``"tapes[1].x"``),
    its ``shape``, ``dtype`` and ``bytes`` (0 when ``shared_with`` names the earlier field
    whose memory it views)."""

    path: str
    shape: tuple[int, ...]
    dtype: str
    bytes: int
    shared_with: str | None = None


@dataclass(frozen=True)
class LayerTape:
    """One layer's part: its ``index`` and ``layer`` (repr), its tape's class name ``tape``,
    the ``fields`` of the full tape and their ``bytes``; for a checkpointed tape,
    ``checkpoint_bytes`` (this layer's states at the segment starts and its part of the last
    segment's tape) and ``segment_bytes`` (its part of one recomputed segment's tape)."""

    index: int
    layer: str
    tape: str
    fields: tuple[TapeField, ...]
    bytes: int
    checkpoint_bytes: int = 0
    segment_bytes: int = 0


@dataclass(frozen=True)
class TapeReport:
    """What ``tape_report`` found; ``str(report)`` is a table. Every number is an attribute:
    ``tape_bytes`` (the full tape), ``checkpoint_bytes`` / ``checkpoint_peak_bytes`` /
    ``recompute_steps`` (the checkpointed tape, 0 without one), ``param_bytes``,
    ``gradient_bytes``, ``optimizer_bytes``, per layer ``layers[k].bytes``; and measured
    (``call_peak.py``; None where not, ``call_peak_by`` says why) the peak of one training call
    for ``loss``, ``call_peak_bytes`` and ``checkpoint_call_peak_bytes``, the gradient arrays
    kept between calls, ``kept_gradient_bytes``, and with the parameters and optimizer state,
    ``training_peak_bytes`` and ``checkpoint_training_peak_bytes``."""

    network: str
    backend: str
    input_shape: tuple[int, ...]
    seq_len: int | None
    batch: int
    layers: tuple[LayerTape, ...]
    tape_bytes: int
    measured_at: str
    param_count: int
    param_bytes: int
    optimizer: str
    optimizer_slots: int
    policy: str | int | None = None
    every: int = 0
    segments: int = 0
    input_bytes: int = 0
    state_bytes: int = 0
    checkpoint_bytes: int = 0
    segment_bytes: int = 0
    recompute_steps: int = 0
    loss: str = ""
    call_peak_bytes: int | None = None
    checkpoint_call_peak_bytes: int | None = None
    kept_gradient_bytes: int = 0
    call_peak_by: str = "not measured (peak=False)"

    @property
    def gradient_bytes(self) -> int:
        """The gradients of one backward pass: one array per parameter."""
        return self.param_bytes

    @property
    def optimizer_bytes(self) -> int:
        """The optimizer's state: ``optimizer_slots`` arrays per parameter."""
        return self.optimizer_slots * self.param_bytes

    @property
    def checkpoint_peak_bytes(self) -> int:
        """What the checkpointed tape holds while backward runs: the tape kept by the forward
        pass and, with more than one segment, one recomputed segment's tape."""
        if not self.segments:
            return 0
        return self.checkpoint_bytes + (self.segment_bytes if self.segments > 1 else 0)

    @property
    def training_bytes(self) -> int:
        """Parameters, gradients, optimizer state and the full tape: a training step's
        arrays besides the temporaries."""
        return self.param_bytes + self.gradient_bytes + self.optimizer_bytes + self.tape_bytes

    @property
    def training_peak_bytes(self) -> int | None:
        """A training step's memory at its peak, full tape: the parameters, the optimizer's
        state, the gradient arrays kept between calls and ``call_peak_bytes`` (None when that
        was not measured)."""
        return self._besides(self.call_peak_bytes)

    @property
    def checkpoint_training_peak_bytes(self) -> int | None:
        """``training_peak_bytes`` with the checkpointed tape (None without one)."""
        return self._besides(self.checkpoint_call_peak_bytes)

    def _besides(self, peak: int | None) -> int | None:
        if peak is None:
            return None
        return self.param_bytes + self.optimizer_bytes + self.kept_gradient_bytes + peak

    def __str__(self) -> str:
        sequence = f"seq_len {self.seq_len}, " if self.seq_len is not None else ""
        lines = [f"{self.network} on {self.backend}: {sequence}batch {self.batch}, input "
                 f"{_shape_text(self.input_shape)}",
                 f"{'layer, its tape and the fields':<40} {'shape':<18} {'dtype':<8} "
                 f"{'bytes':>14}"]
        for layer in self.layers:
            lines.append(f"{f'{layer.index} {layer.layer}: {layer.tape}':<67} "
                         f"{layer.bytes:>14,}")
            for f in layer.fields:
                shared = f"  shared with {f.shared_with}" if f.shared_with else ""
                lines.append(f"{'    ' + f.path:<40} {_shape_text(f.shape):<18} {f.dtype:<8} "
                             f"{f.bytes:>14,}{shared}")
        lines.append(f"{'full tape':<67} {self.tape_bytes:>14,}  {_size(self.tape_bytes)}")
        if self.segments:
            lines += self._checkpointed_lines()
        slots = f"{self.optimizer_slots} slot{'s' * (self.optimizer_slots != 1)}"
        lines += [
            f"{f'parameters ({self.param_count:,})':<67} {self.param_bytes:>14,}  "
            f"{_size(self.param_bytes)}",
            f"{'gradients':<67} {self.gradient_bytes:>14,}  {_size(self.gradient_bytes)}",
            f"{f'optimizer state ({self.optimizer}, {slots})':<67} "
            f"{self.optimizer_bytes:>14,}  {_size(self.optimizer_bytes)}",
            f"{'training, full tape (parameters, gradients, state, tape)':<67} "
            f"{self.training_bytes:>14,}  {_size(self.training_bytes)}",
            f"(sizes from {self.measured_at})",
            *self._peak_lines(),
        ]
        return "\n".join(lines)

    def _peak_lines(self) -> list[str]:
        if self.call_peak_bytes is None:
            return [f"one training call's peak: {self.call_peak_by}"]
        lines = [f"one training call's peak (loss {self.loss}), measured: the tape and the "
                 "temporaries of forward, loss and backward"]
        peaks = [("full tape", self.call_peak_bytes, self.training_peak_bytes)]
        if self.checkpoint_call_peak_bytes is not None:
            peaks.append((f"tape={self.policy!r}", self.checkpoint_call_peak_bytes,
                          self.checkpoint_training_peak_bytes))
        for name, call, total in peaks:
            assert total is not None
            lines += [f"{'  ' + name:<67} {call:>14,}  {_size(call)}",
                      f"{'    with parameters, state and kept gradients':<67} {total:>14,}  "
                      f"{_size(total)}"]
        if self.kept_gradient_bytes:
            lines.append(f"{'  (the gradients kept between calls)':<67} "
                         f"{self.kept_gradient_bytes:>14,}")
        return [*lines, f"(peak from {self.call_peak_by})"]

    def _checkpointed_lines(self) -> list[str]:
        per = ", ".join(f"{layer.index} {_size(layer.checkpoint_bytes)}"
                        for layer in self.layers if layer.checkpoint_bytes)
        last = self.seq_len - (self.segments - 1) * self.every if self.seq_len else 0
        share = self.checkpoint_peak_bytes / self.tape_bytes if self.tape_bytes else 0.0
        return [
            f"tape={self.policy!r}: {self.segments} segment{'s' * (self.segments != 1)} of "
            f"{self.every} step{'s' * (self.every != 1)} (the last {last})",
            f"{'  inputs':<67} {self.input_bytes:>14,}",
            f"{'  states at the segment starts':<67} {self.state_bytes:>14,}",
            f"{f'  the last segment tape ({last} steps)':<67} "
            f"{self.checkpoint_bytes - self.input_bytes - self.state_bytes:>14,}",
            f"{'  kept after forward':<67} {self.checkpoint_bytes:>14,}  "
            f"{_size(self.checkpoint_bytes)}",
            f"{f'  held in backward (+ one segment tape, {self.every} steps)':<67} "
            f"{self.checkpoint_peak_bytes:>14,}  {_size(self.checkpoint_peak_bytes)} "
            f"({share:.1%} of full)",
            f"  per layer kept: {per or 'nothing'}",
            f"  recomputed in backward: {self.recompute_steps:,} forward steps "
            f"({self.recompute_steps / self.seq_len if self.seq_len else 0:.2f} of a forward "
            "pass)",
        ]


def tape_report(
    net: Network | RecurrentNetwork, x: Any = None, *, seq_len: int | None = None,
    batch: int | None = None, tape: str | int = "sqrt", optimizer: Any = "sgd",
    loss: str | None = None, peak: bool = True,
) -> TapeReport:
    """What ``net``'s tape keeps for one batch, layer by layer (see ``TapeReport``).

    A ``Network``: ``x`` an input batch ``(batch, *example)`` or just its shape (a tuple),
    or ``batch`` alone when the network's input has no free axes; one ``forward`` on zeros of
    that shape runs on the network's backend. A ``RecurrentNetwork``: ``seq_len`` and
    ``batch`` (or ``x`` a sequence ``(T, batch, *example)`` or its shape; ``(T, batch)``
    feeds a first recurrent layer ids in place of its one-hot rows, as train-text does), and
    ``tape`` the checkpointed policy to compare (``"sqrt"``, an integer k, or ``"full"`` for
    none); the tape is measured at 1, 2 and 3 steps and scaled to ``seq_len``. ``optimizer``:
    ``"sgd"`` (with momentum: one slot per parameter), ``"adam"`` (two), ``"none"`` or an
    optimizer object (``SGD`` without momentum keeps none). ``peak``: also measure one
    training call's peak (``call_peak.py``: on numpy and CuPy, a few calls on a copy of the
    network, of at most ``3·max(16, ⌈√T⌉)`` steps; for a ``Network``, two at the batch given),
    for ``loss`` (``"cross_entropy"`` after a
    final Softmax, else ``"squared_error"``, by default). Bad input raises ``ValueError`` or
    ``TypeError`` in one line."""
    if not isinstance(net, Network | RecurrentNetwork):
        raise TypeError(f"tape_report: takes a Network or RecurrentNetwork, got "
                        f"{type(net).__name__}")
    optimizer_name, slots = _optimizer_slots(optimizer)
    loss = checked_loss(net, loss)
    if not isinstance(peak, bool):
        raise TypeError(f"tape_report: peak must be True or False, got {peak!r}")
    recurrent = isinstance(net, RecurrentNetwork)
    shape = _batch_shape(net, x, seq_len, batch, recurrent)
    backend = net.backend or get_backend()
    rngs = [layer for layer in net.leaves() if hasattr(layer, "rng")]
    saved = [layer.rng.bit_generator.state for layer in rngs]
    every = segment_length(_checked_policy(tape), shape[0]) if recurrent else None
    try:
        if recurrent:
            assert isinstance(net, RecurrentNetwork)
            found = _recurrent_report(net, backend, shape, every)
        else:
            assert isinstance(net, Network)
            found = _network_report(net, backend, shape)
    finally:
        for layer, state in zip(rngs, saved, strict=True):
            layer.rng.bit_generator.state = state
    params = [p for group in net.params for p in group.values()]
    return TapeReport(
        network=repr(net), backend=backend.name, input_shape=shape,
        seq_len=shape[0] if recurrent else None, batch=shape[1] if recurrent else shape[0],
        param_count=sum(math.prod(p.shape) for p in params),
        param_bytes=sum(_nbytes(p) for p in params), optimizer=optimizer_name,
        optimizer_slots=slots, policy=tape if recurrent and tape != "full" else None,
        loss=loss, **found, **_peaks(net, backend, shape, every, loss, peak))


def _peaks(net: Chain, backend: Backend, shape: tuple[int, ...], every: int | None,
           loss: str, peak: bool) -> dict:
    if not peak:
        return {}
    found = call_peaks(net, backend, shape, every, loss)
    return {"call_peak_bytes": found.full, "checkpoint_call_peak_bytes": found.checkpointed,
            "kept_gradient_bytes": found.kept, "call_peak_by": found.by}


def _checked_policy(tape: Any) -> str | int:
    try:
        segment_length(tape, 1)
    except ValueError as exc:
        raise ValueError(f"tape_report: {exc}") from None
    return tape


def _optimizer_slots(optimizer: Any) -> tuple[str, int]:
    if optimizer is None:
        return OPTIMIZER_SLOTS["none"]
    if isinstance(optimizer, str):
        if optimizer.lower() not in OPTIMIZER_SLOTS:
            raise ValueError(f"tape_report: optimizer must be one of "
                             f"{', '.join(OPTIMIZER_SLOTS)} or an optimizer, got {optimizer!r}")
        return OPTIMIZER_SLOTS[optimizer.lower()]
    slots = getattr(type(optimizer), "slots", None)
    if not isinstance(slots, tuple):
        raise TypeError(f"tape_report: optimizer must be one of {', '.join(OPTIMIZER_SLOTS)} "
                        f"or an optimizer such as dualtape.Adam, got {optimizer!r}")
    if getattr(optimizer, "momentum", None) == 0:  # plain SGD keeps no momentum
        return f"{type(optimizer).__name__} without momentum", 0
    return type(optimizer).__name__, len(slots)


def _batch_shape(net: Chain, x: Any, seq_len: Any, batch: Any, recurrent: bool
                 ) -> tuple[int, ...]:
    """The input's shape, ``(T, batch, *example)`` or ``(batch, *example)``, checked."""
    kind = type(net).__name__
    if not recurrent and seq_len is not None:
        raise ValueError("tape_report: a Network has no sequence; give x (a batch or its "
                         "shape) or batch, not seq_len")
    leading = ("seq_len", "batch") if recurrent else ("batch",)
    if x is not None:
        shape = tuple(x) if isinstance(x, tuple | list) else tuple(getattr(x, "shape", ()))
        if isinstance(x, tuple | list) and not all(
                isinstance(s, int | np.integer) and not isinstance(s, bool) for s in shape):
            raise ValueError(f"tape_report: the shape must hold integers, got {x!r}")
        if len(shape) < len(leading):
            raise ValueError(f"tape_report: {kind} input needs axes ({', '.join(leading)}, "
                             f"...), got shape {shape}")
        for name, given in zip(leading, (seq_len, batch), strict=False):
            if given is not None and given != shape[leading.index(name)]:
                raise ValueError(f"tape_report: {name}={given!r} disagrees with x's shape "
                                 f"{shape}")
    else:
        sizes = (seq_len, batch) if recurrent else (batch,)
        missing = [n for n, s in zip(leading, sizes, strict=True) if s is None]
        if missing:
            raise ValueError(f"tape_report: {kind} needs {' and '.join(missing)} (or x, a "
                             "batch or its shape)")
        example = net.input_shape
        if example is None or any(not isinstance(s, int) for s in example):
            raise ValueError(f"tape_report: {kind}'s input shape {example} has free axes; "
                             "give x, a batch or its shape")
        shape = (*sizes, *example)
    for name, size in zip((*leading, *("example",) * len(shape)), shape, strict=False):
        if isinstance(size, bool) or not isinstance(size, int | np.integer) or size < 1:
            raise ValueError(f"tape_report: {name} sizes must be integers >= 1, got {size!r} "
                             f"in shape {shape}")
    shape = tuple(int(s) for s in shape)
    try:
        output_shape(net, shape[len(leading):])
    except ValueError as exc:
        raise ValueError(f"tape_report: {exc}") from None
    return shape


def _network_report(net: Network, backend: Backend, shape: tuple[int, ...]) -> dict:
    tapes, _ = net.forward(zeros_input(net, backend, shape))
    entries = _entries(net, tapes, None)
    layers = tuple(_layer_tape(net, k, type(t).__name__, [e for e in entries if e.layer == k])
                   for k, t in enumerate(tapes))
    return {"layers": layers, "tape_bytes": sum(layer.bytes for layer in layers),
            "measured_at": f"one forward pass on zeros {_shape_text(shape)}"}


@dataclass
class _Entry:
    """One array of a probe's tape: its layer, path, shape, dtype, itemsize, and what it
    shares (an earlier entry's label, ``"input"``, or None)."""

    layer: int
    path: str
    shape: tuple[int, ...]
    dtype: str
    itemsize: int
    shared: str | None


def _probe(net: RecurrentNetwork, backend: Backend, steps: int, batch: int,
           example: tuple[int, ...], fuse: bool) -> tuple[list[str], list[_Entry]]:
    """The tape classes and arrays of a full tape over ``steps`` zeros, the input passed in
    unchanged (so the fields that view it are known: a checkpointed tape keeps those once),
    with an ``Embedding`` first fused into the layer after it or not (``stack.fuses``: as
    for the length the probe stands for)."""
    xs = zeros_input(net, backend, (steps, batch, *example))
    states = net.initial_state(batch)
    xp = backend.xp
    tape, _, _ = sequence_forward(net.layers, xp, states, xs, fuse=fuse)
    assert isinstance(tape, RecurrentNetworkTape)  # every=None: the full tape
    return [type(t).__name__ for t in tape.tapes], _entries(net, tape.tapes, xs)


def _recurrent_report(net: RecurrentNetwork, backend: Backend, shape: tuple[int, ...],
                      every: int | None) -> dict:
    steps, batch, example = shape[0], shape[1], shape[2:]
    def fused(t: int) -> bool:
        return fuses(net.layers, t * batch)
    segments = 1 if every is None else -(-steps // every)
    last_steps = steps if every is None else steps - (segments - 1) * every
    lengths = {steps} if every is None else {steps, every, last_steps}
    fits = {fuse: _fit([_probe(net, backend, t, batch, example, fuse) for t in PROBE_STEPS])
            for fuse in {fused(t) for t in lengths}}
    classes = _probe(net, backend, 1, batch, example, fused(steps))[0]
    if any(fit is None for fit in fits.values()) or steps in PROBE_STEPS:
        exact = _probe(net, backend, steps, batch, example, fused(steps))[1]
        def at(t: int) -> list[_Entry]:
            return exact if t == steps else _probe(net, backend, t, batch, example, fused(t))[1]
        how = f"one forward pass on zeros {_shape_text(shape)}"
    else:
        def at(t: int) -> list[_Entry]:
            fit = fits[fused(t)]
            assert fit is not None  # checked above
            return [_Entry(e.layer, e.path, tuple(a + b * t for a, b in dims), e.dtype,
                           e.itemsize, e.shared) for e, dims in fit]
        how = ("forward passes on zeros of 1, 2 and 3 steps, scaled to "
               f"{steps:,} (every tape array is affine in the steps)")
    full = at(steps)
    state_bytes = [_nbytes(s) for s in net.initial_state(batch)]
    found: dict[str, Any] = {"measured_at": how}
    layers = []
    if every is not None:
        last, segment = at(last_steps), at(every)
        pending = iter(state_bytes)
    for k, name in enumerate(classes):
        layer = _layer_tape(net, k, name, [e for e in full if e.layer == k])
        if every is not None:
            kept = sum(_bytes(e) for e in last if e.layer == k and not e.shared)
            if net.layers[k].recurrent:
                kept += segments * next(pending)
            again = sum(_bytes(e) for e in segment if e.layer == k and not e.shared)
            layer = LayerTape(layer.index, layer.layer, layer.tape, layer.fields, layer.bytes,
                              kept, again)
        layers.append(layer)
    found.update(layers=tuple(layers), tape_bytes=sum(layer.bytes for layer in layers))
    if every is not None:
        one = zeros_input(net, backend, (1, 1, *example))
        inputs = steps * batch * math.prod(example) * _itemsize(one)
        states = segments * sum(state_bytes)
        found.update(every=every, segments=segments, input_bytes=inputs, state_bytes=states,
                     checkpoint_bytes=inputs + sum(layer.checkpoint_bytes for layer in layers),
                     segment_bytes=sum(layer.segment_bytes for layer in layers),
                     recompute_steps=steps - last_steps)
    return found


def _fit(probes: list[tuple[list[str], list[_Entry]]]
         ) -> list[tuple[_Entry, list[tuple[int, int]]]] | None:
    """Per entry of the first probe, each axis as ``(a, b)`` with size ``a + b·T``, from the
    first two probes and checked on the third; None when the tapes differ in structure or an
    axis is not affine in T."""
    (c1, e1), (c2, e2), (c3, e3) = probes
    t1, t2, t3 = PROBE_STEPS
    if not c1 == c2 == c3 or not len(e1) == len(e2) == len(e3):
        return None
    fitted = []
    for a, b, c in zip(e1, e2, e3, strict=True):
        if not (a.layer, a.path, a.dtype, len(a.shape)) == (b.layer, b.path, b.dtype,
                                                            len(b.shape)) == \
                (c.layer, c.path, c.dtype, len(c.shape)) or b.shared != c.shared:
            return None
        dims = []
        for s1, s2, s3 in zip(a.shape, b.shape, c.shape, strict=True):
            slope, rest = divmod(s2 - s1, t2 - t1)
            intercept = s1 - slope * t1
            if rest or intercept + slope * t3 != s3:
                return None
            dims.append((intercept, slope))
        fitted.append((c, dims))
    return fitted


def _layer_tape(net: Chain, k: int, tape_class: str, entries: list[_Entry]) -> LayerTape:
    fields = tuple(TapeField(e.path, e.shape, e.dtype, 0 if _shared(e) else _bytes(e),
                             None if not _shared(e) else e.shared) for e in entries)
    return LayerTape(k, repr(net.layers[k]), tape_class, fields, sum(f.bytes for f in fields))


def _shared(e: _Entry) -> bool:
    """Shared with an earlier field (not counted in the full tape); a field viewing the
    input is counted there, as the public calls give the tape a copy of the input."""
    return e.shared is not None and e.shared != "input"


def _bytes(e: _Entry) -> int:
    return math.prod(e.shape) * e.itemsize


def _entries(net: Chain, tapes: list[Any], xs: Any) -> list[_Entry]:
    """Every array of ``tapes`` (one per layer), each marked with the earlier one whose
    memory holds it, ``"input"`` when ``xs`` does, or ``"parameters"`` (an ``Embedding``'s
    weight, kept by the layer after it: ``stack.fuses``)."""
    found: list[_Entry] = []
    seen: list[tuple[int, int, str]] = [
        (*span, "parameters") for group in net.params for p in group.values()
        if (span := _span(p)) is not None]
    if xs is not None and (span := _span(xs)) is not None:
        seen.append((*span, "input"))
    for k, tape in enumerate(tapes):
        for path, a in _arrays(tape, ""):
            span = _span(a)
            shared = None
            if span is not None:
                shared = next((label for lo, hi, label in seen
                               if lo <= span[0] and span[1] <= hi and span[1] > span[0]), None)
                seen.append((*span, f"layer {k} {path}"))
            found.append(_Entry(k, path, tuple(int(s) for s in a.shape), _dtype_text(a),
                                _itemsize(a), shared))
    return found


def _arrays(tape: Any, prefix: str) -> Iterator[tuple[str, Any]]:
    """``(path, array)`` for every array in a tape, inside nested tapes and lists too."""
    if hasattr(tape, "shape") and hasattr(tape, "dtype"):
        yield prefix, tape
    elif isinstance(tape, tuple) and hasattr(tape, "_fields"):
        for name in tape._fields:
            yield from _arrays(getattr(tape, name), f"{prefix}.{name}" if prefix else name)
    elif isinstance(tape, list | tuple):
        for k, item in enumerate(tape):
            yield from _arrays(item, f"{prefix}[{k}]")


def _span(a: Any) -> tuple[int, int] | None:
    """The memory ``a`` occupies, ``(start, end)`` addresses, where its backend tells."""
    module = type(a).__module__.split(".")[0]
    try:
        if module == "numpy":
            start = a.__array_interface__["data"][0]
        elif module == "cupy":
            start = a.data.ptr
        elif module == "torch":
            start = a.data_ptr()
        elif module == "array_api_strict":
            return _span(a._array)
        else:
            return None
    except (AttributeError, TypeError, KeyError):
        return None
    return int(start), int(start) + _nbytes(a)


def _dtype_text(a: Any) -> str:
    return str(a.dtype).rsplit(".", 1)[-1]


def _itemsize(a: Any) -> int:
    return np.dtype(_dtype_text(a)).itemsize


def _nbytes(a: Any) -> int:
    return math.prod(a.shape) * _itemsize(a)


def _shape_text(shape: tuple) -> str:
    return "(" + ", ".join(str(s) for s in shape) + ("," if len(shape) == 1 else "") + ")"


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")
