"""The compiled optimizer updates (``kernels.numba_optim``) against the ufunc code in
``optim.py``: bit for bit, both dtypes, every rule they take (SGD with momentum, with L2, with
both; Adam), over steps and a parameter in passes' range; which parameters they take; the
switches; and the self-check that guards them."""

from __future__ import annotations

import numpy as np
import pytest

import dualtape
from dualtape import optim
from dualtape.kernels import numba_lstm, numba_optim, optimizer_loops, selfcheck

WHY_NOT = numba_lstm.unavailable()
pytestmark = pytest.mark.skipif(WHY_NOT is not None, reason=f"no compiled loops: {WHY_NOT}")
RULES = {
    "sgd-momentum": lambda: dualtape.SGD(0.1, momentum=0.9),
    "sgd-l2": lambda: dualtape.SGD(0.1, regulariser=0.01),
    "sgd-momentum-l2": lambda: dualtape.SGD(0.1, momentum=0.9, regulariser=0.01),
    "adam": lambda: dualtape.Adam(0.01),
}
SHAPES = {"w": (80, 65), "large": (3, optim.CHUNK + 7), "small": (7,)}
"""One parameter above ``COMPILED_FROM``, one above ``CHUNK`` (the ufunc code's passes), one
below both (the ufunc code's whole-array update on either path)."""


def train(make, dtype: str, jit: str, steps: int = 4):
    """Parameters, state and the compiled updates' calls (parameter sizes) after ``steps``
    steps, the loop chosen by ``DUALTAPE_JIT=jit``."""
    rng = np.random.default_rng(3)
    params = [{k: rng.normal(size=s).astype(dtype) for k, s in SHAPES.items()}]
    optimizer, calls = make(), []
    right = type(optimizer)._compiled_update
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DUALTAPE_JIT", jit)
        optimizer_loops(np.ones(1, dtype), optim._check_compiled)  # its self-check, uncounted
        patch.setattr(type(optimizer), "_compiled_update",
                      lambda self, loops, w, g, slot: (calls.append(w.size),
                                                       right(self, loops, w, g, slot)))
        for step in range(steps):
            scale = 10.0 ** rng.integers(-30, 3)  # gradients of any size, tiny ones too
            grads = [{k: (rng.normal(size=s) * scale).astype(dtype) for k, s in SHAPES.items()}]
            if step == 1:
                grads[0]["w"][:3] = 0  # a zero gradient: Adam's eps keeps 0/0 away
            optimizer.step(params, grads)
    return params[0], optimizer.state_dict(), calls


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("rule", sorted(RULES))
def test_the_compiled_updates_give_the_ufunc_codes_bits(rule, dtype):
    compiled, compiled_state, calls = train(RULES[rule], dtype, "1")
    ufunc, ufunc_state, none = train(RULES[rule], dtype, "0")
    assert none == []
    big = [int(np.prod(SHAPES[k])) for k in ("w", "large")]
    compiled_steps = 4 if rule == "sgd-l2" else 3  # a first step makes the slots, if any
    assert sorted(calls) == sorted(big * compiled_steps), calls
    for name in SHAPES:
        np.testing.assert_array_equal(compiled[name], ufunc[name], err_msg=name)
    assert compiled_state.keys() == ufunc_state.keys()
    for key in compiled_state:
        np.testing.assert_array_equal(compiled_state[key], ufunc_state[key], err_msg=key)


def test_plain_sgd_small_strided_and_overlapping_parameters_keep_the_ufunc_code(monkeypatch):
    monkeypatch.delenv("DUALTAPE_JIT", raising=False)
    used = []
    monkeypatch.setattr(numba_optim, "sgd", lambda *a: used.append("sgd"))
    monkeypatch.setattr(numba_optim, "adam", lambda *a: used.append("adam"))
    rng = np.random.default_rng(0)
    big = rng.normal(size=(2 * optim.COMPILED_FROM,))
    plain = [{"w": big.copy()}]
    for _ in range(2):
        dualtape.SGD(0.1).step(plain, [{"w": rng.normal(size=big.shape)}])
    strided = [{"w": np.zeros((optim.COMPILED_FROM, 2))[:, 0],
                "small": np.zeros(optim.COMPILED_FROM - 1)}]
    both = np.zeros(optim.COMPILED_FROM + 1)
    overlapping = [{"w": both[1:]}]
    for params, grads in ((strided, [{k: np.ones(v.shape) for k, v in strided[0].items()}]),
                          (overlapping, [{"w": both[:-1]}])):
        optimizer = dualtape.Adam()
        for _ in range(2):
            optimizer.step(params, grads)
    assert used == []


@pytest.mark.parametrize("switch", ["DUALTAPE_FUSED", "DUALTAPE_JIT"])
def test_either_switch_off_keeps_the_ufunc_or_generic_code(monkeypatch, switch):
    monkeypatch.setenv(switch, "0")
    assert optimizer_loops(np.ones(1), optim._check_compiled) is None


def test_only_float_numpy_arrays_take_the_compiled_updates(monkeypatch):
    monkeypatch.delenv("DUALTAPE_JIT", raising=False)
    assert optimizer_loops(np.ones(1, "float16"), optim._check_compiled) is None
    assert optimizer_loops(np.ones(1, "float32"), optim._check_compiled) is numba_optim


@pytest.mark.parametrize("bad", [
    lambda w: w.astype("float16"), lambda w: w[:-1], lambda w: np.tile(w, 2)[::2],
    lambda w: w.astype("float32"), lambda w: list(w),
], ids=["float16", "shorter", "strided", "another-dtype", "a-list"])
def test_the_compiled_updates_refuse_operands_they_cannot_index(bad):
    w = np.zeros(8)
    m, v = np.zeros(8), np.zeros(8)
    with pytest.raises(ValueError, match="numba_optim"):
        numba_optim.adam(w, bad(np.ones(8)), m, v, 0.9, 0.999, 0.1, 1e-8)
    with pytest.raises(ValueError, match="numba_optim"):
        numba_optim.sgd(bad(np.ones(8)), w, None, 0.1, 0.0, 0.0)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_self_check_passes_and_runs_once_per_dtype(monkeypatch, dtype):
    monkeypatch.setattr(selfcheck, "_VERDICTS", {})
    monkeypatch.delenv("DUALTAPE_JIT", raising=False)
    like = np.ones(1, dtype)
    assert optim._check_compiled(numba_optim, like) is None
    calls = []
    for _ in range(3):
        optimizer_loops(like, lambda loops, a: calls.append(loops))
    assert calls == [numba_optim]


@pytest.mark.parametrize("planted", ["adam", "sgd"])
def test_updates_that_disagree_are_not_used_and_the_step_falls_back(monkeypatch, planted):
    """A planted bug (one rounding of the step moved: Adam's step size applied before the
    division; SGD's velocity decayed twice) fails the self-check: one warning, then the ufunc
    code gives the optimizer's numbers."""
    monkeypatch.setattr(selfcheck, "_VERDICTS", {})
    monkeypatch.delenv("DUALTAPE_JIT", raising=False)
    right = getattr(numba_optim, planted)
    if planted == "adam":
        monkeypatch.setattr(numba_optim, "adam", lambda w, g, m, v, b1, b2, step, eps: right(
            w, g, m, v, b1, b2, step * (1 + 1e-3), eps))
        make = RULES["adam"]
    else:
        monkeypatch.setattr(numba_optim, "sgd", lambda w, g, m, rate, mom, reg: right(
            w, g, m, rate, mom * mom, reg))
        make = RULES["sgd-momentum-l2"]
    with pytest.warns(RuntimeWarning, match="compiled optimizer updates disagree .* differs"):
        fast, _, _ = train(make, "float64", "1")
    monkeypatch.setattr(selfcheck, "_VERDICTS", {})
    ufunc, _, _ = train(make, "float64", "0")
    for name in SHAPES:
        np.testing.assert_array_equal(fast[name], ufunc[name])
