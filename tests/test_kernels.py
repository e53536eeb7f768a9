"""The LSTM fast paths (numpy in-place loop, CuPy fused kernels) against the generic code."""

from __future__ import annotations

import numpy as np
import pytest

import dualtape
from dualtape.backend import namespace_of
from dualtape.kernels import numpy_cell, sequence_path
from dualtape.kernels.cupy_cell import CupyCell
from dualtape.kernels.numpy_cell import NumpyCell

from .conftest import CountingNamespace, np64


def run_sequence(layer, c0, xs, dc_last, dys):
    tape, c_last, ys = layer.forward_sequence(c0, xs)
    grads, dc0, dxs = layer.backward_sequence(tape, dc_last, dys)
    return [c_last, ys, tape.cells, tape.gates, dc0, dxs, *grads.values()]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("batch", [1, 3])
def test_fast_path_matches_generic_code(backend, monkeypatch, dtype, batch):
    rng = np.random.default_rng(7)
    layer = dualtape.LSTM(5, 6, seed=3, dtype=dtype)
    xs, c0, dys = (dualtape.asarray(rng.normal(size=s), dtype=dtype)
                   for s in ((4, batch, 5), (batch, 6), (4, batch, 6)))
    dc_last = dualtape.asarray(rng.normal(size=(batch, 6)), dtype=dtype)
    monkeypatch.setenv("DUALTAPE_FUSED", "1")
    if sequence_path(namespace_of(xs)) is None:
        pytest.skip(f"{backend.name} has no fast path")
    monkeypatch.setenv("DUALTAPE_FUSED", "0")
    assert sequence_path(namespace_of(xs)) is None
    generic = run_sequence(layer, c0, xs, dc_last, dys)
    monkeypatch.setenv("DUALTAPE_FUSED", "1")
    fast = run_sequence(layer, c0, xs, dc_last, dys)
    tolerance = 1e-5 if dtype == "float32" else 1e-12
    for a, b in zip(generic, fast, strict=True):
        np.testing.assert_allclose(np64(a), np64(b), rtol=tolerance, atol=tolerance)


def test_numpy_takes_the_in_place_path_by_default(backend, monkeypatch):
    monkeypatch.delenv("DUALTAPE_FUSED", raising=False)
    xp = backend.xp
    path = sequence_path(xp)
    if backend.name == "numpy":
        assert isinstance(path.cell, NumpyCell)
    else:
        assert path is None, "only verified fast paths are on by default"


@pytest.mark.gpu
def test_cupy_takes_the_fused_kernels_when_enabled(backend, monkeypatch):
    if backend.name != "cupy":
        pytest.skip("the fused kernels are CuPy's")
    monkeypatch.setenv("DUALTAPE_FUSED", "1")
    assert isinstance(sequence_path(backend.xp).cell, CupyCell)


def test_numpy_cell_backward_evaluates_no_transcendental(monkeypatch):
    counting = CountingNamespace(np)
    monkeypatch.setattr(numpy_cell, "np", counting)
    rng = np.random.default_rng(0)
    gates = rng.uniform(0.1, 0.9, size=(2, 12))
    c, c_next, dh, dc_rec, dc_direct = (rng.normal(size=(2, 3)) for _ in range(5))
    NumpyCell().backward(gates, c, c_next, dh, dc_rec, dc_direct, np.empty((2, 12)),
                         np.empty((2, 3)))
    assert counting.total == 0, counting.calls
