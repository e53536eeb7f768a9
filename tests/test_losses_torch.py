"""The torch-defined losses against torch.nn.functional: the committed numbers of
``fixtures/loss_golden.npz`` on every backend (so CI checks them without torch), and live
where torch is installed."""

from __future__ import annotations

import functools

import numpy as np
import pytest

import dualtape
from dualtape import losses
from dualtape.backend import namespace_of

from .conftest import np64
from .fixtures import make_loss_golden as golden

CASES = golden.cases()


@pytest.fixture(scope="module")
def stored() -> dict[str, np.ndarray]:
    with np.load(golden.PATH, allow_pickle=False) as archive:
        return {k: archive[k] for k in archive.files}


def tolerance(dtype: str, reference: np.ndarray) -> dict[str, float]:
    """64 roundings of the reference's scale (NaN ignored): the mean sums 60 terms in another
    order."""
    eps = 64 * float(np.finfo(dtype).eps)
    return {"rtol": eps, "atol": eps * float(np.nanmax(np.abs(reference)))}


def dualtape_loss(kind: str):
    """dualtape's loss for ``kind``, its keyword argument bound as a user binds it."""
    name, _, keywords = golden.KINDS[kind]
    return functools.partial(losses.loss_function(name), **keywords)


def run_case(kind: str, y: np.ndarray, target: np.ndarray, mask: np.ndarray, masked: bool):
    """dualtape's ``(value, dy)`` on the selected backend, as numpy."""
    y_d = dualtape.asarray(y)
    weights = dualtape.asarray(mask.astype(y.dtype)) if masked else None
    value, dy = dualtape_loss(kind)(namespace_of(y_d), y_d, dualtape.asarray(target), weights)
    assert tuple(value.shape) == () and dy.dtype == y_d.dtype
    return np64(value), np64(dy)


def case_arrays(stored, name) -> dict[str, np.ndarray]:
    return {k: stored[f"{name}/{k}"] for k in ("y", "target", "mask")}


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_losses_give_torchs_numbers(backend, stored, name):
    kind, dtype, masked = CASES[name]
    value, dy = run_case(kind, **case_arrays(stored, name), masked=masked)
    expected_value, expected_dy = stored[f"{name}/value"], stored[f"{name}/grad"]
    np.testing.assert_allclose(value, expected_value, err_msg="value",
                               **tolerance(dtype, expected_value))
    np.testing.assert_allclose(dy, expected_dy, err_msg="gradient",
                               **tolerance(dtype, expected_dy))


def test_the_fixture_holds_every_case_and_its_edges(stored):
    names = {key.split("/")[0] for key in stored if "/" in key}
    assert names == set(CASES)
    for name, (_, dtype, masked) in CASES.items():
        assert stored[f"{name}/y"].dtype == dtype and stored[f"{name}/y"].shape == golden.SHAPE
        mask = stored[f"{name}/mask"]
        assert bool(mask.all()) is not masked
        assert np.isnan(stored[f"{name}/target"][~mask]).all()
    huber = case_arrays(stored, "huber-half-float32-full")
    residuals = huber["y"] - huber["target"]
    assert set(np.abs(residuals[0, 1, :2]).tolist()) == {0.5}  # exactly at the seam
    assert (stored["l1-float64-full/grad"][0, 0] == 0).all()  # sign(0) = 0


# --- live, where torch is installed ----------------------------------------------------------


def test_the_fixture_is_what_torch_computes_today(stored):
    pytest.importorskip("torch")
    fresh = golden.golden()
    assert fresh.keys() == stored.keys() - {"torch_version"}
    for key, value in fresh.items():
        if value.dtype == bool:
            np.testing.assert_array_equal(value, stored[key], err_msg=key)
        else:
            np.testing.assert_allclose(value, stored[key], err_msg=key,
                                       **tolerance(str(value.dtype), value))


@pytest.mark.parametrize("kind", sorted(golden.KINDS))
@pytest.mark.parametrize("seed", [11, 12])
def test_the_losses_follow_torch_live_on_new_numbers(backend, kind, seed):
    pytest.importorskip("torch")
    arrays = golden.problem(seed, kind, "float64", masked=True)
    expected = golden.run_torch(kind, **arrays)
    found = run_case(kind, **arrays, masked=True)
    for what, got, want in zip(("value", "gradient"), found, expected, strict=True):
        np.testing.assert_allclose(got, want, err_msg=what, **tolerance("float64", want))
