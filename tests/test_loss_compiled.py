"""The compiled softmax cross entropy at class labels (``kernels.numba_softmax_cross_entropy``)
behind ``losses.softmax_cross_entropy``: against the generic code to rounding in both dtypes
and several layouts, NaN and huge logits, when it is taken and when not, what it refuses, and
the self-check."""

from __future__ import annotations

import numpy as np
import pytest

from dualtape import losses
from dualtape.kernels import loss_loops, numba_lstm, numba_softmax_cross_entropy, selfcheck
from dualtape.losses import _check_compiled, _softmax_cross_entropy, softmax_cross_entropy

WHY_NOT = numba_lstm.unavailable()
pytestmark = pytest.mark.skipif(WHY_NOT is not None, reason=f"no compiled loops: {WHY_NOT}")
TOL = {"float32": 1e-6, "float64": 1e-14}


@pytest.fixture
def calls(monkeypatch):
    """The compiled loss's calls (logit shapes) after its self-checks, the loops switched on."""
    monkeypatch.delenv("DUALTAPE_JIT", raising=False)
    monkeypatch.delenv("DUALTAPE_FUSED", raising=False)
    for dtype in ("float32", "float64"):
        assert loss_loops(np.ones(1, dtype), _check_compiled) is numba_softmax_cross_entropy
    seen, right = [], numba_softmax_cross_entropy.softmax_cross_entropy
    monkeypatch.setattr(numba_softmax_cross_entropy, "softmax_cross_entropy",
                        lambda y, labels, scale: seen.append(y.shape) or right(y, labels, scale))
    return seen


def logits(shape: tuple[int, ...], dtype: str, seed: int = 0) -> np.ndarray:
    """Logits of spreads from 0.01 to 30 across the rows."""
    rng = np.random.default_rng(seed)
    spread = np.logspace(-2, np.log10(30), int(np.prod(shape[:-1]))).reshape(shape[:-1])
    return (rng.standard_normal(shape) * spread[..., None]).astype(dtype)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("layout", ["batch", "sequence", "strided", "int32 labels",
                                    "one label per step"])
def test_the_compiled_loss_equals_the_generic_code_to_rounding(calls, dtype, layout):
    shape = {"batch": (32, 57), "one label per step": (6, 1, 5)}.get(layout, (7, 4, 57))
    y = logits(shape, dtype)
    labels = np.random.default_rng(1).integers(0, shape[-1], shape[:-1])
    want = _softmax_cross_entropy(np, y, labels, True, None)
    if layout == "strided":
        y = np.stack([y, y], axis=-1)[..., 0]  # every other float of a wider array
        assert not y.flags.c_contiguous
    elif layout == "int32 labels":
        labels = labels.astype(np.int32)
    elif layout == "one label per step":
        labels = labels[:, 0]  # (T,) where y is (T, 1, n)
    value, dy = softmax_cross_entropy(np, y, labels)
    assert calls == [(int(np.prod(shape[:-1])), shape[-1])]
    assert type(value) is np.dtype(dtype).type and dy.dtype == dtype and dy.shape == shape
    assert float(value) == pytest.approx(float(want[0]), rel=TOL[dtype])
    np.testing.assert_allclose(dy, want[1], rtol=TOL[dtype] * 10, atol=TOL[dtype] / shape[-2])


def test_the_compiled_loss_matches_finite_differences(calls):
    y, labels = logits((3, 2, 5), "float64"), np.array([[0, 4], [2, 2], [1, 3]])
    _, dy = softmax_cross_entropy(np, y, labels)
    h, numeric = 1e-6, np.empty_like(y)
    for i in np.ndindex(y.shape):
        up, down = y.copy(), y.copy()
        up[i] += h
        down[i] -= h
        numeric[i] = (softmax_cross_entropy(np, up, labels)[0]
                      - softmax_cross_entropy(np, down, labels)[0]) / (2 * h)
    np.testing.assert_allclose(dy, numeric, rtol=1e-6, atol=1e-9)
    assert len(calls) == 1 + 2 * y.size


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_huge_logits_stay_finite_and_nan_or_infinite_ones_give_nan(calls, dtype):
    y = np.array([[80.0, 0.0, -80.0], [-200.0, 200.0, 0.0]], dtype)
    labels = np.array([1, 1])
    value, dy = softmax_cross_entropy(np, y, labels)
    assert float(value) == pytest.approx(80 / 2, rel=1e-6)
    np.testing.assert_allclose(dy, [[0.5, -0.5, 0.0], [0.0, 0.0, 0.0]], atol=1e-7)
    y[1, 2] = -np.inf  # a class of probability 0: the same finite loss
    assert softmax_cross_entropy(np, y, labels)[0] == value
    for bad in (np.nan, np.inf):
        y[1, 2] = bad
        value, dy = softmax_cross_entropy(np, y, labels)
        with np.errstate(invalid="ignore"):
            generic = _softmax_cross_entropy(np, y, labels, True, None)
        assert np.isnan(value) and np.isnan(generic[0])  # train-text's divergence check
        np.testing.assert_array_equal(np.isnan(dy), np.isnan(generic[1]))


def test_the_generic_code_runs_with_weights_other_arrays_and_the_switches_off(
        calls, monkeypatch):
    y, labels = logits((3, 2, 5), "float32"), np.array([[0, 4], [2, 2], [1, 3]])
    softmax_cross_entropy(np, y, labels, np.ones((3, 2), "float32"))
    softmax_cross_entropy(np, y.astype("float16"), labels)
    softmax_cross_entropy(np, y, np.eye(5, dtype="float32")[labels])  # a dense target
    softmax_cross_entropy(np, y[:0], labels[:0])
    for switch in ("DUALTAPE_FUSED", "DUALTAPE_JIT"):
        monkeypatch.setenv(switch, "0")
        softmax_cross_entropy(np, y, labels)
        monkeypatch.delenv(switch)
    assert calls == []
    softmax_cross_entropy(np, y, labels)
    assert calls == [(6, 5)]


@pytest.mark.parametrize("args, message", [
    ((np.zeros((2, 3)), np.array([0, 3])), r"labels from 0 to 3 outside \[0, 3\)"),
    ((np.zeros((2, 3)), np.array([-1, 0])), r"labels from -1 to 0 outside"),
    ((np.zeros((2, 3)), np.array([0, 1], np.int32)), "float32 or float64 logits and int64"),
    ((np.zeros((2, 3), np.float16), np.array([0, 1])), "float32 or float64 logits and int64"),
    ((np.zeros((2, 3)), np.array([0, 1, 2])), r"logits \(2, 3\) and labels \(3,\)"),
    ((np.zeros((2, 1, 3)), np.array([0, 1])), r"logits \(2, 1, 3\) and labels \(2,\)"),
    ((np.zeros((2, 0)), np.array([0, 0])), r"logits \(2, 0\) and labels \(2,\)"),
], ids=["past-the-end", "negative", "int32", "float16", "rows-mismatch", "3-d", "no-classes"])
def test_the_compiled_loss_refuses_what_it_would_index_out_of_bounds(args, message):
    with pytest.raises(ValueError, match=message):
        numba_softmax_cross_entropy.softmax_cross_entropy(*args, 1.0)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_self_check_passes_and_a_planted_bug_fails_it(monkeypatch, dtype):
    """The self-check passes the compiled loss; one that forgets the label's 1 on the last row
    fails it: one warning, then the generic code."""
    monkeypatch.setattr(selfcheck, "_VERDICTS", {})
    monkeypatch.delenv("DUALTAPE_JIT", raising=False)
    like = np.ones(1, dtype)
    assert _check_compiled(numba_softmax_cross_entropy, like) is None
    right = numba_softmax_cross_entropy.softmax_cross_entropy

    def last_label_left_out(y, labels, scale):
        value, dy = right(y, labels, scale)
        dy[-1, labels[-1]] += scale
        return value, dy

    monkeypatch.setattr(numba_softmax_cross_entropy, "softmax_cross_entropy",
                        last_label_left_out)
    y, labels = logits((4, 3), dtype), np.array([0, 1, 2, 0])
    with pytest.warns(RuntimeWarning, match="compiled softmax cross entropy disagree"):
        value, dy = softmax_cross_entropy(np, y, labels)
    want = _softmax_cross_entropy(np, y, labels, True, None)
    np.testing.assert_array_equal(dy, want[1])
    assert loss_loops(like, _check_compiled) is None
    assert losses.loss_loops is loss_loops
