"""Adam and SGD against torch.optim: the committed numbers of ``fixtures/optimizer_golden.npz``
on every backend and update path (so CI checks them without torch), and live runs where torch
is installed."""

from __future__ import annotations

import numpy as np
import pytest

import dualtape
from dualtape import optim
from dualtape.backend import out_module

from .conftest import np64
from .fixtures import make_optimizer_golden as golden

CASES = golden.cases()
PATHS = ["in-place", "generic"]


@pytest.fixture(scope="module")
def stored() -> dict[str, np.ndarray]:
    with np.load(golden.PATH, allow_pickle=False) as archive:
        return {k: archive[k] for k in archive.files}


def tolerance(dtype: str, reference: np.ndarray) -> dict[str, float]:
    """Four roundings of the parameters' scale: the two rules round in another order, while
    eps added before the bias correction moves float64 parameters by 1e7 or more of these."""
    eps = 4 * float(np.finfo(dtype).eps)
    return {"rtol": eps, "atol": eps * float(np.max(np.abs(reference)))}


def run_case(kind, hyper, w0, grads, size=None) -> list[dict[str, np.ndarray]]:
    """dualtape's ``kind(**hyper)`` from ``w0`` over ``grads`` on the selected backend, the
    parameters after every step (each array resized to ``size`` elements when given)."""
    resize = (lambda a: a) if size is None else (lambda a: np.resize(a, size))
    params = [{k: dualtape.asarray(resize(v).copy()) for k, v in w0.items()}]
    optimizer = getattr(dualtape, kind)(**hyper)
    after = []
    for g in grads:
        optimizer.step(params, [{k: dualtape.asarray(resize(v).copy()) for k, v in g.items()}])
        after.append({k: np64(v).copy() for k, v in params[0].items()})  # in place: copy
    return after


def case_inputs(stored, name) -> tuple[dict, list[dict], dict]:
    """The stored starting parameters, per-step gradients and torch's per-step results."""
    w0 = {k: stored[f"{name}/w0/{k}"] for k in golden.SHAPES}
    steps = stored[f"{name}/grads/W"].shape[0]
    grads = [{k: stored[f"{name}/grads/{k}"][t] for k in golden.SHAPES} for t in range(steps)]
    return w0, grads, {k: stored[f"{name}/torch/{k}"] for k in golden.SHAPES}


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_the_optimizers_give_torchs_numbers(backend, monkeypatch, stored, name, path):
    kind, hyper, dtype, _ = CASES[name]
    if path == "in-place" and out_module(dualtape.asarray(np.zeros(1))) is None:
        pytest.skip(f"{backend.name} arrays take no in-place updates")
    monkeypatch.setenv("DUALTAPE_FUSED", "1" if path == "in-place" else "0")
    w0, grads, expected = case_inputs(stored, name)
    for t, params in enumerate(run_case(kind, hyper, w0, grads)):
        for k, value in params.items():
            np.testing.assert_allclose(value, expected[k][t], err_msg=f"step {t + 1}, {k}",
                                       **tolerance(dtype, expected[k][t]))


@pytest.mark.parametrize("name", [n for n in sorted(CASES) if "float64" in n])
def test_updates_in_passes_give_torchs_numbers_up_to_a_last_pass_of_one_element(
    stored, monkeypatch, name
):
    """The case's arrays repeated to 2·CHUNK + 1 elements: numpy updates them in passes of
    CHUNK elements, the last of one element (plain SGD by BLAS, whose single rounding keeps
    it within the tolerance). An elementwise rule gives every copy torch's numbers."""
    kind, hyper, dtype, _ = CASES[name]
    monkeypatch.setenv("DUALTAPE_FUSED", "1")
    size = 2 * optim.CHUNK + 1
    w0, grads, expected = case_inputs(stored, name)
    with dualtape.use_backend("numpy"):
        results = run_case(kind, hyper, w0, grads, size=size)
    for t, params in enumerate(results):
        for k, value in params.items():
            reference = np.resize(expected[k][t], size)
            np.testing.assert_allclose(value, reference, err_msg=f"step {t + 1}, {k}",
                                       **tolerance(dtype, reference))


def test_the_fixture_holds_every_case(stored):
    names = {key.split("/")[0] for key in stored if "/" in key}
    assert names == set(CASES)
    assert all(stored[f"{n}/grads/W"].shape[0] == golden.STEPS for n in names)
    assert all(stored[f"{n}/w0/W"].dtype == CASES[n][2] for n in names)


# --- live, where torch is installed ----------------------------------------------------------


def test_the_fixture_is_what_torch_computes_today(stored):
    pytest.importorskip("torch")
    fresh = golden.golden()
    assert fresh.keys() == stored.keys() - {"torch_version"}
    for key, value in fresh.items():
        dtype = str(value.dtype)
        np.testing.assert_allclose(value, stored[key], err_msg=key, **tolerance(dtype, value))


@pytest.mark.parametrize("hyper", [
    {"rate": 0.003, "beta1": 0.8, "beta2": 0.99, "eps": 1e-6},
    {"rate": 0.05, "beta1": 0.0, "beta2": 0.5, "eps": 1e-10},
    {"rate": 1e-4, "beta1": 0.95, "beta2": 0.9999, "eps": 1e-8},
], ids=repr)
@pytest.mark.parametrize("scale", sorted(golden.SCALES))
def test_adam_follows_torch_live_over_thirty_steps(hyper, scale):
    torch = pytest.importorskip("torch")
    w0, grads = golden.problem(99, "float64", scale, steps=30)
    expected = golden.run_torch("Adam", hyper, w0, grads)
    with dualtape.use_backend("numpy"):
        results = run_case("Adam", hyper, w0, grads)
    for t, params in enumerate(results):
        for k, value in params.items():
            np.testing.assert_allclose(value, expected[k][t], err_msg=f"step {t + 1}, {k}",
                                       **tolerance("float64", expected[k][t]))
    assert torch.__version__


def test_sgd_with_momentum_and_l2_is_grenades_rule_not_torchs():
    """Documented, not a bug: Grenade's L2 term decays ``w`` outside the momentum; torch's
    weight_decay goes into it. Either alone is the same rule."""
    pytest.importorskip("torch")
    hyper = {"rate": 0.1, "momentum": 0.9, "regulariser": 0.01}
    w0, grads = golden.problem(7, "float64", "normal")
    expected = golden.run_torch("SGD", hyper, w0, grads)
    with dualtape.use_backend("numpy"):
        last = run_case("SGD", hyper, w0, grads)[-1]
    gap = max(float(np.max(np.abs(last[k] - expected[k][-1]))) for k in last)
    assert gap > 1e-4
