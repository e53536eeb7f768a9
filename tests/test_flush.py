"""Subnormals flushed to zero on the CPU fast paths (``kernels.flush``): the control bits are
set inside and restored after; saturated recurrent networks keep no subnormal anywhere on the
fast paths, whose results move by flushing only at the subnormal level and in a rounding.
(The fast paths against the generic code: ``test_kernels.py`` and the cells' tests, on data
where that comparison is well conditioned; with these saturated weights, 30x Grenade's, it is
not: a rounding of a pre-activation in the hundreds moves a float32 output by 1e-3.)"""

from __future__ import annotations

import contextlib
import math
import os

import numpy as np
import pytest

import dualtape
from dualtape import switches
from dualtape.kernels import cpu_path, flush

CELLS = {"LSTM": dualtape.LSTM, "StandardLSTM": dualtape.StandardLSTM, "GRU": dualtape.GRU}


def subnormal(dtype: str) -> np.ndarray:
    """An array of a subnormal number and its double, which is one too."""
    tiny = np.finfo(dtype).tiny
    return np.array([tiny / 4, tiny / 2], dtype=dtype)


def needs_flushing() -> None:
    why = flush.unavailable()
    if why is not None:
        pytest.skip(f"subnormals are not flushed here: {why}")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_inside_the_block_subnormals_are_zero_and_after_it_they_are_back(dtype):
    needs_flushing()
    a = subnormal(dtype)
    with flush.flushed():
        assert (a * 2**30).tolist() == [0, 0], "DAZ: a subnormal operand is read as 0"
        normal = np.array([np.finfo(dtype).tiny], dtype=dtype)
        assert (normal / 4).tolist() == [0], "FTZ: a subnormal result is 0"
    assert (a * 1).tolist() == a.tolist()


def test_the_bits_are_restored_after_an_exception():
    needs_flushing()
    a = subnormal("float32")
    with pytest.raises(ZeroDivisionError), flush.flushed():
        raise ZeroDivisionError
    assert (a * 1).tolist() == a.tolist()


def test_under_control_the_given_bits_replace_the_threads_own():
    """A worker takes its caller's bits as they are: unflushed ones end its own flushing."""
    needs_flushing()
    a = subnormal("float32")
    unflushed, values = flush.control_here(), a.tolist()  # read here: DAZ reads them as 0
    with flush.flushed(), flush.under_control(unflushed):
        assert (a * 1).tolist() == values
    with flush.under_control(unflushed | flush.FTZ_DAZ):
        assert (a * 1).tolist() == [0, 0]


def saturated(cell: str, dtype: str) -> tuple[dualtape.RecurrentNetwork, np.ndarray]:
    """Two layers of ``cell`` whose weights, 30x Grenade's, drive most gates deep into
    saturation (σ of pre-activations of hundreds), and inputs for them."""
    net = dualtape.RecurrentNetwork([CELLS[cell](6, 24, seed=1, dtype=dtype),
                                     CELLS[cell](24, 6, seed=2, dtype=dtype)])
    for layer in net.layers:
        layer.params.update({k: 30 * v for k, v in layer.params.items()})
    xs = np.random.default_rng(3).uniform(-1, 1, (20, 2, 6)).astype(dtype)
    return net, xs


def arrays_of(found) -> list[np.ndarray]:
    """Every array in a result of nested tuples, lists and dicts (tapes, gradients)."""
    if isinstance(found, dict):
        return [a for v in found.values() for a in arrays_of(v)]
    if isinstance(found, list | tuple):
        return [a for v in found for a in arrays_of(v)]
    return [found] if isinstance(found, np.ndarray) else []


def run(net: dualtape.RecurrentNetwork, xs: np.ndarray) -> list[np.ndarray]:
    tape, _, ys = net.forward_sequence(None, xs)
    found = dualtape.backpropagate_sequence(net, xs, np.zeros_like(np.asarray(ys)), tape="sqrt")
    return [*arrays_of(tape), np.asarray(ys), *arrays_of(found.grads), np.asarray(found.loss)]


def subnormals(arrays: list[np.ndarray]) -> int:
    return sum(int(np.sum((a != 0) & (np.abs(a) < np.finfo(a.dtype).tiny))) for a in arrays
               if a.dtype.kind == "f")


UNFLUSHED = {("LSTM", "float32", "compiled"), ("LSTM", "float64", "compiled"),
             ("LSTM", "float32", "ufuncs")}
"""The cases whose fast path makes subnormals when not flushed: the control that the check
below can fail (the compiled σ's clamped exp gives ~5e-39 where numpy's gives 0)."""


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("cell", sorted(CELLS))
def test_saturated_networks_keep_no_subnormal_on_the_fast_paths(backend, monkeypatch, cell,
                                                                dtype):
    if backend.name != "numpy":
        pytest.skip("the flushing is numpy's (the CPU fast paths)")
    needs_flushing()
    net, xs = saturated(cell, dtype)
    fast = run(net, xs)
    assert subnormals(fast) == 0
    monkeypatch.setattr(flush, "_registers", lambda: "turned off by the test")
    unflushed = run(net, xs)
    loop = "ufuncs" if os.environ.get("DUALTAPE_JIT") == "0" else cpu_path()[0]
    assert (subnormals(unflushed) > 0) == ((cell, dtype, loop) in UNFLUSHED)
    # flushing moves what was subnormal, sums of a few of those, and a rounding they entered
    tiny, eps = np.finfo(dtype).tiny, np.finfo(dtype).eps
    for a, b in zip(fast, unflushed, strict=True):
        np.testing.assert_allclose(a, b, rtol=4 * eps, atol=1e4 * tiny)


@pytest.mark.parametrize("fused", ["1", "0"])
def test_only_the_fast_paths_flush_the_generic_code_keeps_ieee_subnormals(monkeypatch, fused):
    """With zero biases, subnormal inputs give subnormal pre-activations, cells and outputs:
    kept by the generic code (``DUALTAPE_FUSED=0``, the reference), 0 on the fast paths."""
    needs_flushing()
    monkeypatch.setenv("DUALTAPE_FUSED", fused)
    layer = dualtape.LSTM(2, 3, seed=1, dtype="float32")
    layer.params["b"] = np.zeros_like(layer.params["b"])
    xs = np.full((2, 1, 2), np.finfo("float32").tiny / 4, dtype="float32")
    _, _, ys = dualtape.RecurrentNetwork([layer]).forward_sequence(None, xs)
    assert (subnormals([np.asarray(ys)]) > 0) == (fused == "0")


def test_unavailable_gives_the_reason_or_none(monkeypatch):
    monkeypatch.setattr(flush, "_registers", lambda: "no x86 here")
    assert flush.unavailable() == "no x86 here"
    monkeypatch.setattr(flush, "_registers", lambda: object())  # the compiled functions
    assert flush.unavailable() is None


def test_where_unavailable_there_is_no_control_and_under_control_does_nothing(monkeypatch):
    monkeypatch.setattr(flush, "_registers", lambda: "no x86 here")
    assert flush.control_here() is None
    assert isinstance(flush.under_control(flush.FTZ_DAZ), contextlib.nullcontext)


def test_under_control_of_none_does_nothing():
    needs_flushing()
    assert isinstance(flush.under_control(None), contextlib.nullcontext)


def test_under_control_keeps_none_of_the_threads_own_bits():
    """Not even a sticky exception flag (bit 0: invalid operation) of the thread's own."""
    needs_flushing()
    bits = flush.control_here() & ~1
    with flush.under_control(bits | 1), flush.under_control(bits):
        assert flush.control_here() == bits


def test_flushed_for_chooses_for_each_namespace_within_a_held_call(monkeypatch):
    monkeypatch.setenv("DUALTAPE_FUSED", "1")
    monkeypatch.setattr(flush, "_registers", lambda: object())
    switches.forget_choices()
    both = switches.held(lambda: (flush.flushed_for(np), flush.flushed_for(math)))
    numpy_block, other_block = both()
    assert not isinstance(numpy_block, contextlib.nullcontext)
    assert isinstance(other_block, contextlib.nullcontext)
