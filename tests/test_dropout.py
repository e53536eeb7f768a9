"""Dropout on every backend: inverted dropout with a seeded mask on the tape, the identity
when not training."""

from __future__ import annotations

import numpy as np
import pytest

import dualtape
from dualtape import Dropout, FullyConnected, Network

from .conftest import np64


def ones(shape, dtype="float64"):
    return dualtape.asarray(np.ones(shape, dtype=dtype))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_mask_drops_at_the_rate_and_keeps_the_mean(backend, dtype):
    tape, y = Dropout(0.25, seed=1).forward(ones((400, 50), dtype))
    y = np64(y)
    assert str(dualtape.to_numpy(tape.mask).dtype) == dtype
    assert set(np.unique(y)) == {0.0, np.float64(np.array(1 / 0.75, dtype=dtype))}
    assert np.mean(y == 0) == pytest.approx(0.25, abs=0.01)  # 20,000 draws: 5 sd is 0.0077
    assert np.mean(y) == pytest.approx(1.0, abs=0.015)


def test_backward_multiplies_by_the_mask_on_the_tape(backend):
    rng = np.random.default_rng(2)
    x, dy = rng.normal(size=(6, 5)), rng.normal(size=(6, 5))
    layer = Dropout(0.5, seed=3)
    tape, y = layer.forward(dualtape.asarray(x))
    mask = np64(tape.mask)
    np.testing.assert_array_equal(np64(y), x * mask)
    grads, dx = layer.backward(tape, dualtape.asarray(dy))
    assert grads == {}
    np.testing.assert_array_equal(np64(dx), dy * mask)


def test_a_seed_gives_the_same_masks_on_every_backend_and_a_new_mask_each_call(backend):
    layer = Dropout(0.5, seed=4)
    with dualtape.use_backend("numpy"):
        twin = Dropout(0.5, seed=4)
    first, second = (np64(layer.forward(ones((8, 8)))[0].mask) for _ in range(2))
    assert not np.array_equal(first, second)
    for mine in (first, second):
        np.testing.assert_array_equal(mine, twin.forward(np.ones((8, 8)))[0].mask)


@pytest.mark.parametrize("rate", [0.0, 0.5])
def test_not_training_or_rate_zero_is_the_identity_forward_and_back(backend, rate):
    rng = np.random.default_rng(5)
    x, dy = rng.normal(size=(3, 4)), rng.normal(size=(3, 4))
    net = Network([Dropout(rate, seed=6), FullyConnected(4, 2, seed=7, dtype="float64")])
    if rate:
        net.set_training(False)
    tapes, _ = net.forward(dualtape.asarray(x))
    np.testing.assert_array_equal(np64(net.layers[0].forward(dualtape.asarray(x))[1]), x)
    _, dx = net.layers[0].backward(tapes[0], dualtape.asarray(dy))
    np.testing.assert_array_equal(np64(dx), dy)
    net.backward(tapes, dualtape.asarray(rng.normal(size=(3, 2))))  # Dropout first: fine
    net.set_training(True)
    assert net.layers[0].training


@pytest.mark.parametrize("rate", [-0.1, 1.0, 1.5, float("nan"), "0.5", True])
def test_a_rate_outside_0_to_1_is_refused(rate):
    with pytest.raises(ValueError, match=r"rate must be a real number in \[0, 1\)"):
        Dropout(rate)


def test_set_training_takes_only_a_boolean():
    with pytest.raises(TypeError, match="True or False"):
        Network([Dropout(0.1)]).set_training("no")


@pytest.mark.parametrize("rate", [2, -0.5, 1.0, True, "0.5", float("nan")])
def test_a_rate_assigned_after_construction_is_checked_and_the_old_one_kept(tmp_path, rate):
    layer = dualtape.Dropout(0.25, seed=1)
    with pytest.raises(ValueError, match=r"^Dropout: rate must be a real number in \[0, 1\)"):
        layer.rate = rate
    assert layer.rate == 0.25
    dualtape.save(dualtape.Network([dualtape.FullyConnected(2, 2), layer]), tmp_path / "n.npz")
    assert dualtape.load(tmp_path / "n.npz").layers[1].rate == 0.25


def test_a_numpy_rate_is_taken_as_a_float():
    layer = dualtape.Dropout(np.float32(0.5))
    layer.rate = np.float64(0.25)
    assert type(layer.rate) is float and layer.rate == 0.25
