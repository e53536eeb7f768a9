"""A schedule reaches ``train_recurrent``'s own SGD step (``planned_backprop``'s whole step
in one compiled call) as it reaches ``optimizer.step``."""

from __future__ import annotations

import math

import numpy as np
import pytest

import dualtape
from dualtape.routes import LAYERS, PLANNED, WHOLE_STEP
from dualtape.schedules import LambdaRate, StepRate

from .helpers import assert_params_equal, host_params
from .test_descent import Unfused, fuses_here, stack

CALLS = 4


def data():
    rng = np.random.default_rng(8)
    return (dualtape.asarray(rng.uniform(-1, 1, (6, 3, 3))),
            dualtape.asarray(rng.uniform(-1, 1, (6, 3, 4))))


def trained(scheduled, kind=dualtape.SGD):
    """An LSTM stack after ``CALLS`` calls of the optimizer ``kind`` at rates 0.5·0.5ᵗ, by a
    schedule or set by hand; with the route of the last call."""
    net, (xs, targets) = stack((3, 5, 4)), data()
    optimizer = kind(0.5, schedule=StepRate(1, 0.5) if scheduled else None)
    for t in range(CALLS):
        if not scheduled:
            optimizer.rate = 0.5 * 0.5**t
        dualtape.train_recurrent(net, xs, targets, optimizer)
    assert optimizer.rate == 0.5 * 0.5 ** (CALLS - 1) and optimizer.steps == CALLS
    return host_params(net), dualtape.last_route(net, "train_recurrent").taken


def test_every_route_of_train_recurrent_takes_the_scheduled_rate(backend, monkeypatch):
    """Bit for bit the hand-set rates on each route (the whole step, the planned pass then
    ``optimizer.step``, and the generic code with ``DUALTAPE_FUSED=0``), and the routes agree
    to rounding."""
    expected = {WHOLE_STEP, PLANNED, LAYERS} if fuses_here(backend) else {LAYERS}
    found = {}
    for fused, kind in (("1", dualtape.SGD), ("1", Unfused), ("0", dualtape.SGD)):
        monkeypatch.setenv("DUALTAPE_FUSED", fused)
        got, route = trained(True, kind)
        want, same_route = trained(False, kind)
        assert route == same_route
        assert_params_equal(got, want)
        found[route] = got
    assert set(found) == expected
    for params in found.values():
        for group, reference in zip(params, found[LAYERS], strict=True):
            for k in group:
                np.testing.assert_allclose(group[k], reference[k], rtol=1e-11, atol=1e-12)


@pytest.mark.parametrize("kind", [dualtape.SGD, Unfused], ids=["whole-step", "planned"])
def test_a_bad_rate_stops_train_recurrent_before_any_weight_moves(backend, kind):
    net, (xs, targets) = stack((3, 5, 4)), data()
    optimizer = kind(0.5, schedule=LambdaRate(lambda t: 1.0 if t < 2 else math.nan))
    for _ in range(2):
        dualtape.train_recurrent(net, xs, targets, optimizer)
    before = host_params(net)
    with pytest.raises(ValueError, match=f"{kind.__name__}: schedule gave the rate nan at step 2"):
        dualtape.train_recurrent(net, xs, targets, optimizer)
    assert_params_equal(host_params(net), before)
    assert optimizer.steps == 2
