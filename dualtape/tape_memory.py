"""How much memory ``tape_report``'s probes will hold at once, estimated before any of them runs
(``dualtape tape`` refuses a report the machine cannot hold, where it would fail midway or be
killed): first the input of its largest call, from the shape and dtype alone (``least_bytes``),
then the estimate of all it holds (``probe_bytes``), which runs tiny probes of the example.

The report runs forward passes on zeros of 1, 2 and 3 steps at the batch asked for, and measures
training calls at the lengths ``call_peak.probe_steps`` gives (the full tape's and the
checkpointed one's). Each call holds its input, its tape (which holds the input) and the
temporaries of forward, loss and backward, and the copy of the network it runs on holds the
parameters, their gradients and the gradients kept between calls. The tape's bytes are read from
``tape_report`` at 16 and 32 steps of batch 1 and 2 (tiny probes: a sequence's tape is affine in
the steps, as ``tape_report`` finds, and in the batch), extended to each call's length and
batch. A checkpointed call holds at most two segments' tape (the last and one recomputed) and
the other steps' inputs, which its probes (of at most 5 segments) keep at most 1.5 times as many
of as the two segments hold: within the factor. A call is taken to hold ``PEAK_FACTORS`` times
its tape, from above: measured, 1.25 to 2.6 times for sequences (LSTM, GRU, StandardLSTM,
Embedding and Dropout stacks, one-hot rows or ids, batch 1 to 64; the least where the input is
most of the tape; 3.3 for a call of 56 KB, whose fixed costs are no memory a machine lacks) and
3.4 to 4.5 for feed-forward networks (the digits network's convolutions, a fully-connected one).
So the estimate came 1.2 to 2.3 times what the report's largest call held
(``tests/test_tape_report.py`` checks 1 to 2.5).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from .call_peak import input_dtype, output_shape, probe_steps
from .checkpointing import segment_length
from .network import Network
from .recurrent import RecurrentNetwork
from .tape_report import PROBE_STEPS, tape_report

PEAK_FACTORS = {"sequence": 3.0, "network": 5.0}
"""What a call holds over its tape, from above, for a ``RecurrentNetwork`` and a ``Network``
(the copy of the network's parameters, their gradients and the kept ones are added: 3 times
their bytes)."""
SIZES = (16, 32)
"""The steps of the tiny probes the tape's bytes per step are read from."""


class ProbeNeed(NamedTuple):
    """What ``probe_bytes`` found: ``bytes``, held at once by the largest call, of ``steps``
    steps (None: a ``Network``'s, at the batch asked for)."""

    bytes: int
    steps: int | None


def least_bytes(net: Network | RecurrentNetwork, shape: tuple[int, ...],
                tape: str | int = "sqrt") -> ProbeNeed:
    """What ``tape_report(net, shape, tape=tape)`` holds at the least, known from ``shape``
    and the input's dtype alone, before ``probe_bytes``' tiny probes allocate examples of the
    shape given: the input of its largest call (``ValueError`` in one line for a shape
    ``net`` does not take)."""
    recurrent = isinstance(net, RecurrentNetwork)
    example = shape[2 if recurrent else 1:]
    output_shape(net, example)
    row = math.prod(example) * np.dtype(input_dtype(net, shape)).itemsize
    if not recurrent:
        return ProbeNeed(row * shape[0], None)
    steps = max(probe_steps(shape[0]) + probe_steps(shape[0], segment_length(tape, shape[0])))
    return ProbeNeed(row * steps * shape[1], steps)


def probe_bytes(net: Network | RecurrentNetwork, shape: tuple[int, ...],
                tape: str | int = "sqrt") -> ProbeNeed:
    """The most bytes ``tape_report(net, shape, tape=tape)`` holds at once, estimated (see the
    module) from tiny probes, for ``shape`` ``(T, batch, *example)`` or ``(batch, *example)``
    as ``tape_report`` takes it (``ValueError`` in one line otherwise)."""
    recurrent = isinstance(net, RecurrentNetwork)
    lead = 2 if recurrent else 1
    batch, example = shape[lead - 1], shape[lead:]
    params = tape_report(net, (1,) * lead + example, tape="full", peak=False).param_bytes

    def tape_bytes(*leading: int) -> int:
        """The full tape's bytes at ``leading`` (steps and batch, or batch), tiny sizes."""
        return tape_report(net, (*leading, *example), tape="full", peak=False).tape_bytes

    if not recurrent:
        a, b = tape_bytes(1), tape_bytes(2)
        held = PEAK_FACTORS["network"] * (a + (b - a) * (batch - 1))
        return ProbeNeed(round(held) + 3 * params, None)
    a1, a2 = [tape_bytes(t, 1) for t in SIZES]
    b1, b2 = [tape_bytes(t, 2) for t in SIZES]
    span = SIZES[1] - SIZES[0]

    def at(steps: int) -> float:
        """A call's bytes with the full tape of ``steps`` steps at the batch asked for."""
        one = a1 + (a2 - a1) * (steps - SIZES[0]) / span
        two = b1 + (b2 - b1) * (steps - SIZES[0]) / span
        return PEAK_FACTORS["sequence"] * (one + (two - one) * (batch - 1))

    steps = shape[0]
    calls = [(at(t), t) for t in (*probe_steps(steps), max(PROBE_STEPS))]
    every = segment_length(tape, steps)
    if every is not None:  # two segments' tape (see the module for the other inputs)
        calls += [(at(min(2 * every, t)), t) for t in probe_steps(steps, every)]
    held, longest = max(calls)
    return ProbeNeed(round(held) + 3 * params, longest)
