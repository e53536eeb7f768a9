"""``tape_memory``'s arithmetic, exactly: ``probe_bytes`` on tiny probes whose tape is a known
bilinear function of the steps and the batch (so the extension is exact), ``least_bytes`` at
its default policy. ``test_tape_report.py`` checks both against what real probes hold."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import dualtape as dt
from dualtape import tape_memory
from dualtape.tape_memory import ProbeNeed, least_bytes, probe_bytes

PARAMS = 1000


def tape_bytes(recurrent: bool, lead: tuple[int, ...]) -> int:
    """The tiny probes' full tape: bilinear in the steps and the batch, or affine in the batch."""
    if recurrent:
        steps, batch = lead
        return 7 + 11 * steps + 13 * batch + 17 * steps * batch
    return 50 + 30 * lead[0]


@pytest.fixture(autouse=True)
def probes(monkeypatch):
    """``tape_report`` answering the tiny probes ``probe_bytes`` may ask for, and no others."""
    def report(net, shape, tape, peak):
        recurrent = isinstance(net, dt.RecurrentNetwork)
        lead, example = shape[:2 if recurrent else 1], shape[2 if recurrent else 1:]
        assert tape == "full" and peak is False and example == (3,)
        assert lead in ([(1, 1), (16, 1), (32, 1), (16, 2), (32, 2)] if recurrent else
                        [(1,), (2,)]), lead
        params = PARAMS if set(lead) == {1} else None
        return SimpleNamespace(param_bytes=params, tape_bytes=tape_bytes(recurrent, lead))

    monkeypatch.setattr(tape_memory, "tape_report", report)


def lstm() -> dt.RecurrentNetwork:
    return dt.RecurrentNetwork([dt.LSTM(3, 4, seed=1)])


@pytest.mark.parametrize("shape, tape, held, steps", [
    ((100, 5, 3), "full", 3 * tape_bytes(True, (48, 5)), 48),  # probes 16, 32, 48
    ((1000, 5, 3), 400, 3 * tape_bytes(True, (800, 5)), 1000),  # 3 segments: two held
    ((1, 5, 3), "sqrt", 3 * tape_bytes(True, (3, 5)), 3),  # the report's 3-step pass
])
def test_a_sequences_largest_call_from_the_tiny_probes(shape, tape, held, steps):
    assert probe_bytes(lstm(), shape, tape) == ProbeNeed(held + 3 * PARAMS, steps)


def test_the_default_policy_is_sqrt():
    assert probe_bytes(lstm(), (1, 5, 3)) == ProbeNeed(3 * tape_bytes(True, (3, 5)) + 3 * PARAMS,
                                                      3)
    assert least_bytes(lstm(), (100, 5, 3)) == ProbeNeed(50 * 5 * 3 * 4, 50)  # 30, 40, 50


@pytest.mark.parametrize("shape, tape, steps", [
    ((10, 100, 3), "full", 10),  # not the batch's probes
    ((100, 2, 3), 1, 48),  # the full tape's probes (16, 32, 48) beyond 3 to 5 steps' segments
])
def test_the_least_is_the_longest_probes_input(shape, tape, steps):
    assert least_bytes(lstm(), shape, tape) == ProbeNeed(steps * shape[1] * 3 * 4, steps)


def test_a_networks_call_at_the_batch_asked_for():
    net = dt.Network([dt.FullyConnected(3, 2, seed=1)])
    assert probe_bytes(net, (7, 3)) == ProbeNeed(5 * tape_bytes(False, (7,)) + 3 * PARAMS, None)
