"""Tests for dualtape.backend: choosing a backend, the environment variable, errors, transfers."""

from __future__ import annotations

import importlib.util
import sys

import numpy as np
import pytest

import dualtape
from dualtape import backend as bk

from .conftest import np64

KNOWN = ["numpy", "cupy", "torch", "array_api_strict"]


@pytest.fixture
def fresh_selection(monkeypatch: pytest.MonkeyPatch):
    """No process-wide choice yet and no DUALTAPE_BACKEND; both come back after the test."""
    monkeypatch.setattr(bk, "_global_choice", None)
    monkeypatch.delenv("DUALTAPE_BACKEND", raising=False)


def _usable(name: str) -> bool:
    try:
        bk.resolve_backend(name)
    except dualtape.BackendUnavailable:
        return False
    return True


def _cupy_importable() -> bool:
    return importlib.util.find_spec("cupy") is not None


# --- available_backends ---------------------------------------------------------------------


def test_available_backends_follow_the_documented_order():
    found = dualtape.available_backends()
    assert found == [name for name in KNOWN if name in found]


def test_available_backends_are_exactly_the_usable_ones():
    found = dualtape.available_backends()
    assert found == [name for name in KNOWN if _usable(name)]
    assert "numpy" in found
    for name in ("torch", "array_api_strict"):
        assert (name in found) == (importlib.util.find_spec(name) is not None)


# --- selection: default, environment, set_backend, use_backend ------------------------------


def test_default_backend_is_numpy_on_the_cpu(fresh_selection):
    chosen = dualtape.get_backend()
    assert chosen.name == "numpy"
    assert chosen.device == "cpu"
    assert chosen.xp is bk.namespace_of(np.zeros(1))


def test_env_variable_is_read_on_first_use_not_at_import(fresh_selection, monkeypatch):
    # dualtape is long imported; setting the variable now must still take effect.
    monkeypatch.setenv("DUALTAPE_BACKEND", "array_api_strict")
    assert dualtape.get_backend().name == "array_api_strict"
    assert bk.backend_of(dualtape.asarray([1.0])).name == "array_api_strict"


def test_env_variable_is_read_once_then_kept(fresh_selection, monkeypatch):
    monkeypatch.setenv("DUALTAPE_BACKEND", "array_api_strict")
    assert dualtape.get_backend().name == "array_api_strict"
    monkeypatch.setenv("DUALTAPE_BACKEND", "numpy")
    assert dualtape.get_backend().name == "array_api_strict"


def test_env_variable_with_unknown_name_raises_on_first_use(fresh_selection, monkeypatch):
    monkeypatch.setenv("DUALTAPE_BACKEND", "tensorflow")
    with pytest.raises(ValueError, match="^environment variable DUALTAPE_BACKEND: unknown "
                       "backend 'tensorflow'"):
        dualtape.get_backend()


def test_set_backend_overrides_the_env_variable(fresh_selection, monkeypatch):
    monkeypatch.setenv("DUALTAPE_BACKEND", "numpy")
    returned = dualtape.set_backend("array_api_strict", "device1")
    chosen = dualtape.get_backend()
    assert chosen == returned
    assert chosen.name == "array_api_strict"
    assert chosen.device == chosen.xp.Device("device1")


def test_use_backend_overrides_set_backend_and_restores_it_on_exit(fresh_selection):
    dualtape.set_backend("array_api_strict")
    with dualtape.use_backend("numpy") as inner:
        assert inner.name == "numpy"
        assert dualtape.get_backend() == inner
    assert dualtape.get_backend().name == "array_api_strict"


def test_nested_use_backend_restores_each_level(fresh_selection):
    with dualtape.use_backend("array_api_strict", "device1"):
        with dualtape.use_backend("numpy"):
            assert dualtape.get_backend().name == "numpy"
        outer = dualtape.get_backend()
        assert outer.name == "array_api_strict"
        assert outer.device == outer.xp.Device("device1")
    assert dualtape.get_backend().name == "numpy"


def test_use_backend_restores_the_previous_choice_after_an_exception(fresh_selection):
    dualtape.set_backend("numpy")
    with pytest.raises(KeyError), dualtape.use_backend("array_api_strict"):
        assert dualtape.get_backend().name == "array_api_strict"
        raise KeyError("boom")
    assert dualtape.get_backend().name == "numpy"


def test_get_backend_gives_name_namespace_and_device(fresh_selection):
    with dualtape.use_backend("array_api_strict", "device1") as chosen:
        import array_api_strict

        assert chosen.name == "array_api_strict"
        assert chosen.xp is array_api_strict
        assert chosen.device == array_api_strict.Device("device1")


def test_auto_picks_numpy_without_a_gpu(fresh_selection):
    if "cupy" in dualtape.available_backends():
        pytest.skip("a CUDA device works here, so auto picks cupy")
    assert bk.resolve_backend("auto").name == "numpy"
    with dualtape.use_backend("auto") as chosen:
        assert chosen.name == "numpy"


# --- bad names and unavailable backends -----------------------------------------------------


@pytest.mark.parametrize("select", [dualtape.set_backend, bk.resolve_backend,
                                    lambda name: dualtape.use_backend(name).__enter__()],
                         ids=["set_backend", "resolve_backend", "use_backend"])
def test_unknown_backend_name_raises_value_error_listing_the_known_names(fresh_selection, select):
    with pytest.raises(ValueError) as info:
        select("jax")
    message = str(info.value)
    assert "'jax'" in message
    for name in KNOWN:
        assert name in message


def test_failed_set_backend_keeps_the_previous_choice(fresh_selection):
    dualtape.set_backend("array_api_strict")
    with pytest.raises(ValueError):
        dualtape.set_backend("Numpy")
    assert dualtape.get_backend().name == "array_api_strict"


def test_backend_name_must_be_a_string(fresh_selection):
    with pytest.raises(TypeError, match="string"):
        dualtape.set_backend(np)


def test_numpy_has_no_other_device(fresh_selection):
    with pytest.raises(ValueError, match="cpu"):
        dualtape.set_backend("numpy", "cuda:0")


def test_cupy_really_unavailable_raises_backend_unavailable(fresh_selection):
    if _usable("cupy"):
        pytest.skip("cupy works on this machine")
    with pytest.raises(dualtape.BackendUnavailable) as info:
        dualtape.set_backend("cupy")
    if not _cupy_importable():
        assert 'pip install "dualtape[cuda12]"' in str(info.value)
    else:
        assert "CUDA" in str(info.value)
    assert dualtape.get_backend().name == "numpy"


def test_cupy_not_installed_names_the_extra_to_install(fresh_selection, monkeypatch):
    # Pretend CuPy is not installed (None in sys.modules makes its import fail), whatever
    # this machine has; the namespace cache is cleared so the import is really attempted.
    monkeypatch.setitem(sys.modules, "cupy", None)
    bk._namespace.cache_clear()
    try:
        with pytest.raises(dualtape.BackendUnavailable) as info:
            bk.resolve_backend("cupy")
        assert 'pip install "dualtape[cuda12]"' in str(info.value)
        assert "cupy" not in dualtape.available_backends()
    finally:
        bk._namespace.cache_clear()


def test_backend_unavailable_is_exported_and_a_runtime_error():
    assert dualtape.BackendUnavailable is bk.BackendUnavailable
    assert issubclass(dualtape.BackendUnavailable, RuntimeError)


# --- asarray / to_numpy on every backend ----------------------------------------------------


def test_asarray_creates_on_the_selected_backend_and_device(backend):
    a = dualtape.asarray([[1.0, 2.0], [3.0, 4.0]])
    where = bk.backend_of(a)
    assert where.name == backend.name
    assert str(where.device) == str(backend.device)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_asarray_to_numpy_round_trip_keeps_values_and_dtype(backend, dtype):
    host = np.random.default_rng(0).normal(size=(3, 4)).astype(dtype)
    a = dualtape.asarray(host)
    back = dualtape.to_numpy(a)
    assert isinstance(back, np.ndarray)
    assert back.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(back, host)


def test_asarray_with_dtype_converts(backend):
    a = dualtape.asarray([1, 2, 3], dtype="float64")
    assert np64(a).tolist() == [1.0, 2.0, 3.0]
    assert dualtape.to_numpy(a).dtype == np.float64


def test_asarray_moves_an_array_of_another_backend_here(backend):
    with dualtape.use_backend("numpy"):
        source = dualtape.asarray([0.5, -1.5])
    moved = dualtape.asarray(source)
    assert bk.backend_of(moved) == backend
    np.testing.assert_array_equal(dualtape.to_numpy(moved), [0.5, -1.5])
    with dualtape.use_backend("numpy"):
        home = dualtape.asarray(moved)
    assert isinstance(home, np.ndarray)
    np.testing.assert_array_equal(home, [0.5, -1.5])


def test_to_numpy_rejects_what_is_not_an_array():
    with pytest.raises(TypeError, match="expected an array"):
        dualtape.to_numpy("not an array")


@pytest.mark.parametrize("value", [0.5, 3, np.float32(2.0), np.asarray(1.5)], ids=repr)
def test_asarray_of_a_scalar_keeps_shape_0d(backend, value):
    a = dualtape.asarray(value)
    assert tuple(a.shape) == ()
    assert float(dualtape.to_numpy(a)) == float(value)


# --- selection details ----------------------------------------------------------------------


def test_an_empty_env_variable_means_numpy(fresh_selection, monkeypatch):
    monkeypatch.setenv("DUALTAPE_BACKEND", "")
    assert dualtape.get_backend().name == "numpy"


def test_use_backend_beats_set_backend_which_beats_the_env_variable(fresh_selection,
                                                                   monkeypatch):
    monkeypatch.setenv("DUALTAPE_BACKEND", "numpy")
    with dualtape.use_backend("array_api_strict", "device1"):
        dualtape.set_backend("numpy")
        assert dualtape.get_backend().name == "array_api_strict"
    assert dualtape.get_backend().name == "numpy"


# --- arrays of two backends or devices ------------------------------------------------------


def _strict(device: str = "CPU_DEVICE"):
    with dualtape.use_backend("array_api_strict", device):
        return dualtape.asarray([1.0, 2.0])


def test_mixing_backends_raises_type_error_naming_both():
    with pytest.raises(TypeError, match="array_api_strict, numpy"):
        bk.namespace_of(np.zeros(2), _strict())
    with pytest.raises(TypeError, match="x is a array_api_strict array .* lives on numpy"):
        bk.check_same_place(_strict(), np.zeros(2), "x", "the layer")
    with pytest.raises(TypeError, match="x is a numpy array .* lives on array_api_strict"):
        bk.check_same_place(np.zeros(2), _strict(), "x", "the layer")


def test_mixing_devices_raises_value_error_naming_both():
    with pytest.raises(ValueError, match="device1.* lives on .*CPU_DEVICE"):
        bk.check_same_place(_strict("device1"), _strict(), "x", "the layer")
    bk.check_same_place(_strict("device1"), _strict("device1"), "x", "the layer")
    bk.check_same_place(np.zeros(2), np.ones(3), "x", "the layer")


def test_move_changes_the_device_within_a_backend():
    target = bk.resolve_backend("array_api_strict", "device1")
    moved = bk.move(_strict(), target)
    assert bk.backend_of(moved) == target
    np.testing.assert_array_equal(dualtape.to_numpy(moved), [1.0, 2.0])


# --- dtype names and the host generator -----------------------------------------------------


def test_dtype_name_reads_every_backends_dtypes_and_numpy_scalar_types():
    import array_api_strict

    for dtype in ("float32", np.dtype("float32"), np.float32, array_api_strict.float32):
        assert bk.dtype_name(dtype) == "float32"
    assert bk.dtype_name(np.float64) == "float64"


@pytest.mark.parametrize("dtype", ["float16", np.float16, np.int32, "int64", None], ids=repr)
def test_dtype_name_refuses_what_is_not_float32_or_float64(dtype):
    with pytest.raises(ValueError, match="dtype must be one of"):
        bk.dtype_name(dtype)


def test_host_rng_takes_seed_0_and_refuses_negative_or_boolean_seeds():
    assert bk.host_rng(0).integers(1 << 30) == np.random.default_rng(0).integers(1 << 30)
    for seed in (-1, True, 1.5):
        with pytest.raises(ValueError, match="seed"):
            bk.host_rng(seed)
