"""StandardLSTM's and GRU's compiled CPU loops (numba) against their generic loops: every
shape of the grid, the self-check that guards them, the refusals and their machine code."""

from __future__ import annotations

import numpy as np
import pytest

import dualtape
from dualtape.kernels import cell_loops, numba_lstm, numba_standard_lstm_gru, selfcheck
from dualtape.layers import gru
from dualtape.layers.standard_lstm import (
    fast_disagreement,
    generic_backward_sequence,
    generic_forward_sequence,
)

from .helpers import libm_calls

WHY_NOT = numba_lstm.unavailable()
pytestmark = pytest.mark.skipif(WHY_NOT is not None, reason=f"no compiled loops: {WHY_NOT}")
TOLERANCE = {"float32": {"rtol": 2e-5, "atol": 2e-6}, "float64": {"rtol": 1e-12, "atol": 1e-13}}


def problem(batch: int, n: int, steps: int, dtype: str, gates: int = 4
            ) -> dict[str, np.ndarray]:
    """Random inputs of a cell's loops (``gates`` 4: the LSTM's, 3: the GRU's), the weights
    scaled by 1/√n as torch draws them and the projections spread over ±2."""
    rng = np.random.default_rng(batch * 100 + n + steps + gates)
    shapes = {"W_hh": (gates * n, n), "b_hh": (gates * n,),
              "projected": (steps, batch, gates * n), "h": (batch, n), "c": (batch, n),
              "dhs": (steps, batch, n), "dh": (batch, n), "dc": (batch, n)}
    scale = {"W_hh": 1 / np.sqrt(n), "projected": 2.0}
    return {k: (rng.uniform(-1, 1, s) * scale.get(k, 1.0)).astype(dtype)
            for k, s in shapes.items()}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("steps", [1, 3, 50])
@pytest.mark.parametrize("n", [1, 5, 80])
@pytest.mark.parametrize("batch", [1, 3, 64])
def test_the_compiled_loops_equal_the_generic_loops(batch, n, steps, dtype):
    a = problem(batch, n, steps, dtype)
    generic = generic_forward_sequence(np, a["W_hh"], a["projected"], a["h"], a["c"])
    fast = numba_standard_lstm_gru.standard_lstm_forward(a["W_hh"], a["projected"].copy(),
                                                         a["h"], a["c"])
    for name, x, y in zip(("hs", "cells", "gates", "tanh_cells"), fast, generic, strict=True):
        assert x.dtype == np.dtype(dtype)
        np.testing.assert_allclose(x, y, **TOLERANCE[dtype], err_msg=name)
    for need_first in (True, False):
        back = (generic[2], generic[1], generic[3], a["dhs"], a["dh"], a["dc"], need_first)
        g_das, g_dh, g_dc = generic_backward_sequence(np, a["W_hh"], *back)
        f_das, f_dh, f_dc = numba_standard_lstm_gru.standard_lstm_backward(a["W_hh"], *back)
        np.testing.assert_allclose(f_das, g_das, **TOLERANCE[dtype])
        np.testing.assert_allclose(f_dc, g_dc, **TOLERANCE[dtype])
        if need_first:
            np.testing.assert_allclose(f_dh, g_dh, **TOLERANCE[dtype])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("steps", [1, 3, 50])
@pytest.mark.parametrize("n", [1, 5, 80])
@pytest.mark.parametrize("batch", [1, 3, 64])
def test_the_compiled_gru_loops_equal_the_generic_loops(batch, n, steps, dtype):
    a = problem(batch, n, steps, dtype, gates=3)
    generic = gru.generic_forward_sequence(np, a["W_hh"], a["b_hh"], a["projected"], a["h"])
    fast = numba_standard_lstm_gru.gru_forward(a["W_hh"], a["b_hh"], a["projected"].copy(), a["h"])
    for name, x, y in zip(("hs", "gates", "hn"), fast, generic, strict=True):
        assert x.dtype == np.dtype(dtype)
        np.testing.assert_allclose(x, y, **TOLERANCE[dtype], err_msg=name)
    for need_first in (True, False):
        back = (generic[1], generic[2], generic[0], a["dhs"], a["dh"], need_first)
        expected = gru.generic_backward_sequence(np, a["W_hh"], *back)
        got = numba_standard_lstm_gru.gru_backward(a["W_hh"], *back)
        for name, x, y in zip(("da_h", "dn", "dh_0"), got, expected, strict=True):
            if need_first or name != "dh_0":
                np.testing.assert_allclose(x, y, **TOLERANCE[dtype], err_msg=name)


def test_the_layer_takes_the_compiled_loops_and_the_same_numbers_as_the_generic_code(
        monkeypatch):
    monkeypatch.delenv("DUALTAPE_JIT", raising=False)
    layer = dualtape.StandardLSTM(3, 4, seed=1, dtype="float64")
    xs = np.random.default_rng(2).normal(size=(6, 2, 3))
    assert cell_loops("StandardLSTM", xs,
                      lambda loops: None) is numba_standard_lstm_gru.STANDARD_LSTM
    assert cell_loops("GRU", xs, lambda loops: None) is numba_standard_lstm_gru.GRU
    fast = layer.forward_sequence(None, xs)
    fast_back = layer.backward_sequence(fast[0], np.ones((2, 8)), np.ones((6, 2, 4)))
    monkeypatch.setenv("DUALTAPE_JIT", "0")
    assert cell_loops("StandardLSTM", xs, lambda loops: None) is None
    slow = layer.forward_sequence(None, xs)
    slow_back = layer.backward_sequence(slow[0], np.ones((2, 8)), np.ones((6, 2, 4)))
    np.testing.assert_allclose(fast[2], slow[2], rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(fast[1], slow[1], rtol=1e-12, atol=1e-14)
    for name in layer.params:
        np.testing.assert_allclose(fast_back[0][name], slow_back[0][name], rtol=1e-12,
                                   atol=1e-13)
    np.testing.assert_allclose(fast_back[1], slow_back[1], rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(fast_back[2], slow_back[2], rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_self_check_passes_and_runs_once_per_dtype(monkeypatch, dtype):
    monkeypatch.setattr(selfcheck, "_VERDICTS", {})
    monkeypatch.delenv("DUALTAPE_JIT", raising=False)
    assert fast_disagreement(numba_standard_lstm_gru.STANDARD_LSTM, np.ones(1, dtype)) is None
    assert gru.fast_disagreement(numba_standard_lstm_gru.GRU, np.ones(1, dtype)) is None
    calls = []
    for _ in range(3):
        cell_loops("StandardLSTM", np.ones(1, dtype), calls.append)
    assert calls == [numba_standard_lstm_gru.STANDARD_LSTM]


def test_loops_that_disagree_are_not_used_and_the_layer_falls_back(monkeypatch):
    """A planted bug (each step reads the next step's projection) fails the self-check: one
    warning, then the generic loops give the layer's numbers."""
    monkeypatch.setattr(selfcheck, "_VERDICTS", {})
    monkeypatch.delenv("DUALTAPE_JIT", raising=False)
    right = numba_standard_lstm_gru.STANDARD_LSTM.forward

    def off_by_one(W_hh, projected, h, c):
        return right(W_hh, np.concatenate([projected[1:], projected[-1:]]), h, c)

    monkeypatch.setattr(numba_standard_lstm_gru.STANDARD_LSTM, "forward", off_by_one)
    layer = dualtape.StandardLSTM(3, 4, seed=1, dtype="float64")
    xs = np.random.default_rng(3).normal(size=(5, 2, 3))
    with pytest.warns(RuntimeWarning, match=r"fast StandardLSTM loops disagree .*hs differ"):
        _, _, ys = layer.forward_sequence(None, xs)
    expected = generic_forward_sequence(
        np, layer.params["W_hh"], xs @ layer.params["W_ih"].T + layer.params["b_ih"]
        + layer.params["b_hh"], np.zeros((2, 4)), np.zeros((2, 4)))[0][1:]
    np.testing.assert_allclose(ys, expected, rtol=1e-13)


@pytest.mark.parametrize("operand", ["float16", "mixed", "mixed-matrix", "list"])
def test_the_loops_refuse_operands_they_cannot_index(operand):
    a = problem(2, 3, 2, "float64")
    if operand == "float16":
        a = {k: v.astype(np.float16) for k, v in a.items()}
    elif operand == "mixed":
        a["h"] = a["h"].astype(np.float32)
    elif operand == "mixed-matrix":  # the recurrent matrix the loops read as raw memory
        a["W_hh"] = a["W_hh"].astype(np.float32)
    elif operand == "list":
        a["W_hh"] = a["W_hh"].tolist()
    with pytest.raises(ValueError, match="operands must be|float32 or float64 only"):
        numba_standard_lstm_gru.standard_lstm_forward(a["W_hh"], a["projected"], a["h"], a["c"])


def test_strided_inputs_are_copied_into_the_loops_order():
    a = problem(3, 4, 5, "float64")
    wide = np.zeros((5, 3, 32))
    wide[..., ::2] = a["projected"]
    dhs = np.zeros((5, 3, 8))
    dhs[..., ::2] = a["dhs"]
    W = np.asfortranarray(a["W_hh"])
    generic = generic_forward_sequence(np, a["W_hh"], a["projected"], a["h"], a["c"])
    fast = numba_standard_lstm_gru.standard_lstm_forward(W, wide[..., ::2], a["h"], a["c"])
    np.testing.assert_allclose(fast[0], generic[0], rtol=1e-12, atol=1e-13)
    back = (generic[2], generic[1], generic[3])
    f_das = numba_standard_lstm_gru.standard_lstm_backward(W, *back, dhs[..., ::2], a["dh"],
                                                           a["dc"], True)[0]
    g_das = generic_backward_sequence(np, a["W_hh"], *back, a["dhs"], a["dh"], a["dc"])[0]
    np.testing.assert_allclose(f_das, g_das, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_compiled_code_calls_no_libm_exp_or_tanh(dtype):
    """σ and tanh come from the vectorizable ``fast_exp``, and backward reads the tape."""
    from dualtape.kernels import _numba_standard_lstm_gru

    numba_standard_lstm_gru.warm_up(dtype)
    for name in numba_standard_lstm_gru.COMPILED:
        assert not libm_calls(getattr(_numba_standard_lstm_gru, name), dtype), name
