"""Feed-forward layers: forward against a numpy oracle, backward against finite differences,
the tape rule, seeding, shapes, and bad input."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dualtape
from dualtape.backend import backend_of

from .conftest import np64
from .helpers import (
    away_from_kinks,
    other_backend_array,
    other_device_array,
)

ACTIVATIONS = {
    "Logit": (dualtape.Logit, lambda x: 1.0 / (1.0 + np.exp(-x))),
    "Elu": (dualtape.Elu, lambda x: np.where(x > 0, x, np.expm1(np.minimum(x, 0.0)))),
    "Relu": (dualtape.Relu, lambda x: np.maximum(x, 0.0)),
    "Tanh": (dualtape.Tanh, np.tanh),
    "Softmax": (
        dualtape.Softmax,
        lambda x: np.exp(x - x.max(-1, keepdims=True))
        / np.exp(x - x.max(-1, keepdims=True)).sum(-1, keepdims=True),
    ),
}
ACTIVATION_NAMES = list(ACTIVATIONS)
ALL_LAYERS = ["FullyConnected", *ACTIVATION_NAMES]
# The functions each activation's forward pass needs (so the counting wrapper is seen to work).
FORWARD_CALLS = {"Logit": "tanh", "Elu": "expm1", "Tanh": "tanh", "Softmax": "exp"}

N_IN, N_OUT, BATCH = 4, 3, 5


def make_layer(name: str, dtype: str = "float64", seed: int = 3):
    """A seeded FullyConnected(N_IN, N_OUT) or the named activation."""
    if name == "FullyConnected":
        return dualtape.FullyConnected(N_IN, N_OUT, seed=seed, dtype=dtype)
    return ACTIVATIONS[name][0]()


# --- forward against the oracle --------------------------------------------------------------


def test_fully_connected_forward_matches_numpy(backend):
    layer = dualtape.FullyConnected(N_IN, N_OUT, seed=1, dtype="float64")
    x = np.random.default_rng(0).normal(size=(BATCH, N_IN))
    _, y = layer.forward(dualtape.asarray(x))
    assert backend_of(y) == backend
    w, b = np64(layer.params["W"]), np64(layer.params["b"])
    np.testing.assert_allclose(np64(y), x @ w.T + b, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("name", ACTIVATION_NAMES)
@pytest.mark.parametrize("dtype, rtol", [("float64", 1e-12), ("float32", 2e-6)])
def test_activation_forward_matches_numpy(backend, name, dtype, rtol):
    layer, oracle = ACTIVATIONS[name][0](), ACTIVATIONS[name][1]
    x = np.random.default_rng(1).uniform(-4.0, 4.0, size=(BATCH, 6)).astype(dtype)
    _, y = layer.forward(dualtape.asarray(x))
    assert backend_of(y) == backend
    assert dualtape.to_numpy(y).dtype == np.dtype(dtype)
    np.testing.assert_allclose(np64(y), oracle(x.astype(np.float64)), rtol=rtol, atol=rtol * 1e-3)


def test_softmax_is_stable_for_huge_logits(backend):
    _, y = dualtape.Softmax().forward(dualtape.asarray([[1000.0, 1001.0, 1002.0],
                                                        [-1e4, 0.0, 1e4]], dtype="float64"))
    e = np.exp([-2.0, -1.0, 0.0])
    np.testing.assert_allclose(np64(y), [e / e.sum(), [0.0, 0.0, 1.0]], rtol=1e-12)


def test_logit_saturates_without_overflow(backend):
    with np.errstate(all="raise"):
        _, y = dualtape.Logit().forward(dualtape.asarray([-1000.0, 0.0, 1000.0], dtype="float64"))
    np.testing.assert_array_equal(np64(y), [0.0, 0.5, 1.0])


# --- backward against finite differences -----------------------------------------------------


def test_fully_connected_backward_matches_finite_differences(backend):
    layer = dualtape.FullyConnected(N_IN, N_OUT, seed=2, dtype="float64")
    dualtape.check_gradients(layer, away_from_kinks((BATCH, N_IN), seed=3))


@pytest.mark.parametrize("name", ACTIVATION_NAMES)
def test_activation_backward_matches_finite_differences(backend, name):
    dualtape.check_gradients(ACTIVATIONS[name][0](), away_from_kinks((3, 4), seed=4))


def test_backward_casts_dy_to_the_layer_dtype(backend):
    layer = dualtape.FullyConnected(N_IN, N_OUT, seed=2, dtype="float64")
    tape, y = layer.forward(dualtape.asarray(np.ones((2, N_IN))))
    grads, dx = layer.backward(tape, dualtape.asarray(np.ones((2, N_OUT)), dtype="float32"))
    assert dualtape.to_numpy(dx).dtype == np.float64
    assert dualtape.to_numpy(grads["W"]).dtype == np.float64


# --- the tape rule ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", ALL_LAYERS)
def test_backward_evaluates_no_exp_tanh_or_log(backend, name):
    layer = make_layer(name)
    found = dualtape.check_no_recompute(layer, away_from_kinks((BATCH, N_IN), seed=5))
    if name in FORWARD_CALLS:  # the count does see the calls the forward pass makes
        assert found[FORWARD_CALLS[name]][0] >= 1
    assert all(backward == 0 for _, backward in found.values())


@pytest.mark.parametrize("name", ALL_LAYERS)
def test_tape_is_a_named_tuple_of_arrays(backend, name):
    layer = make_layer(name)
    tape, _ = layer.forward(dualtape.asarray(away_from_kinks((BATCH, N_IN), seed=6)))
    assert isinstance(tape, tuple) and hasattr(type(tape), "_fields")
    fields = tape._asdict()
    if layer.params:  # the parameters' version, an int, is the last field
        assert type(tape)._fields[-1] == "version"
        assert fields.pop("version") == layer.params.version
        assert type(tape.version) is int
    for field in fields.values():
        assert backend_of(field) == backend


@pytest.mark.parametrize("name", ACTIVATION_NAMES)
def test_activation_tape_keeps_the_output_not_the_input(backend, name):
    x = away_from_kinks((BATCH, N_IN), seed=7)
    tape, y = ACTIVATIONS[name][0]().forward(dualtape.asarray(x))
    assert type(tape)._fields == ("y",)
    np.testing.assert_array_equal(np64(tape.y), np64(y))
    assert not np.array_equal(np64(tape.y), x)


# --- single examples -------------------------------------------------------------------------


@pytest.mark.parametrize("name", ALL_LAYERS)
def test_single_example_in_gives_single_example_out(backend, name):
    layer = make_layer(name)
    x = away_from_kinks((N_IN,), seed=8)
    tape, y = layer.forward(dualtape.asarray(x))
    n_out = N_OUT if name == "FullyConnected" else N_IN
    assert tuple(y.shape) == (n_out,)
    _, batched = layer.forward(dualtape.asarray(x[None, :]))
    np.testing.assert_array_equal(np64(y), np64(batched)[0])
    dy = np.linspace(-1.0, 1.0, n_out)
    grads, dx = layer.backward(tape, dualtape.asarray(dy))
    assert tuple(dx.shape) == (N_IN,)
    batch_tape, _ = layer.forward(dualtape.asarray(x[None, :]))
    batch_grads, batch_dx = layer.backward(batch_tape, dualtape.asarray(dy[None, :]))
    np.testing.assert_array_equal(np64(dx), np64(batch_dx)[0])
    for key in grads:
        np.testing.assert_array_equal(np64(grads[key]), np64(batch_grads[key]))


def test_python_list_input_goes_to_the_parameters_backend(backend):
    layer = dualtape.FullyConnected(2, 1, seed=0)
    _, y = layer.forward([[0.5, -0.5]])
    assert backend_of(y) == backend


# --- seeds and dtypes ------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_same_seed_gives_bit_identical_parameters_on_every_backend(backend, dtype):
    layer = dualtape.FullyConnected(5, 4, seed=11, dtype=dtype)
    with dualtape.use_backend("numpy"):
        reference = dualtape.FullyConnected(5, 4, seed=11, dtype=dtype)
    for name, p in layer.params.items():
        assert backend_of(p) == backend
        host = dualtape.to_numpy(p)
        assert host.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(host, reference.params[name])


@pytest.mark.parametrize("dtype, rtol", [("float32", 1e-6), ("float64", 1e-14)])
def test_same_seed_gives_the_same_outputs_on_every_backend(backend, dtype, rtol):
    # Parameters are bit-identical (above); outputs go through each backend's own matmul and
    # transcendental functions, which may round differently in the last bit.
    x = np.random.default_rng(5).normal(size=(BATCH, N_IN)).astype(dtype)
    layers = [dualtape.FullyConnected(N_IN, N_OUT, seed=12, dtype=dtype), dualtape.Tanh()]
    with dualtape.use_backend("numpy"):
        reference = [dualtape.FullyConnected(N_IN, N_OUT, seed=12, dtype=dtype), dualtape.Tanh()]
    y, y_ref = dualtape.asarray(x), x
    for layer, ref in zip(layers, reference, strict=True):
        y, y_ref = layer.forward(y)[1], ref.forward(y_ref)[1]
        np.testing.assert_allclose(np64(y), np64(y_ref), rtol=rtol, atol=rtol)


def test_different_seeds_give_different_parameters(backend):
    a = dualtape.FullyConnected(3, 3, seed=1)
    b = dualtape.FullyConnected(3, 3, seed=2)
    assert not np.array_equal(np64(a.params["W"]), np64(b.params["W"]))


def test_fully_connected_initialisation_range_and_dtype(backend):
    # Uniform in [-1/√n_in, 1/√n_in] = [-0.25, 0.25]: bounded by the scale, and filling it
    # (a scale of 1/n_in or 1/(2√n_in) would pass the bound alone).
    layer = dualtape.FullyConnected(16, 64, seed=0)
    assert layer.dtype == "float32"
    w = np64(layer.params["W"])
    for p in layer.params.values():
        assert np.all(np.abs(np64(p)) <= 1.0 / 4.0)
    assert w.max() > 0.24 and w.min() < -0.24
    assert np.std(w) == pytest.approx(0.25 / np.sqrt(3), rel=0.05)
    assert tuple(layer.params["W"].shape) == (64, 16)
    assert tuple(layer.params["b"].shape) == (64,)


@pytest.mark.parametrize("layer", [dualtape.FullyConnected, dualtape.LSTM])
@pytest.mark.parametrize("dtype", ["float16", "int32", "complex64", np.int64, "banana", None])
def test_unsupported_dtype_is_rejected_at_build_time(layer, dtype):
    with pytest.raises(ValueError, match=f"{layer.kind}: dtype must be 'float32' or 'float64'"):
        layer(2, 2, dtype=dtype)


@pytest.mark.parametrize("layer", [dualtape.FullyConnected, dualtape.LSTM])
@pytest.mark.parametrize("seed", [-1, 1.5, "7", True])
def test_a_seed_must_be_a_non_negative_integer(layer, seed):
    with pytest.raises(ValueError, match="seed must be None or an integer >= 0"):
        layer(2, 2, seed=seed)


def test_softmax_of_zero_features_is_refused(backend):
    with pytest.raises(ValueError, match="Softmax: the input has 0 features"):
        dualtape.Softmax().forward(dualtape.asarray(np.ones((2, 0))))


@pytest.mark.parametrize("name", ["Logit", "Tanh", "Relu", "Elu", "Softmax"])
def test_each_activation_has_a_tape_class_of_its_own(name):
    tape, _ = getattr(dualtape, name)().forward(np.ones((1, 2)))
    assert type(tape).__name__ == f"{name}Tape" and tape._fields == ("y",)


@pytest.mark.parametrize("n_in, n_out", [(0, 2), (2, -1), (2.0, 2), (True, 2), ("3", 2)])
def test_fully_connected_sizes_must_be_positive_integers(n_in, n_out):
    with pytest.raises(ValueError, match="positive integer"):
        dualtape.FullyConnected(n_in, n_out)


# --- shapes (property tests) -----------------------------------------------------------------

SHAPE_SETTINGS = settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@SHAPE_SETTINGS
@given(batch=st.integers(1, 6), n_in=st.integers(1, 6), n_out=st.integers(1, 6),
       seed=st.integers(0, 2**32 - 1))
def test_fully_connected_shapes_for_any_sizes(backend, batch, n_in, n_out, seed):
    layer = dualtape.FullyConnected(n_in, n_out, seed=seed)
    rng = np.random.default_rng(seed)
    tape, y = layer.forward(dualtape.asarray(rng.normal(size=(batch, n_in)), dtype="float32"))
    assert tuple(y.shape) == (batch, n_out)
    grads, dx = layer.backward(tape, dualtape.asarray(rng.normal(size=(batch, n_out))))
    assert tuple(dx.shape) == (batch, n_in)
    assert {k: tuple(g.shape) for k, g in grads.items()} == {"W": (n_out, n_in), "b": (n_out,)}


@SHAPE_SETTINGS
@given(name=st.sampled_from(ACTIVATION_NAMES), batch=st.integers(1, 6),
       features=st.integers(1, 6), seed=st.integers(0, 2**32 - 1))
def test_activations_keep_any_shape(backend, name, batch, features, seed):
    x = np.random.default_rng(seed).normal(scale=3.0, size=(batch, features))
    layer = ACTIVATIONS[name][0]()
    tape, y = layer.forward(dualtape.asarray(x))
    assert tuple(y.shape) == (batch, features)
    np.testing.assert_allclose(np64(y), ACTIVATIONS[name][1](x), rtol=1e-12, atol=1e-15)
    if name == "Softmax":
        np.testing.assert_allclose(np64(y).sum(axis=1), 1.0, rtol=1e-12)
    _, dx = layer.backward(tape, dualtape.asarray(np.ones((batch, features))))
    assert tuple(dx.shape) == (batch, features)


# --- bad input -------------------------------------------------------------------------------


def test_wrong_feature_size_raises_value_error_with_the_shapes(backend):
    layer = dualtape.FullyConnected(3, 2, seed=0)
    with pytest.raises(ValueError, match=r"\(batch, 3\).*\(5, 4\)"):
        layer.forward(dualtape.asarray(np.ones((5, 4)), dtype="float32"))


@pytest.mark.parametrize("shape", [(), (2, 2, 3), (1, 1, 1, 3)])
def test_wrong_rank_raises_value_error(backend, shape):
    layer = dualtape.FullyConnected(3, 2, seed=0)
    with pytest.raises(ValueError, match="shape"):
        layer.forward(dualtape.asarray(np.ones(shape), dtype="float32"))


@pytest.mark.parametrize("name", ALL_LAYERS)
@pytest.mark.parametrize("dtype", ["int64", "int32", "bool"])
def test_integer_and_boolean_input_is_rejected_with_how_to_convert(backend, name, dtype):
    layer = make_layer(name)
    x = dualtape.asarray(np.ones((2, N_IN), dtype=dtype))
    with pytest.raises(TypeError, match="floating point") as info:
        layer.forward(x)
    assert "dualtape.asarray(x, dtype=" in str(info.value)


def test_input_from_another_backend_raises_type_error_naming_both(backend):
    layer = dualtape.FullyConnected(3, 2, seed=0, dtype="float64")
    x, other = other_backend_array(backend, np.ones((2, 3)))
    with pytest.raises(TypeError) as info:
        layer.forward(x)
    assert other in str(info.value) and backend.name in str(info.value)


def test_dy_from_another_backend_raises_type_error_naming_both(backend):
    layer = dualtape.FullyConnected(3, 2, seed=0, dtype="float64")
    tape, _ = layer.forward(dualtape.asarray(np.ones((2, 3))))
    dy, other = other_backend_array(backend, np.ones((2, 2)))
    with pytest.raises(TypeError) as info:
        layer.backward(tape, dy)
    assert other in str(info.value) and backend.name in str(info.value)


def test_input_on_another_device_raises_value_error_naming_both(backend):
    layer = dualtape.FullyConnected(3, 2, seed=0, dtype="float64")
    x, other = other_device_array(backend, np.ones((2, 3)))
    with pytest.raises(ValueError) as info:
        layer.forward(x)
    message = str(info.value)
    assert other in message and str(backend.device) in message


def test_dy_of_the_wrong_shape_raises_value_error(backend):
    layer = dualtape.FullyConnected(3, 2, seed=0, dtype="float64")
    tape, _ = layer.forward(dualtape.asarray(np.ones((4, 3))))
    with pytest.raises(ValueError, match="dy"):
        layer.backward(tape, dualtape.asarray(np.ones((3, 2))))


def test_non_array_input_raises_type_error(backend):
    with pytest.raises(TypeError, match="must be an array"):
        dualtape.Tanh().forward("1.0")


RAGGED = r"must be a rectangular array, got a list whose rows differ in length \(setting"


@pytest.mark.parametrize("taker", ["network", "sequence", "ids", "layer"])
def test_a_ragged_list_is_refused_naming_its_taker(backend, taker):
    """Rows of unequal lengths: one line naming who refused it, numpy's words after."""
    ragged = [[1, 2, 3], [1, 2]]
    net = {"network": dualtape.Network([dualtape.FullyConnected(3, 2, seed=0)]),
           "sequence": dualtape.RecurrentNetwork([dualtape.LSTM(3, 2, seed=0)]),
           "ids": dualtape.RecurrentNetwork([dualtape.Embedding(5, 3, seed=0),
                                             dualtape.LSTM(3, 2, seed=0)])}.get(taker)
    owner = {"network": "Network: input", "layer": "FullyConnected.*: input"}.get(
        taker, "RecurrentNetwork: input sequence")
    with pytest.raises(ValueError, match=f"^{owner} {RAGGED}") as info:
        if taker == "layer":
            dualtape.FullyConnected(3, 2, seed=0).forward(ragged)
        elif taker == "network":
            net.forward(ragged)
        else:
            net.forward_sequence(None, ragged)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("name", ALL_LAYERS)
def test_nan_input_propagates_to_its_own_row_only(backend, name):
    x = away_from_kinks((3, N_IN), seed=9)
    clean = np64(make_layer(name).forward(dualtape.asarray(x))[1])
    x[1, 2] = np.nan
    y = np64(make_layer(name).forward(dualtape.asarray(x))[1])
    assert np.isnan(y[1]).any()
    np.testing.assert_array_equal(y[[0, 2]], clean[[0, 2]])


@pytest.mark.parametrize("name, expected", [("Tanh", [1.0, -1.0]), ("Logit", [1.0, 0.0]),
                                            ("Relu", [np.inf, 0.0]), ("Elu", [np.inf, -1.0])])
def test_infinite_input_gives_the_limit(backend, name, expected):
    _, y = ACTIVATIONS[name][0]().forward(dualtape.asarray([np.inf, -np.inf]))
    np.testing.assert_array_equal(np64(y), expected)


@pytest.mark.parametrize("source, target", [
    (lambda: dualtape.Tanh(), lambda: dualtape.Logit()),
    (lambda: dualtape.Relu(), lambda: dualtape.FullyConnected(3, 3, seed=0)),
    (lambda: dualtape.FullyConnected(2, 3, seed=0), lambda: dualtape.FullyConnected(3, 3, seed=0)),
], ids=["tanh-to-logit", "relu-to-fc", "fc-of-other-width"])
def test_a_layer_refuses_the_tape_of_another_layer(backend, source, target):
    layer = source()
    tape, y = layer.forward(dualtape.asarray(np.ones((2, layer.n_in or 3), dtype=np.float32)))
    with pytest.raises(ValueError, match="the tape is a .*Tape, not one of this layer"):
        target().backward(tape, dualtape.asarray(np.ones((2, 3), dtype=np.float32)))


def test_an_lstm_refuses_the_tape_of_a_feed_forward_layer(backend):
    tape, _ = dualtape.FullyConnected(3, 3, seed=0).forward(
        dualtape.asarray(np.ones((2, 3), dtype=np.float32)))
    lstm = dualtape.LSTM(3, 3, seed=0)
    dys = dualtape.asarray(np.ones((1, 2, 3), dtype=np.float32))
    with pytest.raises(ValueError, match="the tape is a FullyConnectedTape"):
        lstm.backward_sequence(tape, None, dys)
    with pytest.raises(ValueError, match="the tape is a FullyConnectedTape"):
        lstm.backward(tape, None, dys[0, ...])


NUMPY_SIZED = {
    "FullyConnected": lambda n: dualtape.FullyConnected(n(3), n(2)),
    "LSTM": lambda n: dualtape.LSTM(n(3), n(2)),
    "StandardLSTM": lambda n: dualtape.StandardLSTM(n(3), n(2)),
    "GRU": lambda n: dualtape.GRU(n(3), n(2)),
    "BasicRecurrent": lambda n: dualtape.BasicRecurrent(n(3), n(2)),
    "Convolution": lambda n: dualtape.Convolution(n(3), n(2), (n(2), n(1)), n(2)),
    "Deconvolution": lambda n: dualtape.Deconvolution(n(3), n(2), n(2), (n(1), n(2))),
    "Pooling": lambda n: dualtape.Pooling(n(2), (n(1), n(2))),
    "Pad": lambda n: dualtape.Pad(n(0), n(1), n(2), n(3)),
    "Crop": lambda n: dualtape.Crop(n(0), n(1), n(2), n(3)),
    "Reshape": lambda n: dualtape.Reshape((n(2), n(3)), (n(6),)),
}


@pytest.mark.parametrize("kind", list(NUMPY_SIZED))
@pytest.mark.parametrize("integer", [np.int64, np.int32, np.uint8])
def test_numpy_integers_are_sizes_stored_as_plain_ints(kind, integer):
    layer = NUMPY_SIZED[kind](integer)
    plain = NUMPY_SIZED[kind](int)
    assert layer.config() == plain.config()
    values = [v for value in layer.config().values()
              for v in (value if isinstance(value, tuple | list) else [value])]
    assert all(type(v) is int for v in values), layer.config()
    assert repr(layer) == repr(plain)


@pytest.mark.parametrize("kind", list(NUMPY_SIZED))
@pytest.mark.parametrize("bad", [np.bool_(True), np.float64(2.0), 2.0])
def test_numpy_bools_and_floats_are_still_refused_as_sizes(kind, bad):
    with pytest.raises(ValueError, match=f"{kind}: .* must be a"):
        NUMPY_SIZED[kind](lambda n: bad)
