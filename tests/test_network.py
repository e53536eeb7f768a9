"""Network: size checks, forward/backward against finite differences, moving between backends,
training, and bad input."""

from __future__ import annotations

import re

import numpy as np
import pytest

import dualtape
from dualtape.backend import backend_of

from .conftest import np64
from .helpers import (
    assert_params_equal,
    away_from_kinks,
    deep_net,
    host_params,
    other_backend_array,
    other_device_array,
)

XOR_X = np.array([[0.0, 0.0], [0.0, 1.0], [1.0, 0.0], [1.0, 1.0]])
XOR_T = np.array([[0.0], [1.0], [1.0], [0.0]])


# --- construction ----------------------------------------------------------------------------


def test_size_mismatch_names_both_layers_and_both_sizes(backend):
    first, second = dualtape.FullyConnected(2, 4), dualtape.FullyConnected(5, 3)
    with pytest.raises(ValueError) as info:
        dualtape.Network([first, dualtape.Tanh(), second])
    message = str(info.value)
    assert repr(first) in message and repr(second) in message
    rest = message.replace(repr(first), "").replace(repr(second), "")
    assert re.search(r"\b5\b", rest) and re.search(r"\b4\b", rest)


def test_size_mismatch_is_found_across_activations(backend):
    with pytest.raises(ValueError, match="FullyConnected"):
        dualtape.Network([dualtape.FullyConnected(2, 3), dualtape.Relu(), dualtape.Softmax(),
                          dualtape.FullyConnected(4, 1)])


def test_empty_network_raises_value_error(backend):
    with pytest.raises(ValueError, match="at least one layer"):
        dualtape.Network([])


def test_something_that_is_not_a_layer_raises_type_error(backend):
    with pytest.raises(TypeError, match="layer 1"):
        dualtape.Network([dualtape.FullyConnected(2, 2), np.tanh])


def test_a_recurrent_layer_points_to_recurrent_network(backend):
    with pytest.raises(TypeError, match=r"layer 1 LSTM\(2, 2\) is recurrent; use RecurrentNetwork"):
        dualtape.Network([dualtape.FullyConnected(2, 2), dualtape.LSTM(2, 2)])


def test_layers_of_different_dtypes_are_rejected(backend):
    with pytest.raises(ValueError, match="dtype"):
        dualtape.Network([dualtape.FullyConnected(2, 2, dtype="float32"),
                          dualtape.FullyConnected(2, 2, dtype="float64")])


# array_api_strict warns when its dtypes are compared with another library's; harmless here.
@pytest.mark.filterwarnings("ignore:You are comparing a array_api_strict dtype:UserWarning")
def test_layers_on_different_backends_are_rejected(backend):
    other = "array_api_strict" if backend.name == "numpy" else "numpy"
    here = dualtape.FullyConnected(2, 2)
    with dualtape.use_backend(other):
        there = dualtape.FullyConnected(2, 2)
    with pytest.raises(ValueError) as info:
        dualtape.Network([here, there])
    assert backend.name in str(info.value) and other in str(info.value)


def test_network_sizes_dtype_and_backend(backend):
    net = deep_net()
    assert (net.n_in, net.n_out, net.dtype) == (3, 3, "float64")
    assert net.backend == backend
    assert str(net.backend.device) == str(backend.device)
    assert net.params[0] is net.layers[0].params


# --- forward, backward, predict --------------------------------------------------------------


def test_forward_matches_the_layers_applied_in_turn(backend):
    net = deep_net()
    x = dualtape.asarray(away_from_kinks((4, 3), seed=0))
    tapes, y = net.forward(x)
    assert len(tapes) == len(net.layers)
    expected = x
    for layer in net.layers:
        expected = layer.forward(expected)[1]
    np.testing.assert_array_equal(np64(y), np64(expected))


def test_network_backward_matches_finite_differences(backend):
    net = deep_net()
    tapes, _ = net.forward(dualtape.asarray(away_from_kinks((3, 3), seed=1)))
    assert len(net.backward(tapes, dualtape.asarray(np.ones((3, 3))))[0]) == len(net.layers)
    errors = dualtape.check_gradients(net, away_from_kinks((3, 3), seed=1), seed=2)
    assert len(errors) == 1 + 2 * 5  # the input, W and b of the five FullyConnected layers


def test_predict_equals_forward_and_keeps_a_single_example_single(backend):
    net = deep_net()
    x = away_from_kinks((2, 3), seed=3)
    _, y = net.forward(dualtape.asarray(x))
    np.testing.assert_array_equal(np64(net.predict(dualtape.asarray(x))), np64(y))
    single = net.predict(dualtape.asarray(x[0]))
    assert tuple(single.shape) == (3,)
    np.testing.assert_allclose(np64(single), np64(y)[0], rtol=1e-12)
    tapes, _ = net.forward(dualtape.asarray(x[0]))
    _, dx = net.backward(tapes, dualtape.asarray(np.ones(3)))
    assert tuple(dx.shape) == (3,)


def test_backward_checks_the_tapes_and_dy(backend):
    net = deep_net()
    tapes, _ = net.forward(dualtape.asarray(np.ones((2, 3))))
    with pytest.raises(ValueError, match="tapes"):
        net.backward(tapes[:-1], dualtape.asarray(np.ones((2, 3))))
    with pytest.raises(ValueError, match="dy"):
        net.backward(tapes, dualtape.asarray(np.ones((2, 4))))


# --- moving between backends -----------------------------------------------------------------


def test_to_round_trip_from_numpy_keeps_parameters_bit_identical(backend):
    with dualtape.use_backend("numpy"):
        net = deep_net("float32")
    before = host_params(net)
    x = away_from_kinks((2, 3), seed=4).astype(np.float32)
    y_numpy = np64(net.predict(x))
    assert net.to(backend.name, backend.device) is net
    for group in net.params:
        for p in group.values():
            assert backend_of(p) == backend
            assert str(backend_of(p).device) == str(backend.device)
    assert_params_equal(host_params(net), before)
    np.testing.assert_allclose(np64(net.predict(dualtape.asarray(x))), y_numpy, rtol=1e-6)
    net.to("numpy")
    assert all(isinstance(p, np.ndarray) for group in net.params for p in group.values())
    assert_params_equal(host_params(net), before)


def test_to_accepts_a_backend_object(backend):
    with dualtape.use_backend("numpy"):
        net = deep_net()
    net.to(backend)
    assert net.backend == backend


# --- training --------------------------------------------------------------------------------


def test_xor_training_reduces_the_loss(backend):
    net = dualtape.Network([dualtape.FullyConnected(2, 4, seed=0), dualtape.Tanh(),
                            dualtape.FullyConnected(4, 1, seed=1), dualtape.Logit()])
    x, t = dualtape.asarray(XOR_X, dtype="float32"), dualtape.asarray(XOR_T, dtype="float32")
    optimizer = dualtape.SGD(1.0, momentum=0.9)
    first = 0.5 * np.sum((np64(net.predict(x)) - XOR_T) ** 2) / 4
    losses = [dualtape.train(net, x, t, optimizer) for _ in range(100)]
    assert all(isinstance(v, float) for v in losses)
    assert losses[0] == pytest.approx(first, rel=1e-6)  # ½Σ(y − t)² averaged over the batch
    assert losses[-1] < 0.05 * losses[0]
    assert np.array_equal(np64(net.predict(x)) > 0.5, XOR_T > 0.5)
    assert net.backend == backend


def test_xor_as_two_classes_with_adam_and_integer_labels(backend):
    net = dualtape.Network([dualtape.FullyConnected(2, 6, seed=0), dualtape.Relu(),
                            dualtape.FullyConnected(6, 2, seed=1)])
    x, labels = dualtape.asarray(XOR_X, dtype="float32"), dualtape.asarray([0, 1, 1, 0])
    optimizer = dualtape.Adam(0.05)
    losses = [dualtape.train(net, x, labels, optimizer, loss="softmax_cross_entropy")
              for _ in range(100)]
    assert losses[-1] < 0.05 * losses[0]
    assert np.argmax(np64(net.predict(x)), axis=1).tolist() == [0, 1, 1, 0]


def test_train_returns_the_loss_before_the_update(backend):
    net = dualtape.Network([dualtape.FullyConnected(2, 1, seed=0, dtype="float64")])
    x, t = XOR_X, XOR_T
    y = np64(net.predict(dualtape.asarray(x)))
    expected = 0.5 * np.sum((y - t) ** 2) / len(x)
    loss = dualtape.train(net, dualtape.asarray(x), dualtape.asarray(t), dualtape.SGD(0.1))
    assert loss == pytest.approx(expected, rel=1e-12)


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("activation", [dualtape.Tanh, dualtape.Relu, dualtape.Logit])
def test_train_on_non_finite_input_raises_and_changes_nothing(backend, bad, activation):
    net = dualtape.Network([dualtape.FullyConnected(2, 3, seed=0), activation(),
                            dualtape.FullyConnected(3, 1, seed=1)])
    before = host_params(net)
    optimizer = dualtape.SGD(0.1, momentum=0.9)
    x = XOR_X.copy()
    x[2, 0] = bad
    with pytest.raises(FloatingPointError):
        dualtape.train(net, dualtape.asarray(x, dtype="float32"),
                       dualtape.asarray(XOR_T, dtype="float32"), optimizer)
    assert_params_equal(host_params(net), before)
    assert optimizer.state == {} and optimizer.steps == 0


def test_train_on_a_nan_target_raises_and_changes_nothing(backend):
    net = dualtape.Network([dualtape.FullyConnected(2, 1, seed=0)])
    before = host_params(net)
    t = XOR_T.copy()
    t[1, 0] = np.nan
    with pytest.raises(FloatingPointError, match="no update"):
        dualtape.train(net, dualtape.asarray(XOR_X, dtype="float32"),
                       dualtape.asarray(t, dtype="float32"), dualtape.SGD(0.1))
    assert_params_equal(host_params(net), before)


def test_forward_propagates_nan_to_the_output(backend):
    net = deep_net()
    x = away_from_kinks((2, 3), seed=5)
    x[0, 1] = np.nan
    y = np64(net.predict(dualtape.asarray(x)))
    assert np.isnan(y[0]).all()
    assert np.isfinite(y[1]).all()


# --- bad input -------------------------------------------------------------------------------


def test_wrong_feature_size_raises_value_error(backend):
    with pytest.raises(ValueError, match=r"Network.*\(batch, 3\).*\(2, 4\)"):
        deep_net().predict(dualtape.asarray(np.ones((2, 4))))


@pytest.mark.parametrize("shape", [(), (2, 2, 3)])
def test_wrong_rank_raises_value_error(backend, shape):
    with pytest.raises(ValueError, match="shape"):
        deep_net().predict(dualtape.asarray(np.ones(shape)))


@pytest.mark.parametrize("dtype", ["int64", "bool"])
def test_integer_and_boolean_input_is_rejected_with_how_to_convert(backend, dtype):
    x = dualtape.asarray(np.ones((2, 3), dtype=dtype))
    with pytest.raises(TypeError, match=r"floating point.*dualtape\.asarray\(x, dtype="):
        deep_net().predict(x)
    with pytest.raises(TypeError, match="floating point"):
        dualtape.train(deep_net(), x, dualtape.asarray(np.ones((2, 3))), dualtape.SGD(0.1))


def test_input_from_another_backend_raises_type_error_naming_both(backend):
    x, other = other_backend_array(backend, np.ones((2, 3)))
    with pytest.raises(TypeError) as info:
        deep_net().predict(x)
    assert other in str(info.value) and backend.name in str(info.value)


def test_target_from_another_backend_raises_type_error_naming_both(backend):
    t, other = other_backend_array(backend, np.ones((2, 3)))
    with pytest.raises(TypeError) as info:
        dualtape.train(deep_net(), dualtape.asarray(np.ones((2, 3))), t, dualtape.SGD(0.1))
    assert other in str(info.value) and backend.name in str(info.value)


def test_input_on_another_device_raises_value_error_naming_both(backend):
    x, other = other_device_array(backend, np.ones((2, 3)))
    with pytest.raises(ValueError) as info:
        deep_net().predict(x)
    assert other in str(info.value) and str(backend.device) in str(info.value)


# --- misuse answered clearly -----------------------------------------------------------------


def xor_net(dtype: str = "float64") -> dualtape.Network:
    return dualtape.Network([dualtape.FullyConnected(2, 3, seed=0, dtype=dtype), dualtape.Tanh(),
                             dualtape.FullyConnected(3, 1, seed=1, dtype=dtype)])


@pytest.mark.parametrize("optimizer", ["sgd", None, dualtape.SGD])
def test_train_needs_an_optimizer_object(backend, optimizer):
    net = xor_net()
    with pytest.raises(TypeError, match="optimizer must be an optimizer object"):
        dualtape.train(net, dualtape.asarray(XOR_X), dualtape.asarray(XOR_T), optimizer)


def test_train_refuses_a_recurrent_network_and_points_to_train_recurrent(backend):
    rnet = dualtape.RecurrentNetwork([dualtape.LSTM(2, 1, seed=0, dtype="float64")])
    with pytest.raises(TypeError, match="train_recurrent"):
        dualtape.train(rnet, dualtape.asarray(XOR_X), dualtape.asarray(XOR_T), dualtape.SGD(0.1))


def test_train_on_an_empty_batch_says_so(backend):
    with pytest.raises(ValueError, match="batch is empty"):
        dualtape.train(xor_net(), dualtape.asarray(np.zeros((0, 2))),
                       dualtape.asarray(np.zeros((0, 1))), dualtape.SGD(0.1))


def test_nan_parameters_are_named_not_the_targets(backend):
    net = xor_net()
    net.layers[2].params["b"] = dualtape.asarray(np.array([np.nan]))
    with pytest.raises(FloatingPointError, match="NaN or inf in the network's parameters"):
        dualtape.train(net, dualtape.asarray(XOR_X), dualtape.asarray(XOR_T), dualtape.SGD(0.1))


@pytest.mark.parametrize("other", [
    lambda: [dualtape.FullyConnected(2, 3, seed=0, dtype="float64"), dualtape.Logit(),
             dualtape.FullyConnected(3, 1, seed=1, dtype="float64")],
    lambda: [dualtape.FullyConnected(2, 3, seed=0, dtype="float64"),
             dualtape.FullyConnected(3, 3, seed=1, dtype="float64"),
             dualtape.FullyConnected(3, 1, seed=2, dtype="float64")],
    lambda: [dualtape.FullyConnected(4, 3, seed=0, dtype="float64"), dualtape.Tanh(),
             dualtape.FullyConnected(3, 1, seed=1, dtype="float64")],
], ids=["other-activation", "other-kind", "other-width"])
def test_tapes_of_another_architecture_are_refused(backend, other):
    layers = other()
    tapes, _ = dualtape.Network(layers).forward(dualtape.asarray(np.ones((2, layers[0].n_in))))
    with pytest.raises(ValueError, match="tape [01] is a .*Tape, not one of layer"):
        xor_net().backward(tapes, dualtape.asarray(np.ones((2, 1))))


# --- devices ---------------------------------------------------------------------------------


def test_to_moves_between_two_devices_of_one_backend():
    strict = pytest.importorskip("array_api_strict")
    with dualtape.use_backend("array_api_strict"):
        net = deep_net()
    before = host_params(net)
    net.to("array_api_strict", "device1")
    for p in (p for group in net.params for p in group.values()):
        assert p.device == strict.Device("device1")
    assert_params_equal(host_params(net), before)
    x = strict.asarray(away_from_kinks((2, 3), seed=3), device=strict.Device("device1"))
    assert net.predict(x).device == strict.Device("device1")
