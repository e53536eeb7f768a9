"""The compiled one-row outer product (``kernels.numba_outer``) behind ``batch_outer``: bit
for bit against numpy in both dtypes, strided operands and a sliced output; what it refuses;
the products it declines (mixed dtypes, overlap, small); the switches; and the self-check."""

from __future__ import annotations

import numpy as np
import pytest

from dualtape import kernels
from dualtape.kernels import numba_lstm, numba_outer, outer_loops, selfcheck
from dualtape.layers import linear_algebra
from dualtape.layers.linear_algebra import EINSUM_MIN, _check_outer, batch_outer
from dualtape.switches import held

WHY_NOT = numba_lstm.unavailable()
pytestmark = pytest.mark.skipif(WHY_NOT is not None, reason=f"no compiled loops: {WHY_NOT}")


@pytest.fixture
def calls(monkeypatch):
    """The compiled outer product's calls (output shapes) after its self-checks, the loops
    switched on."""
    monkeypatch.delenv("DUALTAPE_JIT", raising=False)
    for dtype in ("float32", "float64"):
        assert outer_loops(np.ones(1, dtype), _check_outer) is numba_outer
    seen, right = [], numba_outer.outer
    monkeypatch.setattr(numba_outer, "outer", lambda a, b, out: seen.append(out.shape) or right(
        a, b, out))
    return seen


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_product_is_numpys_bit_for_bit(calls, dtype):
    rng = np.random.default_rng(1)
    a = rng.standard_normal((1, 2 * 96)).astype(dtype)[:, ::2]  # strided rows
    b = (rng.standard_normal((1, 130)) * np.logspace(-30, 3, 130)).astype(dtype)
    whole = np.full((98, 130), np.nan, dtype=dtype)
    assert batch_outer(a, b, whole[1:97]) is not None
    assert calls == [(96, 130)] and 96 * 130 >= EINSUM_MIN
    np.testing.assert_array_equal(whole[1:97], a.T * b)
    assert np.isnan(whole[[0, 97]]).all()  # the rows around the slice are left alone


@pytest.mark.parametrize("case", ["mixed dtypes", "overlap", "small", "rows"])
def test_declined_products_take_numpys_way(calls, case):
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((1, 96)), rng.standard_normal((1, 128))
    out = np.empty((96, 128))
    if case == "mixed dtypes":
        b = b.astype(np.float32)
    elif case == "overlap":
        a = out[:1, :96]  # the first row of the output is the left operand
        a[...] = rng.standard_normal((1, 96))
    elif case == "small":
        a, out = a[:, :7], out[:7]
    else:
        a, b = rng.standard_normal((3, 96)), rng.standard_normal((3, 128))
    expected = a.T @ b if len(a) > 1 else np.multiply.outer(a[0].copy(), b[0])
    np.testing.assert_array_equal(batch_outer(a, b, out), expected)
    assert calls == []


@pytest.mark.parametrize("bad, words", [
    (lambda o: (np.ones(3, np.float16), np.ones(4, np.float16), o.astype(np.float16)), "float32"),
    (lambda o: (np.ones(3), np.ones(4, np.float32), o), "one dtype"),
    (lambda o: (np.ones(3, np.float32), np.ones(4), o), "one dtype"),
    (lambda o: (np.ones(3), np.ones(5), o), "shapes"),
    (lambda o: (np.ones((1, 3)), np.ones(4), o), "shapes"),
    (lambda o: (o[0, :3], np.ones(4), o), "shares memory"),
])
def test_bad_operands_are_refused_in_one_line(bad, words):
    with pytest.raises(ValueError, match=words) as caught:
        numba_outer.outer(*bad(np.zeros((3, 4))))
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("switch", ["DUALTAPE_FUSED", "DUALTAPE_JIT"])
def test_either_switch_off_keeps_numpys_product(monkeypatch, calls, switch):
    monkeypatch.setenv(switch, "0")
    assert outer_loops(np.ones(1), _check_outer) is None
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((1, 96)), rng.standard_normal((1, 128))
    np.testing.assert_array_equal(batch_outer(a, b, np.empty((96, 128))), a.T * b)
    assert calls == []


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_self_check_passes_and_a_planted_bug_fails_it(monkeypatch, dtype):
    """The self-check passes the compiled product; one that drops the last column (a SIMD tail
    left out) fails it: one warning, then einsum's product."""
    monkeypatch.setattr(selfcheck, "_VERDICTS", {})
    monkeypatch.delenv("DUALTAPE_JIT", raising=False)
    like = np.ones(1, dtype)
    assert _check_outer(numba_outer, like) is None
    right = numba_outer.outer

    def tail_left_out(a, b, out):
        right(a[:], b[:-1], out[:, :-1])
        return out

    monkeypatch.setattr(numba_outer, "outer", tail_left_out)
    a, b = np.ones((1, 96), dtype), np.ones((1, 128), dtype)
    out = np.zeros((96, 128), dtype)
    with pytest.warns(RuntimeWarning, match="compiled outer product disagree"):
        batch_outer(a, b, out)
    assert (out == 1).all()
    assert outer_loops(like, _check_outer) is None
    assert linear_algebra.outer_loops is outer_loops


def test_a_held_call_chooses_the_loops_once_per_array_type_and_dtype(monkeypatch):
    """A training call asks for the outer product once per weight gradient: the choice is
    made once per kind of array, and not shared between them."""
    monkeypatch.delenv("DUALTAPE_JIT", raising=False)
    made, right = [], kernels._loops_now
    monkeypatch.setattr(kernels, "_loops_now", lambda *args: made.append(args[3]) or right(*args))
    likes = [np.ones(1, "float32"), np.ones(1, "float64"), np.ones(1, "float16"), [1.0],
             np.ma.masked_array(np.ones(1, "float32"))]  # float32, but not a plain ndarray

    @held
    def call():
        return [outer_loops(like, _check_outer) for like in likes + likes]

    assert call() == [numba_outer, numba_outer, None, None, None] * 2
    assert made == likes
