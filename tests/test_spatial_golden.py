"""Convolution, Deconvolution, Pooling and Pad against torch.nn.functional: the committed
numbers on every backend, and torch itself where it is installed."""

from __future__ import annotations

import numpy as np
import pytest

import dualtape
from dualtape.backend import backend_of

from .conftest import np64
from .fixtures.make_spatial_golden import CONV_CASES, POOL_CASES, golden, run_torch
from .spatial_cases import ALL_CASES, TOLERANCE, dualtape_network, golden_case


@pytest.mark.parametrize("name", ALL_CASES)
def test_matches_torch_functional(backend, name):
    inputs, expected = golden_case(name)
    net = dualtape_network(name, inputs)
    tapes, y = net.forward(dualtape.asarray(inputs["x"]))
    assert backend_of(y) == backend
    grads, dx = net.backward(tapes, dualtape.asarray(inputs["dy"]))
    tol = TOLERANCE[str(inputs["x"].dtype)]
    scale = max(1.0, float(np.abs(expected["y"]).max()))
    np.testing.assert_allclose(np64(y), expected["y"], rtol=tol, atol=tol * scale)
    np.testing.assert_allclose(np64(dx), expected["dx"], rtol=tol, atol=tol * scale)
    if name.startswith(("conv", "deconv")):
        for key in ("W", "b"):
            want = expected[f"d{key}"]
            np.testing.assert_allclose(np64(grads[-1][key]), want, rtol=tol,
                                       atol=tol * max(1.0, float(np.abs(want).max())))


def test_tie_cases_do_tie():
    """The tie cases hold windows whose maximum occurs more than once (else they test
    nothing about the tie rule)."""
    inputs, _ = golden_case("pool-ties-float64")
    x = inputs["x"]
    windows = x.reshape(2, 2, 3, 2, 4, 2).transpose(0, 1, 2, 4, 3, 5).reshape(2, 2, 3, 4, 4)
    repeated = (windows == windows.max(-1, keepdims=True)).sum(-1) > 1
    assert repeated.mean() > 0.2


def test_the_committed_numbers_are_torch_s_today():
    """Where torch is installed, the fixture script gives the committed numbers again."""
    pytest.importorskip("torch")
    with np.load(golden_case.__globals__["GOLDEN"]) as data:
        committed = {k: data[k] for k in data.files if k != "torch_version"}
    fresh = golden()
    assert set(fresh) == set(committed)
    for key, value in fresh.items():
        np.testing.assert_allclose(value, committed[key], rtol=1e-5, atol=1e-6, err_msg=key)


@pytest.mark.parametrize("stride", [(1, 1), (2, 3)])
def test_convolution_matches_live_torch_on_a_fresh_case(backend, stride):
    pytest.importorskip("torch")
    case = (3, 2, 5, (11, 10), (4, 3), stride, 0)
    rng = np.random.default_rng(42)
    inputs = {"x": rng.normal(size=(3, 2, 11, 10)), "W": rng.normal(size=(5, 2, 4, 3)),
              "b": rng.normal(size=5)}
    rows, cols = (11 - 4) // stride[0] + 1, (10 - 3) // stride[1] + 1
    inputs["dy"] = rng.normal(size=(3, 5, rows, cols))
    expected = run_torch("conv", case, inputs)
    layer = dualtape.Convolution(2, 5, (4, 3), stride, dtype="float64")
    layer.params.update({"W": dualtape.asarray(inputs["W"]), "b": dualtape.asarray(inputs["b"])})
    tape, y = layer.forward(dualtape.asarray(inputs["x"]))
    grads, dx = layer.backward(tape, dualtape.asarray(inputs["dy"]))
    np.testing.assert_allclose(np64(y), expected["y"], rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(np64(dx), expected["dx"], rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(np64(grads["W"]), expected["dW"], rtol=1e-10, atol=1e-10)


def test_pooling_matches_live_torch_on_ties(backend):
    pytest.importorskip("torch")
    case = (2, 3, (9, 8), (3, 2), (2, 2), True)
    rng = np.random.default_rng(7)
    inputs = {"x": np.round(rng.normal(size=(2, 3, 9, 8))), "dy": rng.normal(size=(2, 3, 4, 4))}
    expected = run_torch("pool", case, inputs)
    layer = dualtape.Pooling((3, 2), (2, 2))
    tape, y = layer.forward(dualtape.asarray(inputs["x"]))
    _, dx = layer.backward(tape, dualtape.asarray(inputs["dy"]))
    np.testing.assert_array_equal(np64(y), expected["y"])
    np.testing.assert_allclose(np64(dx), expected["dx"], rtol=1e-12, atol=1e-12)


def test_cases_cover_the_odd_sizes():
    """Kernel 1, stride above 1, padding, one channel, batch 1, non-square kernels and
    images: each appears among the committed cases."""
    conv = list(CONV_CASES.values())
    assert any(c[4] == (1, 1) for c in conv) and any(max(c[5]) > 1 for c in conv)
    assert any(c[6] for c in conv) and any(c[1] == 1 for c in conv)
    assert any(c[0] == 1 for c in conv) and any(c[4][0] != c[4][1] for c in conv)
    assert any(c[3][0] != c[3][1] for c in conv)
    assert any(c[-1] for c in POOL_CASES.values())
