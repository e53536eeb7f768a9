"""The planned pass serves ``train_recurrent`` too (``route_choice.planned_choice``): its
gradients, then ``optimizer.step``, wherever the optimizer does not move the weights inside the
backward pass itself; a mask (so a last-step target) is planned for both verbs."""

from __future__ import annotations

import numpy as np
import pytest

import dualtape
from dualtape import route_choice

from .helpers import host_params
from .test_descent import fuses_here
from .test_planned_backprop import (
    assert_same_bits,
    compiled_stack,
    entropy,
    layer_path,
    network,
    results,
    sequences,
)

OPTIMIZERS = {
    "adam": lambda: dualtape.Adam(0.01),
    "momentum": lambda: dualtape.SGD(0.1, momentum=0.5),
    "sgd-top": lambda: dualtape.SGD(0.1),  # plain SGD, which fuses into LSTMs only
}


def last_step_mask(steps, batch):
    mask = np.zeros((steps, batch), bool)
    mask[-1] = True
    return dualtape.asarray(mask)


def given_states(batch, seed=5):
    """A state per LSTM of ``network``'s (5 and 4 cells), not zeros."""
    rng = np.random.default_rng(seed)
    return [dualtape.asarray(rng.uniform(-1, 1, (batch, n))) for n in (5, 4)]


def assert_same_training(got, want, nets):
    """Two ``train_recurrent`` calls' losses and last states, and their networks' weights
    after them, bit for bit."""
    assert got[0] == want[0]
    assert all(np.array_equal(dualtape.to_numpy(a), dualtape.to_numpy(b))
               for a, b in zip(got[1], want[1], strict=True))
    for a, b in zip(host_params(nets[0]), host_params(nets[1]), strict=True):
        assert all(np.array_equal(a[k], b[k]) for k in a)


def on_the_layer_path(monkeypatch, call, *args, **kwargs):
    """``call(*args, **kwargs)`` with the planned pass declined (its plan refused): the
    layers' route."""
    with monkeypatch.context() as patch:
        patch.setattr(route_choice, "planned", lambda *args: "declined by the test")
        return call(*args, **kwargs)


@pytest.mark.parametrize("optimizer", list(OPTIMIZERS))
@pytest.mark.parametrize("vocab", [7, 0], ids=["ids", "inputs"])
@pytest.mark.parametrize("options", ["defaults", "masked", "state"])
def test_train_recurrent_planned_gives_the_layer_paths_bits(backend, monkeypatch, optimizer,
                                                            vocab, options):
    """Two calls each way: the losses, the last states and the weights after each step bit
    for bit with the layer path."""
    nets = [network(vocab), network(vocab)]
    optimizers = [OPTIMIZERS[optimizer](), OPTIMIZERS[optimizer]()]
    options = {"defaults": {}, "masked": {"mask": last_step_mask(6, 3)},
               "state": {"state": given_states(3)}}[options]
    for seed in (2, 3):
        xs, labels = sequences(vocab, seed=seed)
        got = dualtape.train_recurrent(nets[0], xs, labels, optimizers[0], loss=entropy,
                                       **options)
        assert compiled_stack(nets[0], "train_recurrent") == fuses_here(backend)
        want = on_the_layer_path(monkeypatch, dualtape.train_recurrent, nets[1], xs, labels,
                                 optimizers[1], loss=entropy, **options)
        assert_same_training(got, want, nets)
    took = dualtape.last_route(nets[0], "train_recurrent")
    assert took.taken == ("planned" if fuses_here(backend) else "layers")


@pytest.mark.parametrize("given", ["mask", "state", "one-state"])
def test_a_masked_or_given_state_backpropagate_sequence_is_planned_with_the_layer_paths_bits(
        backend, monkeypatch, given):
    net = network(7)
    xs, labels = sequences(7)
    options = {"mask": {"mask": last_step_mask(6, 3)}, "state": {"state": given_states(3)},
               "one-state": {"state": [given_states(3)[0], None]}}[given]
    got = results(dualtape.backpropagate_sequence(net, xs, labels, loss=entropy, **options))
    assert compiled_stack(net) == fuses_here(backend)
    want = results(on_the_layer_path(monkeypatch, dualtape.backpropagate_sequence, net, xs,
                                     labels, loss=entropy, **options))
    assert_same_bits(got, want)
    assert got[0] != layer_path(net, xs, labels)[0]  # the mask or the state changed the loss


def test_a_given_state_is_checked_as_the_layer_path_checks_it(backend):
    net, (xs, labels) = network(7), sequences(7)
    with pytest.raises(ValueError, match=r"state"):
        dualtape.backpropagate_sequence(net, xs, labels, loss=entropy,
                                        state=[dualtape.asarray(np.zeros((2, 5))), None])
    with pytest.raises(ValueError, match=r"state must be a list of 2"):
        dualtape.backpropagate_sequence(net, xs, labels, loss=entropy, state=[None])


def test_a_last_step_target_is_planned(backend):
    """A many-to-one target (``last_step``) is a mask of the last step: the planned route."""
    net = network(0, top=2)
    xs, _ = sequences(0)
    target = dualtape.asarray(np.random.default_rng(4).uniform(-1, 1, (3, 2)))
    dualtape.train_recurrent(net, xs, target, dualtape.Adam(0.01), loss="mse")
    took = dualtape.last_route(net, "train_recurrent")
    assert took.taken == ("planned" if fuses_here(backend) else "layers")


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_a_non_finite_input_moves_nothing_and_records_nothing(backend, bad):
    net = network(0)
    xs, labels = sequences(0)
    xs = dualtape.asarray(np.where(np.arange(54).reshape(6, 3, 3) == 5, bad,
                                   dualtape.to_numpy(xs)))
    assert_refused_before_any_step(net, xs, labels)


def assert_refused_before_any_step(net, xs, labels):
    """``train_recurrent`` of ``net`` over a non-finite ``xs`` raises, with no step counted,
    no route on the record and no weight moved."""
    optimizer, before = dualtape.Adam(0.01), host_params(net)
    with pytest.raises(FloatingPointError, match="the input holds NaN or inf"):
        dualtape.train_recurrent(net, xs, labels, optimizer, loss=entropy)
    assert optimizer.steps == 0 and dualtape.last_route(net, "train_recurrent") is None
    for a, b in zip(before, host_params(net), strict=True):
        assert all(np.array_equal(a[k], b[k]) for k in a)
