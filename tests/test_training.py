"""clip_gradients on every backend: the global norm over every array of every dict, scaled
down to ``max_norm`` and never up, finite where the squared norm overflows, and its refusals."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import dualtape
from dualtape import clip_gradients

from .conftest import np64
from .helpers import other_backend_array


def global_norm(groups) -> float:
    return math.sqrt(sum(float(np.sum(np64(g) ** 2)) for group in groups for g in group.values()))


def on_backend(host, dtype="float64"):
    return [{k: dualtape.asarray(np.asarray(g, dtype=dtype)) for k, g in group.items()}
            for group in host]


@pytest.mark.parametrize("scale, clipped", [(4.0, True), (0.5, False)],
                         ids=["above-max_norm", "below-max_norm"])
def test_the_global_norm_is_scaled_down_to_max_norm_and_returned(backend, scale, clipped):
    """Several groups of several arrays: the norm is taken over all of them together."""
    rng = np.random.default_rng(0)
    host = [{"W": rng.normal(size=(3, 4)), "b": rng.normal(size=4)}, {"U": rng.normal(size=5)}]
    host = [{k: g * (scale / global_norm(host)) for k, g in group.items()} for group in host]
    grads = on_backend(host)
    out, norm = clip_gradients(grads, 1.0)
    assert float(norm) == pytest.approx(scale, rel=1e-12)
    assert global_norm(out) == pytest.approx(1.0 if clipped else scale, rel=1e-12)
    factor = 1.0 / scale if clipped else 1.0
    for got, want in zip(out, host, strict=True):
        for key in want:
            np.testing.assert_allclose(np64(got[key]), want[key] * factor, rtol=1e-12)
    np.testing.assert_array_equal(np64(grads[0]["W"]), host[0]["W"])  # not in place


def test_one_dict_comes_back_as_one_dict_and_inf_only_measures(backend):
    grads = {"W": dualtape.asarray(np.full((2, 2), 3.0))}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing computed on the way is inf / inf
        out, norm = clip_gradients(grads, math.inf)
    assert isinstance(out, dict) and float(norm) == 6.0
    np.testing.assert_array_equal(np64(out["W"]), np.full((2, 2), 3.0))


@pytest.mark.parametrize("sign", [1.0, -1.0], ids=["positive", "negative"])
def test_a_float32_norm_beyond_its_range_still_clips(backend, sign):
    """Squares of 1e30 overflow float32; the norm, computed with the largest magnitude
    factored out (of negative values too), is 2e30 and the gradients come out at norm 1,
    not zero or NaN."""
    grads = on_backend([{"W": np.full(4, sign * 1e30)}], "float32")
    out, norm = clip_gradients(grads, 1.0)
    assert float(norm) == pytest.approx(2e30, rel=1e-6)
    np.testing.assert_allclose(np64(out[0]["W"]), np.full(4, sign * 0.5), rtol=1e-6)


def test_zero_and_empty_gradients_have_norm_zero_and_stay_as_they_are(backend):
    grads = on_backend([{"W": np.zeros((2, 3)), "empty": np.zeros((0, 3))}])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no 0 / 0 on the way
        out, norm = clip_gradients(grads, 1.0)
    assert float(norm) == 0.0
    assert not np.isnan(np64(out[0]["W"])).any() and out[0]["empty"].shape == (0, 3)
    assert clip_gradients([{}], 1.0) == ([{}], 0.0)


@pytest.mark.filterwarnings("ignore:invalid value encountered")  # numpy's inf · 0
@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_a_non_finite_gradient_gives_a_non_finite_norm(backend, bad):
    out, norm = clip_gradients(on_backend([{"W": np.array([1.0, bad])}]), 1.0)
    assert not math.isfinite(float(norm))
    assert not np.isfinite(np64(out[0]["W"])).all()


@pytest.mark.parametrize("max_norm", [np.float32(1), np.int64(1), 1])
def test_max_norm_may_be_any_real_number(max_norm):
    clipped, norm = clip_gradients([{"W": np.full(4, 2.0)}], max_norm)
    assert float(norm) == 4.0 and np.allclose(clipped[0]["W"], 0.5)


@pytest.mark.parametrize("max_norm", [0, -1.0, math.nan, "1", True, np.bool_(True), None])
def test_max_norm_must_be_a_positive_real_number(max_norm):
    with pytest.raises(ValueError, match=r"max_norm must be a real number in \(0, inf\]"):
        clip_gradients([{"W": np.ones(2)}], max_norm)


def test_gradients_must_be_dicts():
    with pytest.raises(TypeError, match="expected a gradient dict or a list of them"):
        clip_gradients(np.ones(3), 1.0)


def test_gradients_of_two_backends_are_refused_naming_both(backend):
    other, name = other_backend_array(backend, np.ones(2))
    with pytest.raises(TypeError, match=name):
        clip_gradients([{"a": dualtape.asarray(np.ones(2)), "b": other}], 1.0)


@pytest.mark.parametrize("scale", [4.0, 0.5], ids=["above-max_norm", "below-max_norm"])
def test_in_place_gives_the_same_bits_into_the_arrays_that_take_writes(backend, scale):
    rng = np.random.default_rng(1)
    host = [{"W": rng.normal(size=(3, 4)) * scale, "b": rng.normal(size=4)},
            {"U": rng.normal(size=5)}]
    fresh, fresh_norm = clip_gradients(on_backend(host), 1.0)
    grads = on_backend(host)
    before = [dict(group) for group in grads]
    out, norm = clip_gradients(grads, 1.0, in_place=True)
    assert out is grads and float(norm) == float(fresh_norm)
    writes = backend.name in ("numpy", "cupy")
    for got, want, was in zip(out, fresh, before, strict=True):
        for key in want:
            np.testing.assert_array_equal(np64(got[key]), np64(want[key]), err_msg=key)
            assert (got[key] is was[key]) == writes, key


def test_in_place_scales_shared_memory_once_and_replaces_views_and_read_only_arrays(backend):
    """One array under two names is scaled once; a view into it (made before it is scaled)
    and a read-only array become new arrays, the read-only one left as it was."""
    host = np.arange(12.0).reshape(3, 4).copy()  # owns its memory
    whole = dualtape.asarray(host.copy())
    locked = dualtape.asarray(np.full(4, 2.0))
    if isinstance(locked, np.ndarray):
        locked.flags.writeable = False
    grads = {"row": whole[1, ...], "W": whole, "again": whole, "locked": locked}
    out, norm = clip_gradients(grads, 1.0, in_place=True)
    factor = 1.0 / math.sqrt(float(np.sum(host[1] ** 2) + 2 * np.sum(host**2)) + 16.0)
    assert float(norm) == pytest.approx(1.0 / factor, rel=1e-12)
    for key, want in (("row", host[1]), ("W", host), ("again", host), ("locked", 2.0)):
        np.testing.assert_allclose(np64(out[key]), want * factor, rtol=1e-12, err_msg=key)
    np.testing.assert_array_equal(np64(locked), np.full(4, 2.0))
    assert out["again"] is out["W"]
    assert (out["W"] is whole) == (backend.name in ("numpy", "cupy"))


def test_in_place_needs_dicts_it_can_change():
    from types import MappingProxyType

    frozen = MappingProxyType({"W": np.ones(2)})
    with pytest.raises(TypeError, match="changeable for in_place=True"):
        clip_gradients([frozen], 1.0, in_place=True)
    assert float(clip_gradients([frozen], 1.0)[1]) == pytest.approx(math.sqrt(2))
