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


class Sampling:
    """A loss that draws seeded noise into its value and gradient (as a loss that samples
    does) and counts its calls, handing its result back in ``form``."""

    def __init__(self, form: str) -> None:
        self.form, self.calls, self.rng = form, 0, np.random.default_rng(5)

    def __call__(self, xp, ys, targets, weights=None):
        self.calls += 1
        value, dys = dt.losses.squared_error(xp, ys, targets, weights)
        value = value * float(self.rng.uniform(0.5, 1.5))
        dys = dys * dt.asarray(self.rng.uniform(0.5, 1.5, tuple(dys.shape)))
        if self.form == "strided":  # every other float of a wider array
            dys = xp.stack([dys, xp.zeros_like(dys)], axis=-1)[..., 0]
        elif self.form == "F order":
            dys = np.asfortranarray(dys)
        elif self.form == "float32":  # for a float64 network
            dys = xp.astype(dys, xp.float32)
        elif self.form == "list":
            dys = np64(dys).tolist()
        elif self.form == "float value":
            value = float(value)
        elif self.form == "complex gradient":
            dys = xp.astype(dys, xp.complex128)
        elif self.form == "short gradient":
            dys = dys[..., :1]
        elif self.form == "vector value":
            value = dys
        elif self.form == "no gradient":
            return value
        return value, dys


VERBS = ["backpropagate", "train", "backpropagate_sequence", "train_recurrent"]


def lstm_stack() -> dt.RecurrentNetwork:
    """Two LSTMs: planned (``backpropagate_sequence``), fused with SGD (``train_recurrent``)."""
    return dt.RecurrentNetwork([dt.LSTM(3, 4, seed=1, dtype="float64"),
                                dt.LSTM(4, 2, seed=2, dtype="float64")])


def run(verb, loss, net=None):
    """``verb``'s loss and the gradients it gives (the backpropagate verbs) or the weights
    after its step (the train verbs, SGD), host copies, on ``net`` or a new network."""
    sequences = verb.endswith(("sequence", "recurrent"))
    net = net or (lstm_stack() if sequences else deep_net())
    x, t = (data(5, 3, 3), data(5, 3, 2, seed=1)) if sequences else (data(6, 3),
                                                                       data(6, 3, seed=1))
    if verb == "backpropagate":
        value, grads = dt.backpropagate(net, x, t, loss=loss)
        return float(value), host(grads)
    if verb == "backpropagate_sequence":
        found = dt.backpropagate_sequence(net, x, t, loss=loss)
        return float(found.loss), host(found.grads)
    if verb == "train":
        return dt.train(net, x, t, dt.SGD(0.1), loss=loss), host_params(net)
    return dt.train_recurrent(net, x, t, dt.SGD(0.1), loss=loss)[0], host_params(net)


@pytest.mark.parametrize("form", ["C order", "strided", "F order", "float32", "list",
                                  "float value"])
@pytest.mark.parametrize("verb", VERBS)
def test_a_loss_is_called_once_and_taken_as_the_generic_code_takes_it(backend, monkeypatch,
                                                                       verb, form):
    """On every path (the planned pass, the fused SGD step, the layers') a loss that samples
    is called once per call and gives the generic code's result (``DUALTAPE_FUSED=0``),
    whatever the form of its gradient (a view, float32 for a float64 network: cast, as
    ``backward`` takes ``dy``; a list) or of its value (a Python float)."""
    if form == "F order" and backend.name != "numpy":
        pytest.skip("a numpy layout")
    found = {}
    for switch in ("1", "0"):
        monkeypatch.setenv("DUALTAPE_FUSED", switch)
        loss = Sampling(form)
        found[switch] = run(verb, loss)
        assert loss.calls == 1
    assert found["1"][0] == pytest.approx(found["0"][0], rel=1e-12)
    for fast, generic in zip(found["1"][1], found["0"][1], strict=True):
        for k in fast:
            np.testing.assert_allclose(fast[k], generic[k], rtol=1e-10, atol=1e-13)


@pytest.mark.parametrize(("form", "error", "message"), [
    ("short gradient", ValueError, r"the loss gradient must have shape \(.*\), got \(.*, 1\)"),
    ("complex gradient", TypeError, "the loss gradient must be floating point, got .*complex"),
    ("vector value", TypeError, "the loss value must be a number or a 0-d array, got"),
    ("no gradient", TypeError, r"the loss must return \(value, gradient\), got"),
])
@pytest.mark.parametrize("verb", VERBS)
def test_a_loss_result_training_cannot_take_is_named_in_one_line(backend, verb, form, error,
                                                                 message):
    """Before anything is updated, on every path."""
    net = lstm_stack() if verb.endswith(("sequence", "recurrent")) else deep_net()
    before = host_params(net)
    with pytest.raises(error, match=f"^{verb}: {message}") as raised:
        run(verb, Sampling(form), net)
    assert "\n" not in str(raised.value)
    assert_params_equal(host_params(net), before)


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
