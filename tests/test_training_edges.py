"""training.py at its edges, on every backend: the words of each refusal (which call, which
argument, which gradient), a loss's result as training takes it (a batch of one's gradient
without its batch axis, a number or a numpy scalar as the value), the loss and input check
averaged by an optimizer that spans processes, and the global norm of gradients whose squares
underflow."""

from __future__ import annotations

import re
from types import MappingProxyType

import numpy as np
import pytest

import dualtape
from dualtape import clip_gradients
from dualtape.backend import backend_of, dtype_name

from .conftest import np64
from .helpers import assert_params_equal, host_params, other_backend_array

IMAGES = np.random.default_rng(5).normal(size=(1, 1, 3, 4))
"""One image of one channel: a batch of one, the outputs ``(1, 2, 3, 4)``."""


class SharedSGD:
    """``SGD(0.1)`` training with one other process (as ``distributed.DataParallel`` does): its
    collective ``mean`` averages each value with ``theirs``, that process's."""

    def __init__(self, theirs: list[float]) -> None:
        self.sgd, self.theirs = dualtape.SGD(0.1), theirs
        self.asked: list[list[float]] = []

    def mean(self, values: list[float]) -> list[float]:
        self.asked.append(list(values))
        return [(v + t) / 2 for v, t in zip(values, self.theirs, strict=True)]

    def step(self, params, grads) -> None:
        self.sgd.step(params, grads)


def make_call(verb: str, optimizer, nan_in: str | None = None):
    """``(net, call)``: ``call()`` trains a small network once with ``verb``, ``nan_in`` (the
    network's parameters, the initial state or the targets) holding NaN."""
    host = np.random.default_rng(3).normal(size=(3, 2, 2))
    target = host[::-1].copy()
    target[..., 0] = np.nan if nan_in == "targets" else target[..., 0]
    if verb == "train":
        net = dualtape.Network([dualtape.FullyConnected(2, 2, seed=1, dtype="float64")])
        if nan_in == "params":
            net.layers[0].params["b"] = dualtape.asarray(np.array([0.0, np.nan]))
        x, t = dualtape.asarray(host[0]), dualtape.asarray(target[0])
        return net, lambda: dualtape.train(net, x, t, optimizer)
    net = dualtape.RecurrentNetwork([dualtape.LSTM(2, 3, seed=4, dtype="float64"),
                                     dualtape.FullyConnected(3, 2, seed=5, dtype="float64")])
    state = [dualtape.asarray(np.full((2, 3), np.nan if nan_in == "state" else 0.0))]
    xs, ts = dualtape.asarray(host), dualtape.asarray(target)
    return net, lambda: dualtape.train_recurrent(net, xs, ts, optimizer, state=state)[0]


def exactly(message: str) -> str:
    return f"^{re.escape(message)}$"


@pytest.mark.parametrize("verb", ["train", "train_recurrent"])
def test_the_loss_is_averaged_over_the_processes_that_train_together(backend, verb):
    _, alone = make_call(verb, dualtape.SGD(0.1))
    own = alone()
    shared = SharedSGD([3.0, 1.0])
    _, call = make_call(verb, shared)
    assert call() == pytest.approx((own + 3.0) / 2, rel=1e-12)
    assert len(shared.asked) == 1 and shared.asked[0][1] == 1.0  # the input is finite here
    assert shared.asked[0][0] == pytest.approx(own, rel=1e-12)


@pytest.mark.parametrize("verb", ["train", "train_recurrent"])
@pytest.mark.parametrize("case", ["another-process", "targets"])
def test_a_non_finite_reading_stops_the_call_before_any_update_in_its_words(
        backend, verb, case):
    """Another process's input holding NaN (its 0 and this one's 1 give 0.5), or a NaN loss of
    finite inputs and weights, which says what to check."""
    if case == "another-process":
        net, call = make_call(verb, SharedSGD([0.0, 0.0]))
        message = (f"{verb}: another process's input holds NaN or inf; no update was applied "
                   "on any process")
    else:
        net, call = make_call(verb, dualtape.SGD(0.1), "targets")
        message = (f"{verb}: the loss is nan; no update was applied. Check the targets for "
                   "NaN/inf, or lower the learning rate")
    before = host_params(net)
    with pytest.raises(FloatingPointError, match=exactly(message)):
        call()
    assert_params_equal(host_params(net), before)


@pytest.mark.parametrize("verb, nan_in, what", [
    ("train", "params", "the network's parameters"),
    ("train_recurrent", "state", "the initial state"),
])
def test_a_non_finite_loss_names_the_call_and_the_array_to_blame(backend, verb, nan_in, what):
    _, call = make_call(verb, dualtape.SGD(0.1), nan_in)
    with pytest.raises(FloatingPointError, match=exactly(
            f"{verb}: NaN or inf in {what}, so the loss is not finite; no update was applied")):
        call()


@pytest.mark.parametrize("optimizer", ["sgd", dualtape.SGD, object()],
                         ids=["a-name", "the-class", "no-step"])
@pytest.mark.parametrize("verb", ["train", "train_recurrent"])
def test_an_optimizer_that_is_not_an_object_with_a_step_is_named(backend, verb, optimizer):
    net, call = make_call(verb, optimizer)
    before = host_params(net)
    with pytest.raises(TypeError, match=exactly(
            f"{verb}: optimizer must be an optimizer object such as dualtape.SGD(0.1) or "
            f"dualtape.Adam(), got {optimizer!r}")):
        call()
    assert_params_equal(host_params(net), before)


@pytest.mark.parametrize("grads, in_place, words", [
    (("W",), False, "(what backward returns), got tuple"),
    ([MappingProxyType({"W": 1.0})], True,
     "(what backward returns, changeable for in_place=True), got list"),
])
def test_gradients_of_another_form_are_named_by_their_type(grads, in_place, words):
    with pytest.raises(TypeError, match=exactly(
            f"clip_gradients: expected a gradient dict or a list of them {words}")):
        clip_gradients(grads, 1.0, in_place=in_place)


def test_a_gradient_on_another_backend_is_named_by_its_place_in_the_list(backend):
    here = dualtape.asarray(np.ones(2))
    other, _ = other_backend_array(backend, np.ones(2))
    with pytest.raises(TypeError, match="^gradient 2 is a .+ but clip_gradients lives on "):
        clip_gradients([{"a": here, "b": here}, {"c": other}], 1.0)


@pytest.mark.parametrize("dtype, tiny", [("float64", 1e-200), ("float32", 1e-30)])
def test_gradients_whose_squares_underflow_still_have_their_norm(backend, dtype, tiny):
    grads = [{"a": dualtape.asarray(np.array([3 * tiny], dtype)),
              "b": dualtape.asarray(np.array([4 * tiny], dtype))}]
    clipped, norm = clip_gradients(grads, tiny)
    rel = 1e-12 if dtype == "float64" else 1e-6
    assert float(norm) == pytest.approx(5 * tiny, rel=rel, abs=0)
    assert np64(clipped[0]["a"])[0] == pytest.approx(0.6 * tiny, rel=rel, abs=0)


def image_network(dtype: str = "float64") -> dualtape.Network:
    return dualtape.Network([dualtape.Convolution(1, 2, 1, seed=0, dtype=dtype)])


@pytest.mark.parametrize("kind", ["images", "sequences"])
def test_a_batch_of_ones_loss_gradient_may_leave_out_the_batch_axis(backend, kind):
    """As ``backward`` takes ``dy``: the first axis of images, the second to last of a
    sequence's outputs ``(T, 1, o)``."""
    def loss(drop: bool):
        def called(xp, y, target, *weights):
            dy = xp.reshape(xp.sin(y), tuple(n for n in y.shape if n != 1)) if drop else xp.sin(y)
            return xp.sum(y * y), xp.astype(dy, xp.float32)  # cast too: the checked way
        return called

    def gradients(drop: bool):
        if kind == "images":
            return dualtape.backpropagate(image_network(), dualtape.asarray(IMAGES), None,
                                          loss=loss(drop))[1]
        net = dualtape.RecurrentNetwork([dualtape.LSTM(2, 3, seed=4, dtype="float64")])
        xs = dualtape.asarray(np.random.default_rng(6).normal(size=(4, 1, 2)))
        return dualtape.backpropagate_sequence(net, xs, None, loss=loss(drop)).grads

    dropped, kept = gradients(True), gradients(False)
    for k in kept[0]:
        np.testing.assert_array_equal(np64(dropped[0][k]), np64(kept[0][k]))


def test_a_loss_that_returns_no_pair_is_named_with_what_it_returned(backend):
    with pytest.raises(TypeError, match=exactly(
            "backpropagate: the loss must return (value, gradient), got float")):
        dualtape.backpropagate(image_network(), dualtape.asarray(IMAGES), None,
                               loss=lambda xp, y, target: 1.0)


@pytest.mark.parametrize("number", [2.5, 2], ids=["float", "int"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_number_as_the_loss_value_is_made_an_array_where_the_outputs_are(backend, dtype,
                                                                           number):
    """Of the outputs' dtype, and not on the backend selected when the call is made."""
    net, x = image_network(dtype), dualtape.asarray(IMAGES.astype(dtype))
    _, elsewhere = other_backend_array(backend, np.ones(1))
    with dualtape.use_backend(elsewhere):
        value, _ = dualtape.backpropagate(net, x, None,
                                          loss=lambda xp, y, target: (number, xp.ones_like(y)))
    assert (backend_of(value).name, backend_of(value).device) == (backend.name, backend.device)
    assert (dtype_name(value.dtype), float(value)) == (dtype, number)


def test_a_numpy_scalar_as_the_loss_value_is_taken_on_numpy_alone(backend):
    """numpy's sums give one; on another backend it is not where the outputs are."""
    net, x = image_network(), dualtape.asarray(IMAGES)
    loss = lambda xp, y, target: (np.float64(2.5), xp.ones_like(y))  # noqa: E731
    if backend.name == "numpy":
        assert float(dualtape.backpropagate(net, x, None, loss=loss)[0]) == 2.5
        return
    with pytest.raises(TypeError,
                       match="^the loss value is a numpy array .* but backpropagate lives on "):
        dualtape.backpropagate(net, x, None, loss=loss)


@pytest.mark.parametrize("form", ["a string", "a vector"])
def test_a_loss_value_that_is_no_number_is_named_with_its_type_and_shape(backend, form):
    given = []

    def loss(xp, y, target):
        given.append("2.5" if form == "a string" else xp.ones(2, dtype=y.dtype))
        return given[0], xp.ones_like(y)

    with pytest.raises(TypeError, match="^backpropagate: the loss value must be a number or a 0-d "
                                        "array, got ") as raised:
        dualtape.backpropagate(image_network(), dualtape.asarray(IMAGES), None, loss=loss)
    shape = getattr(given[0], "shape", ())
    assert str(raised.value).endswith(f", got {type(given[0]).__name__} of shape {shape}")
    assert str(shape) in ("()", "(2,)", "torch.Size([2])")


def test_a_loss_value_of_integers_is_named_with_its_dtype(backend):
    loss = lambda xp, y, target: (xp.astype(xp.sum(y), xp.int64), xp.ones_like(y))  # noqa: E731
    with pytest.raises(TypeError, match="^backpropagate: the loss value must be real floating "
                                        "point, got .*int64$"):
        dualtape.backpropagate(image_network(), dualtape.asarray(IMAGES), None, loss=loss)


@pytest.mark.parametrize("verb, wanted, pointer", [
    ("train", "Network", "train_recurrent trains a RecurrentNetwork on sequences"),
    ("backpropagate", "Network", "backpropagate_sequence takes a RecurrentNetwork"),
    ("train_recurrent", "RecurrentNetwork", "train trains a Network"),
    ("backpropagate_sequence", "RecurrentNetwork", "backpropagate takes a Network"),
])
def test_the_other_kind_of_network_is_named_with_the_verb_that_takes_it(backend, verb, wanted,
                                                                        pointer):
    given = "RecurrentNetwork" if wanted == "Network" else "Network"
    net = getattr(dualtape, given)([dualtape.LSTM(2, 3, seed=4, dtype="float64")]
                                   if given == "RecurrentNetwork" else [dualtape.Tanh()])
    call = getattr(dualtape, verb)
    args = (net, None, None, dualtape.SGD(0.1)) if verb.startswith("train") else (net, None, None)
    with pytest.raises(TypeError, match=exactly(
            f"{verb}: expected a {wanted}, got a {given}; {pointer}")):
        call(*args)
