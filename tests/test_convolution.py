"""Convolution: gradients against finite differences at odd sizes, the windows' fast paths
against the generic unfold, the tape, Grenade's initialisation."""

from __future__ import annotations

import numpy as np
import pytest

import dualtape
from dualtape.backend import backend_of, namespace_of
from dualtape.kernels.windows import strided_windows, window_view
from dualtape.layers.spatial import generic_windows, windows

from .conftest import np64

ODD_SIZES = {
    # id: (batch, channels_in, channels_out, (H, W), kernel, stride)
    "basic": (2, 2, 3, (5, 6), (3, 3), (1, 1)),
    "kernel1": (2, 3, 2, (3, 4), (1, 1), (1, 1)),
    "stride2-remainder": (2, 2, 2, (7, 6), (3, 2), (2, 3)),
    "one-channel-batch1": (1, 1, 1, (4, 5), (2, 3), (1, 2)),
    "kernel-is-image": (3, 2, 2, (3, 2), (3, 2), (1, 1)),
    "non-square-stride": (1, 2, 2, (8, 5), (2, 2), (3, 1)),
}


@pytest.mark.parametrize("case", list(ODD_SIZES.values()), ids=list(ODD_SIZES))
def test_gradients_match_finite_differences(backend, case):
    batch, c_in, c_out, (h, w), kernel, stride = case
    layer = dualtape.Convolution(c_in, c_out, kernel, stride, seed=3, dtype="float64")
    layer.params["b"] = dualtape.asarray(np.linspace(-0.5, 0.5, c_out))
    x = np.random.default_rng(1).normal(size=(batch, c_in, h, w))
    dualtape.check_gradients(layer, x)


@pytest.mark.parametrize("case", list(ODD_SIZES.values()), ids=list(ODD_SIZES))
def test_deconvolution_gradients_match_finite_differences(backend, case):
    batch, c_in, c_out, (h, w), kernel, stride = case
    layer = dualtape.Deconvolution(c_in, c_out, kernel, stride, seed=4, dtype="float64")
    layer.params["b"] = dualtape.asarray(np.linspace(-0.5, 0.5, c_out))
    x = np.random.default_rng(2).normal(size=(batch, c_in, h - kernel[0] + 1, w))
    dualtape.check_gradients(layer, x)


def test_deconvolution_is_the_convolutions_adjoint(backend):
    """Deconvolution's forward pass (bias 0) is the input gradient of a Convolution with the
    same weights (torch's layouts make them the same array), and its input gradient that
    convolution."""
    conv = dualtape.Convolution(2, 3, (3, 2), (2, 3), seed=6, dtype="float64")
    deconv = dualtape.Deconvolution(3, 2, (3, 2), (2, 3), dtype="float64")
    deconv.params["W"] = conv.params["W"]
    x = np.random.default_rng(5).normal(size=(2, 2, 9, 8))
    tape, y = conv.forward(dualtape.asarray(x))
    dy = np.random.default_rng(6).normal(size=tuple(y.shape))
    _, dx = conv.backward(tape, dualtape.asarray(dy))
    dtape, spread = deconv.forward(dualtape.asarray(dy))
    np.testing.assert_allclose(np64(spread), np64(dx), rtol=1e-12, atol=1e-12)
    assert deconv.output_shape(tuple(y.shape[1:])) == (2, 9, 8)
    _, back = deconv.backward(dtape, dualtape.asarray(x))
    np.testing.assert_allclose(np64(back), np64(y), rtol=1e-12, atol=1e-12)


def test_output_size_drops_what_no_window_reaches(backend):
    layer = dualtape.Convolution(1, 1, (3, 2), (2, 3), seed=0, dtype="float64")
    _, y = layer.forward(dualtape.asarray(np.ones((2, 1, 8, 10))))
    assert tuple(y.shape) == (2, 1, 3, 3)
    assert layer.output_shape((1, 8, 10)) == (1, 3, 3)
    assert layer.output_shape((1, "height", "width")) == (1, "height", "width")


WINDOW_CASES = [((2, 3, 7, 6), (3, 2), (2, 3)), ((1, 1, 4, 4), (1, 1), (1, 1)),
                ((2, 2, 5, 9), (5, 3), (1, 2)), ((1, 2, 3, 3), (3, 3), (4, 4))]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape, kernel, stride", WINDOW_CASES)
def test_numpy_fast_windows_equal_the_generic_ones(shape, kernel, stride, dtype):
    x = np.random.default_rng(0).normal(size=shape).astype(dtype)
    fast = window_view(x, kernel, stride)
    assert fast is not None and not fast.flags.writeable and np.shares_memory(fast, x)
    generic = generic_windows(np, x, kernel, stride)
    assert fast.dtype == generic.dtype
    np.testing.assert_array_equal(fast, generic)
    np.testing.assert_array_equal(strided_windows(np, x, kernel, stride), generic)


def test_strided_windows_follow_any_memory_layout():
    """CuPy's view is made from byte strides, so a transposed input (a convolution's output)
    gives the same windows."""
    base = np.random.default_rng(2).normal(size=(2, 6, 7, 3))
    x = np.transpose(base, (0, 3, 1, 2))
    np.testing.assert_array_equal(strided_windows(np, x, (2, 3), (2, 1)),
                                  generic_windows(np, x, (2, 3), (2, 1)))


def test_fused_off_keeps_the_generic_windows(backend, monkeypatch):
    monkeypatch.setenv("DUALTAPE_FUSED", "0")
    x = dualtape.asarray(np.ones((1, 1, 3, 3)))
    assert window_view(x, (2, 2), (1, 1)) is None
    assert tuple(windows(namespace_of(x), x, (2, 2), (1, 1)).shape) == (1, 1, 2, 2, 2, 2)


@pytest.mark.parametrize("fused", ["0", "1"])
def test_layer_gives_the_same_numbers_with_either_windows(backend, monkeypatch, fused):
    monkeypatch.setenv("DUALTAPE_FUSED", fused)
    layer = dualtape.Convolution(2, 3, (3, 2), (2, 1), seed=5, dtype="float64")
    x = np.random.default_rng(4).normal(size=(2, 2, 7, 5))
    tape, y = layer.forward(dualtape.asarray(x))
    grads, dx = layer.backward(tape, dualtape.asarray(np.ones(tuple(y.shape))))
    monkeypatch.setenv("DUALTAPE_FUSED", "0")
    tape0, y0 = layer.forward(dualtape.asarray(x))
    grads0, dx0 = layer.backward(tape0, dualtape.asarray(np.ones(tuple(y.shape))))
    np.testing.assert_allclose(np64(y), np64(y0), rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(np64(dx), np64(dx0), rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(np64(grads["W"]), np64(grads0["W"]), rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape, kernel, stride", WINDOW_CASES)
def test_each_backends_fast_windows_equal_the_generic_ones(backend, shape, kernel, stride,
                                                           dtype):
    """numpy's, CuPy's and torch's views (None on array-api-strict: the generic code)."""
    x = dualtape.asarray(np.random.default_rng(0).normal(size=shape), dtype=dtype)
    fast = window_view(x, kernel, stride)
    assert (fast is not None) == (backend.name in ("numpy", "cupy", "torch"))
    if fast is not None:
        assert fast.dtype == x.dtype and backend_of(fast) == backend
        np.testing.assert_array_equal(np64(fast), np64(generic_windows(backend.xp, x, kernel,
                                                                       stride)))


def test_tape_keeps_the_input_not_its_windows(backend):
    layer = dualtape.Convolution(2, 4, (3, 3), seed=1, dtype="float64")
    x = np.random.default_rng(3).normal(size=(2, 2, 6, 6))
    tape, _ = layer.forward(dualtape.asarray(x))
    assert type(tape).__name__ == "ConvolutionTape" and type(tape)._fields == ("x", "version")
    np.testing.assert_array_equal(np64(tape.x), x)
    assert backend_of(tape.x) == backend


def test_grenade_initialisation_is_the_same_on_every_backend(backend):
    layer = dualtape.Convolution(3, 5, (2, 4), seed=7, dtype="float64")
    W, b = np64(layer.params["W"]), np64(layer.params["b"])
    assert W.shape == (5, 3, 2, 4) and b.shape == (5,)
    assert np.abs(W).max() <= 1.0 and np.abs(W).max() > 0.9  # uniform in [-1, 1]
    np.testing.assert_array_equal(b, np.zeros(5))
    expected = np.random.default_rng(7).uniform(-1.0, 1.0, size=(5, 3, 2, 4))
    np.testing.assert_array_equal(W, expected)
    assert dualtape.to_numpy(layer.params["W"]).dtype == np.float64


def test_float32_stays_float32(backend):
    layer = dualtape.Convolution(1, 2, 2, seed=0)
    tape, y = layer.forward(dualtape.asarray(np.ones((1, 1, 3, 3)), dtype="float64"))
    grads, dx = layer.backward(tape, dualtape.asarray(np.ones((1, 2, 2, 2))))
    for a in (y, dx, grads["W"], grads["b"]):
        assert dualtape.to_numpy(a).dtype == np.float32
