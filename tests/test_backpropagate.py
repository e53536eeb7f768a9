"""backpropagate and backpropagate_sequence on every backend: the loss and the gradients that
train and train_recurrent hand their optimizer, bit for bit, with no update; the loss left on
the device; callable losses; the gradient buffers the next call overwrites; the refusals."""

from __future__ import annotations

import math

import numpy as np
import pytest

import dualtape as dt

from .conftest import np64
from .helpers import assert_params_equal, deep_net, host_params


class Recording:
    """An optimizer that keeps host copies of the gradients it is given and updates nothing."""

    def __init__(self) -> None:
        self.seen: list[list[dict[str, np.ndarray]]] = []

    def step(self, params, grads) -> None:
        self.seen.append(host(grads))


def host(grads) -> list[dict[str, np.ndarray]]:
    """Host copies of gradient dicts (never the buffers themselves)."""
    return [{k: np64(g).copy() for k, g in group.items()} for group in grads]


def mixed(dtype="float64") -> dt.RecurrentNetwork:
    return dt.RecurrentNetwork([
        dt.LSTM(3, 4, seed=1, dtype=dtype), dt.Dropout(0.3, seed=7),
        dt.GRU(4, 5, seed=2, dtype=dtype), dt.Tanh(),
        dt.StandardLSTM(5, 3, seed=3, dtype=dtype), dt.FullyConnected(3, 2, seed=4, dtype=dtype)])


def data(*shape, seed=0):
    return dt.asarray(np.random.default_rng(seed).uniform(-1, 1, shape))


def doubled(xp, ys, targets, weights=None):
    """Twice the squared error: a loss of the losses' signature."""
    value, dys = dt.losses.squared_error(xp, ys, targets, weights)
    return 2.0 * value, 2.0 * dys


@pytest.mark.parametrize("loss", ["squared_error", doubled], ids=["named", "callable"])
def test_backpropagate_gives_what_train_hands_its_optimizer(backend, loss):
    net, twin, optimizer = deep_net(), deep_net(), Recording()
    x, t = data(6, 3), data(6, 3, seed=1)
    value, grads = dt.backpropagate(net, x, t, loss=loss)
    trained = dt.train(twin, x, t, optimizer, loss=loss)
    assert tuple(value.shape) == () and type(value) is type(x)  # left on the device
    assert float(value) == trained
    assert_params_equal(host(grads), optimizer.seen[0])
    assert_params_equal(host_params(net), host_params(twin))  # neither updated


@pytest.mark.parametrize("tape", ["full", 2], ids=["full-tape", "checkpointed"])
@pytest.mark.parametrize("masked", [False, True], ids=["no-mask", "mask"])
@pytest.mark.parametrize("loss", ["squared_error", doubled], ids=["named", "callable"])
def test_backpropagate_sequence_gives_what_train_recurrent_hands_its_optimizer(
        backend, tape, masked, loss):
    net, twin, optimizer = mixed(), mixed(), Recording()
    xs, targets = data(5, 2, 3), data(5, 2, 2, seed=1)
    state = [data(2, layer.state_size, seed=2 + k) for k, layer in
             enumerate(net.recurrent_layers)]
    mask = np.arange(5) % 2 == 0 if masked else None
    if masked:
        mask = dt.asarray(mask)
    found = dt.backpropagate_sequence(net, xs, targets, state=state, mask=mask, loss=loss,
                                      tape=tape)
    grads = host(found.grads)  # copied now: the next call's buffers may be these arrays
    value, ends = dt.train_recurrent(twin, xs, targets, optimizer, state=state, mask=mask,
                                     loss=loss, tape=tape)
    assert float(found.loss) == value and found.dstate is None
    assert_params_equal(grads, optimizer.seen[0])
    for mine, theirs in zip(found.state, ends, strict=True):
        np.testing.assert_array_equal(np64(mine), np64(theirs))


@pytest.mark.parametrize("tape", ["full", "sqrt"])
def test_the_initial_states_gradient_is_what_learning_it_applies(backend, tape):
    net, twin, optimizer = mixed(), mixed(), Recording()
    xs, targets = data(6, 2, 3), data(6, 2, 2, seed=1)
    state = [data(2, layer.state_size, seed=2 + k) for k, layer in
             enumerate(net.recurrent_layers)]
    found = dt.backpropagate_sequence(net, xs, targets, state=state, tape=tape,
                                      need_dstate=True)
    dstate = [np64(d) for d in found.dstate]
    dt.train_recurrent(twin, xs, targets, optimizer, state=list(state), tape=tape,
                       learn_initial_state=True)
    learned = optimizer.seen[0][-1]
    assert [tuple(d.shape) for d in dstate] == [tuple(s.shape) for s in state]
    for k, d in enumerate(dstate):
        np.testing.assert_array_equal(d, learned[str(k)])


def test_one_sequence_gives_states_of_one_sequence(backend):
    net = mixed()
    found = dt.backpropagate_sequence(net, data(4, 3), data(4, 2, seed=1), need_dstate=True)
    assert [tuple(s.shape) for s in found.state] == [(4,), (5,), (6,)]
    assert [tuple(d.shape) for d in found.dstate] == [(4,), (5,), (6,)]
    assert found._fields == ("loss", "grads", "state", "dstate")


def test_the_next_call_overwrites_the_buffered_gradients(backend):
    net = dt.RecurrentNetwork([dt.LSTM(3, 4, seed=1, dtype="float64")])
    first = dt.backpropagate_sequence(net, data(4, 2, 3), data(4, 2, 4, seed=1))
    kept = host(first.grads)
    second = dt.backpropagate_sequence(net, data(4, 2, 3, seed=2), data(4, 2, 4, seed=3))
    reused = first.grads[0]["U"] is second.grads[0]["U"]
    assert reused == (backend.name in ("numpy", "cupy"))
    assert not np.array_equal(np64(second.grads[0]["U"]), kept[0]["U"])


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # inf · 0
def test_a_non_finite_input_gives_a_nan_loss_where_train_refuses(backend):
    xs = np64(data(4, 2, 3))
    xs[1, 0, 2] = math.inf
    net = mixed()
    found = dt.backpropagate_sequence(net, dt.asarray(xs), data(4, 2, 2, seed=1))
    assert math.isnan(float(found.loss))
    with pytest.raises(FloatingPointError, match="train_recurrent: the input holds NaN"):
        dt.train_recurrent(net, dt.asarray(xs), data(4, 2, 2, seed=1), Recording())
    x = np64(data(3, 3))
    x[0, 0] = math.nan
    value, _ = dt.backpropagate(deep_net(), dt.asarray(x), data(3, 3, seed=1))
    assert math.isnan(float(value))


def test_an_empty_batch_and_the_other_kind_of_network_are_refused(backend):
    with pytest.raises(ValueError, match="backpropagate: the batch is empty"):
        dt.backpropagate(deep_net(), data(0, 3), data(0, 3))
    with pytest.raises(ValueError, match="backpropagate_sequence: the batch is empty"):
        dt.backpropagate_sequence(mixed(), data(4, 0, 3), data(4, 0, 2))
    with pytest.raises(TypeError, match="backpropagate_sequence takes a RecurrentNetwork"):
        dt.backpropagate(mixed(), data(4, 3), data(4, 2))
    with pytest.raises(TypeError, match="backpropagate takes a Network"):
        dt.backpropagate_sequence(deep_net(), data(4, 2, 3), data(4, 2, 3))
    with pytest.raises(ValueError, match="unknown loss 'hinge'"):
        dt.backpropagate(deep_net(), data(4, 3), data(4, 3), loss="hinge")
