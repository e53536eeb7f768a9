"""The LSTM fast paths (numpy in-place loop, CuPy fused kernels) against the generic code."""

from __future__ import annotations

import contextlib
import types
import warnings

import numpy as np
import pytest

import dualtape
from dualtape.backend import namespace_of
from dualtape.kernels import (
    SequencePath,
    cpu_path,
    cupy_lstm,
    numpy_lstm,
    selfcheck,
    sequence_path,
)
from dualtape.kernels import lstm_sequence as loops
from dualtape.kernels.cupy_lstm import CupyLSTM
from dualtape.kernels.numba_lstm import NumbaLSTM
from dualtape.kernels.numpy_lstm import NumpyLSTM
from dualtape.layers.lstm import fused_disagreement

from .conftest import CountingNamespace, np64


def run_sequence(layer, c0, xs, dc_last, dys):
    tape, c_last, ys = layer.forward_sequence(c0, xs)
    grads, dc0, dxs = layer.backward_sequence(tape, dc_last, dys)
    return [c_last, ys, tape.cells, tape.gates, dc0, dxs, *grads.values()]


def no_check(path, like):
    return None


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("batch, n_out", [(1, 6), (3, 6), (64, 512)])
def test_fast_path_matches_generic_code(backend, monkeypatch, dtype, batch, n_out):
    rng = np.random.default_rng(7)
    layer = dualtape.LSTM(5, n_out, seed=3, dtype=dtype)
    xs, c0, dys, dc_last = (dualtape.asarray(rng.normal(size=s), dtype=dtype)
                            for s in ((4, batch, 5), (batch, n_out), (4, batch, n_out),
                                      (batch, n_out)))
    if sequence_path(namespace_of(xs), xs, no_check) is None:
        pytest.skip(f"{backend.name} has no fast path")
    monkeypatch.setenv("DUALTAPE_FUSED", "0")
    assert sequence_path(namespace_of(xs), xs, no_check) is None
    generic = run_sequence(layer, c0, xs, dc_last, dys)
    monkeypatch.setenv("DUALTAPE_FUSED", "1")
    fast = run_sequence(layer, c0, xs, dc_last, dys)
    tolerance = 1e-4 if dtype == "float32" else 1e-12
    for a, b in zip(generic, fast, strict=True):
        np.testing.assert_allclose(np64(a), np64(b), rtol=tolerance, atol=tolerance)


def test_fast_paths_are_on_by_default(backend, monkeypatch):
    monkeypatch.delenv("DUALTAPE_FUSED", raising=False)
    like = backend.xp.ones((2, 3), dtype=backend.xp.float64)
    path = sequence_path(backend.xp, like, fused_disagreement)
    if backend.name == "numpy":
        compiled = cpu_path()[0] == "compiled"
        assert isinstance(path.cell, NumbaLSTM if compiled else NumpyLSTM)
    elif backend.name == "cupy":
        assert isinstance(path.cell, CupyLSTM), "the fused kernels are CuPy's default"
    else:
        assert path is None, f"{backend.name} has no fast path"


@pytest.mark.gpu
def test_cupy_kernels_pass_their_self_check(backend):
    if backend.name != "cupy":
        pytest.skip("the fused kernels are CuPy's")
    for dtype in ("float32", "float64"):
        like = backend.xp.ones((2, 3), dtype=dtype)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert fused_disagreement(SequencePath(backend.xp, CupyLSTM()), like) is None


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_ufunc_loop_keeps_its_expected_overflow_to_itself(dtype):
    """σ(x) = 1/(1 + exp(-x)) overflows to inf for a saturated gate, giving σ = 0: the loop
    silences that overflow, and only that, even for a caller whose overflow raises."""
    rng = np.random.default_rng(0)
    U, c0 = rng.normal(size=(9, 3)).astype(dtype), rng.normal(size=(2, 3)).astype(dtype)
    projected = rng.normal(size=(4, 2, 12)).astype(dtype)
    projected[..., :6] = -1000  # f and i saturated: exp(1000) overflows in either dtype
    with np.errstate(over="raise", under="ignore"):
        cells, gates, _ = loops.forward_sequence(np, NumpyLSTM(), U, c0, projected)
        assert np.geterr()["over"] == "raise"
    assert not gates[..., :6].any() and not cells[1:].any()


def test_sequence_loop_back_evaluates_no_transcendental(monkeypatch):
    counting = CountingNamespace(np)
    monkeypatch.setattr(numpy_lstm, "np", counting)
    rng = np.random.default_rng(0)
    U, c0, projected = rng.normal(size=(9, 3)), rng.normal(size=(2, 3)), rng.normal(size=(4, 2, 12))
    cells, gates, _ = loops.forward_sequence(np, NumpyLSTM(), U, c0, projected)
    counting.calls = dict.fromkeys(counting.calls, 0)
    loops.backward_sequence(counting, NumpyLSTM(), U, cells, gates, rng.normal(size=(4, 2, 3)),
                            rng.normal(size=(2, 3)))
    assert counting.total == 0, counting.calls


class OffByOneGate(NumpyLSTM):
    """A planted bug: the forward step reads the input gate's projection from the f block."""

    def forward_steps(self, U_fi, projected, r, cells, gates):
        n = cells.shape[-1]
        shifted = projected.copy()
        shifted[..., n : 2 * n] = projected[..., :n]
        return super().forward_steps(U_fi, shifted, r, cells, gates)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_self_check_agrees_with_a_good_cell_and_catches_a_wrong_one(dtype):
    like = np.ones((2, 3), dtype=dtype)
    assert fused_disagreement(SequencePath(np, NumpyLSTM()), like) is None
    problem = fused_disagreement(SequencePath(np, OffByOneGate()), like)
    assert problem is not None and "differ by" in problem


class Nudged(NumpyLSTM):
    """A planted bug of float rounding's size in float32: the f and i projections moved by
    1e-6, so the gates move by about 2e-7."""

    def forward_steps(self, U_fi, projected, r, cells, gates):
        return super().forward_steps(U_fi, projected + 1e-6, r, cells, gates)


class NaNCell(NumpyLSTM):
    """A planted bug that produces NaN: the last cell is never written."""

    def forward_steps(self, U_fi, projected, r, cells, gates):
        step = super().forward_steps(U_fi, projected, r, cells, gates)

        def broken(t):
            step(t)
            cells[-1] = np.nan

        return broken


class WrongWayBack(NumpyLSTM):
    """A planted bug in the loop back only: the carried cell gradient loses 1%."""

    def backward_steps(self, U_fi, gates, rec, q, carry, dfi, dc):
        step = super().backward_steps(U_fi, gates, rec, q, carry, dfi, dc)

        def broken(t):
            step(t)
            np.multiply(carry, 0.99, out=carry)

        return broken


@pytest.mark.parametrize("cell, dtype, found", [
    (NaNCell, "float64", "cells differ by nan"), (NaNCell, "float32", "cells differ by nan"),
    (Nudged, "float64", "cells differ by"), (Nudged, "float32", None),
    (WrongWayBack, "float64", "das differ by"), (WrongWayBack, "float32", "das differ by"),
], ids=["nan-64", "nan-32", "nudged-64", "nudged-32", "backward-64", "backward-32"])
def test_self_check_finds_nan_a_rounding_sized_error_in_float64_and_a_wrong_loop_back(
    cell, dtype, found
):
    problem = fused_disagreement(SequencePath(np, cell()), np.ones((2, 3), dtype=dtype))
    if found is None:
        assert problem is None, "float32 rounding is within the float32 tolerance"
    else:
        assert problem is not None and found in problem, problem


def fake_cupy_path(device_id: int, dtype: str = "float32"
                   ) -> tuple[SequencePath, types.SimpleNamespace]:
    """A path whose module answers ``cuda.Device(k)`` like CuPy, and an array of ``dtype`` on
    ``device_id``."""
    cuda = types.SimpleNamespace(Device=lambda k: contextlib.nullcontext())
    like = types.SimpleNamespace(device=types.SimpleNamespace(id=device_id),
                                 dtype=np.dtype(dtype))
    return SequencePath(types.SimpleNamespace(cuda=cuda), NumpyLSTM()), like


def test_a_failed_self_check_warns_once_per_device_and_dtype(monkeypatch):
    monkeypatch.setattr(selfcheck, "_VERDICTS", {})
    calls = []

    def failing(path, like):
        calls.append(like.device.id)
        return "gates differ by 0.5"

    path, like = fake_cupy_path(3)
    with pytest.warns(RuntimeWarning, match="CUDA device 3 .float32.: gates differ by 0.5"):
        assert not cupy_lstm.verified(path, like, failing)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not cupy_lstm.verified(path, like, failing)
    assert calls == [3], "the self-check runs once per device and dtype"
    assert cupy_lstm.verified(*fake_cupy_path(4), no_check)


@pytest.mark.parametrize("failing", ["float32", "float64"])
def test_each_dtype_on_a_device_gets_its_own_self_check(monkeypatch, failing):
    """The double kernels are other code than the float ones: a verdict on one dtype is not
    kept for the other on the same device."""
    monkeypatch.setattr(selfcheck, "_VERDICTS", {})
    checked = []

    def one_dtype_fails(path, like):
        checked.append(like.dtype.name)
        return "h differ by 0.5" if like.dtype == failing else None

    passing = "float64" if failing == "float32" else "float32"
    with pytest.warns(RuntimeWarning, match=rf"CUDA device 0 .{failing}.: h differ by 0.5"):
        assert not cupy_lstm.verified(*fake_cupy_path(0, failing), one_dtype_fails)
    assert cupy_lstm.verified(*fake_cupy_path(0, passing), one_dtype_fails)
    assert checked == [failing, passing]


def test_a_self_check_that_raises_counts_as_a_failed_one(monkeypatch):
    monkeypatch.setattr(selfcheck, "_VERDICTS", {})

    def raising(path, like):
        raise RuntimeError("no kernel image for this device")

    with pytest.warns(RuntimeWarning, match="raised RuntimeError: no kernel image"):
        assert not cupy_lstm.verified(*fake_cupy_path(0), raising)


@pytest.mark.parametrize("steps", [1, 3])
def test_without_the_first_cells_gradient_the_loop_back_skips_its_products(monkeypatch, steps):
    """Training never reads dc_0: at T = 1 the loop back then makes no product with U at all,
    and the gradients it does give are those of the full loop."""
    rng = np.random.default_rng(5)
    U, c0 = rng.normal(size=(9, 3)), rng.normal(size=(2, 3))
    projected, dhs = rng.normal(size=(steps, 2, 12)), rng.normal(size=(steps, 2, 3))
    cells, gates, _ = loops.forward_sequence(np, NumpyLSTM(), U, c0, projected)
    dc_last = rng.normal(size=(2, 3))
    full, dc0 = loops.backward_sequence(np, NumpyLSTM(), U, cells, gates, dhs, dc_last)
    counting = CountingNamespace(np, ("dot", "matmul"))
    monkeypatch.setattr(numpy_lstm, "np", counting)
    blocks, none = loops.backward_sequence(counting, NumpyLSTM(), U, cells, gates, dhs, dc_last,
                                           need_dc0=False)
    assert none is None and dc0 is not None
    # one product with U_o for steps 1 … T-1 together, one with U_fi per step but the first
    assert counting.calls == {"matmul": int(steps > 1), "dot": steps - 1}
    for a, b in zip(full, blocks, strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("bad", ["fortran", "strided", "other-dtype"])
def test_the_raw_kernels_refuse_operands_their_indexing_would_misread(monkeypatch, bad):
    """The CUDA kernels index flat C-order buffers of one dtype: anything else is refused
    before a launch (lstm_sequence.py only hands them its own C-order buffers)."""
    monkeypatch.setattr(cupy_lstm, "_function", lambda kernel, dtype, device: (kernel, dtype))
    monkeypatch.setattr(cupy_lstm, "_device_id", lambda a: 0)
    good = np.zeros((3, 4))
    assert cupy_lstm._checked("lstm_forward", good, good) == ("lstm_forward", "float64")
    other = {"fortran": np.asfortranarray(good), "strided": np.zeros((3, 8))[:, ::2],
             "other-dtype": good.astype(np.float32)}[bad]
    with pytest.raises(ValueError, match="lstm_backward: operands must be C-contiguous float64"):
        cupy_lstm._checked("lstm_backward", good, other)
