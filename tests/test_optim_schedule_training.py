"""A schedule reaches ``train_recurrent``'s own SGD steps (``descent``: the whole step in one
compiled call, the backward pass fused with the update) as it reaches ``optimizer.step``."""

from __future__ import annotations

import math

import numpy as np
import pytest

import dualtape
from dualtape.routes import FUSED_SGD, LAYERS, WHOLE_STEP
from dualtape.schedules import LambdaRate, StepRate

from .helpers import assert_params_equal, host_params
from .test_descent import fuses_here, stack, strided_loss

CALLS = 4


def data():
    rng = np.random.default_rng(8)
    return (dualtape.asarray(rng.uniform(-1, 1, (6, 3, 3))),
            dualtape.asarray(rng.uniform(-1, 1, (6, 3, 4))))


def trained(scheduled, loss="squared_error"):
    """An LSTM stack after ``CALLS`` calls at rates 0.5·0.5ᵗ, by a schedule or set by hand;
    with the route of the last call."""
    net, (xs, targets) = stack((3, 5, 4)), data()
    optimizer = dualtape.SGD(0.5, schedule=StepRate(1, 0.5) if scheduled else None)
    for t in range(CALLS):
        if not scheduled:
            optimizer.rate = 0.5 * 0.5**t
        dualtape.train_recurrent(net, xs, targets, optimizer, loss=loss)
    assert optimizer.rate == 0.5 * 0.5 ** (CALLS - 1) and optimizer.steps == CALLS
    return host_params(net), dualtape.last_route(net, "train_recurrent").taken


def test_every_route_of_train_recurrent_takes_the_scheduled_rate(backend, monkeypatch):
    """Bit for bit the hand-set rates on each route (the whole step, the fused backward pass,
    and the generic code with ``DUALTAPE_FUSED=0``), and the routes agree to rounding."""
    expected = {WHOLE_STEP, FUSED_SGD, LAYERS} if fuses_here(backend) else {LAYERS}
    found = {}
    for fused, loss in (("1", "squared_error"), ("1", strided_loss), ("0", "squared_error")):
        monkeypatch.setenv("DUALTAPE_FUSED", fused)
        got, route = trained(True, loss)
        want, same_route = trained(False, loss)
        assert route == same_route
        assert_params_equal(got, want)
        found[route] = got
    assert set(found) == expected
    for params in found.values():
        for group, reference in zip(params, found[LAYERS], strict=True):
            for k in group:
                np.testing.assert_allclose(group[k], reference[k], rtol=1e-11, atol=1e-12)


@pytest.mark.parametrize("loss", ["squared_error", strided_loss], ids=["whole-step", "fused"])
def test_a_bad_rate_stops_train_recurrent_before_any_weight_moves(backend, loss):
    net, (xs, targets) = stack((3, 5, 4)), data()
    optimizer = dualtape.SGD(0.5, schedule=LambdaRate(lambda t: 1.0 if t < 2 else math.nan))
    for _ in range(2):
        dualtape.train_recurrent(net, xs, targets, optimizer, loss=loss)
    before = host_params(net)
    with pytest.raises(ValueError, match="SGD: schedule gave the rate nan at step 2"):
        dualtape.train_recurrent(net, xs, targets, optimizer, loss=loss)
    assert_params_equal(host_params(net), before)
    assert optimizer.steps == 2
