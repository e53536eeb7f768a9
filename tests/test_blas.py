"""Plain SGD on numpy through the axpy of numpy's bundled OpenBLAS: one pass, agreeing with
numpy to one rounding, on numpy's own BLAS threads."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import dualtape
from dualtape import optim
from dualtape.kernels import blas

from .conftest import np64

needs_blas = pytest.mark.skipif(
    not blas.available(), reason="this numpy bundles no OpenBLAS (not a PyPI wheel)")


LARGE = (64, 600)  # over optim.CHUNK elements: BLAS's call costs less than the pass it saves


def train(backend_arrays, steps=3, shape=LARGE, **sgd):
    """``steps`` SGD steps on a float64 parameter; its final value, on the host."""
    rng = np.random.default_rng(1)
    w = backend_arrays(rng.normal(size=shape))
    params, optimizer = [{"w": w}], dualtape.SGD(0.1, **sgd)
    for _ in range(steps):
        optimizer.step(params, [{"w": backend_arrays(rng.normal(size=shape))}])
    return np64(params[0]["w"])


@needs_blas
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_axpy_adds_a_times_x_in_place_to_one_rounding(dtype):
    rng = np.random.default_rng(0)
    x, y = (rng.normal(size=(30, 17)).astype(dtype) for _ in range(2))
    expected = y.astype(np.float64) - 0.1 * x.astype(np.float64)
    assert blas.axpy(-0.1, x, y)
    eps = np.finfo(dtype).eps
    np.testing.assert_allclose(y, expected, rtol=0, atol=2 * eps * np.abs(expected).max())


@pytest.mark.parametrize(
    "case", ["strided", "strided-x", "misaligned", "read-only", "integer", "mixed-dtypes",
             "shapes", "overlapping"])
def test_axpy_declines_what_blas_cannot_update_in_place(case):
    x, y = np.ones((4, 6)), np.zeros((4, 6))
    if case == "strided-x":
        x = np.ones((4, 12))[:, ::2]
    elif case == "misaligned":
        y = np.ndarray((4, 6), dtype=np.float64, buffer=bytearray(4 * 6 * 8 + 1), offset=1)
        assert not y.flags.aligned
    elif case == "overlapping":
        both = np.zeros(25)
        x, y = both[1:].reshape(4, 6), both[:-1].reshape(4, 6)
    elif case == "strided":
        y = np.zeros((4, 12))[:, ::2]
    elif case == "read-only":
        y.flags.writeable = False
    elif case == "integer":
        x, y = x.astype(np.int64), y.astype(np.int64)
    elif case == "mixed-dtypes":
        x = x.astype(np.float32)
    else:
        x = np.ones((6, 4))
    assert not blas.axpy(-0.1, x, y)
    assert not y.any(), "a declined axpy leaves y as it was"


def test_plain_sgd_of_a_large_parameter_takes_the_blas_pass_and_agrees_with_the_generic_code(
    backend, monkeypatch
):
    assert LARGE[0] * LARGE[1] > optim.CHUNK
    calls = []
    real = blas.axpy
    monkeypatch.setattr(optim.blas, "axpy", lambda a, x, y: calls.append(a) or real(a, x, y))
    fast = train(dualtape.asarray)
    if backend.name == "numpy" and blas.available():
        assert calls == [-0.1] * 3
    monkeypatch.setenv("DUALTAPE_FUSED", "0")
    generic = train(dualtape.asarray)
    np.testing.assert_allclose(fast, generic, rtol=0, atol=1e-14)


@pytest.mark.parametrize("case", [{"momentum": 0.9}, {"regulariser": 0.01},
                                  {"shape": (8, optim.CHUNK // 8)}])
def test_momentum_l2_or_a_small_parameter_keep_the_numpy_passes(monkeypatch, case):
    monkeypatch.setattr(optim.blas, "axpy", lambda a, x, y: pytest.fail("axpy was used"))
    with dualtape.use_backend("numpy"):
        train(np.asarray, **case)


def test_without_the_library_plain_sgd_is_numpys_bit_for_bit(monkeypatch):
    monkeypatch.setattr(blas, "_routines", lambda: blas.Routines({}, {}, {}))
    assert not blas.available() and blas.gemm("float64") is None and blas.gemv("float64") is None
    with dualtape.use_backend("numpy"):
        fast = train(np.asarray)
        monkeypatch.setenv("DUALTAPE_FUSED", "0")
        np.testing.assert_array_equal(fast, train(np.asarray))


@pytest.mark.parametrize("present", [True, False])
def test_info_says_whether_sgd_uses_blas(monkeypatch, capsys, present):
    from dualtape import cli

    monkeypatch.setattr(blas, "available", lambda: present)
    assert cli.main(["info"]) == 0
    line = capsys.readouterr().out.splitlines()[-1]
    assert line.startswith("SGD on numpy: one BLAS pass" if present else "SGD on numpy: two")


@needs_blas
def test_the_blas_pass_brings_no_thread_pool_of_its_own():
    """The routines come from the OpenBLAS numpy loaded: a fresh process has as many BLAS
    pools after a BLAS update as before it (a second pool fought numpy's for the cores)."""
    pytest.importorskip("threadpoolctl")
    code = (
        "import numpy as np, dualtape as dt, threadpoolctl\n"
        "before = len(threadpoolctl.threadpool_info())\n"
        "w, g = np.zeros(1 << 16), np.ones(1 << 16)\n"
        "dt.SGD(0.5).step([{'w': w}], [{'w': g}])\n"
        "assert w[0] == -0.5 and dt.kernels.blas.available()\n"
        "print(before, len(threadpoolctl.threadpool_info()))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out[0] == out[1], out


@needs_blas
@pytest.mark.parametrize("routine", ["axpy", "gemm", "gemv"])
def test_a_routine_that_disagrees_with_numpy_is_not_used(monkeypatch, routine):
    """The first-use check: a library whose axpy adds twice a·x, or whose gemm or gemv
    multiplies twice, is refused (for every routine: they come from one library)."""
    blas._routines.cache_clear()
    real_load = blas._load

    def doubled(path):
        found = real_load(path)
        if routine == "axpy":
            return found._replace(axpy={d: lambda n, a, *rest, f=f: f(n, 2 * a, *rest)
                                        for d, f in found.axpy.items()})
        if routine == "gemv":
            return found._replace(gemv={d: lambda *args, f=f: f(*args[:4], 2 * args[4],
                                                                 *args[5:])
                                        for d, f in found.gemv.items()})
        return found._replace(gemm={d: lambda *args, f=f: f(*args[:6], 2 * args[6], *args[7:])
                                    for d, f in found.gemm.items()})

    monkeypatch.setattr(blas, "_load", doubled)
    try:
        assert not blas.available() and blas.gemm("float32") is None
        assert blas.gemv("float32") is None
    finally:
        blas._routines.cache_clear()
    monkeypatch.undo()
    assert blas.available() == bool(blas._library_paths())


@needs_blas
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_gemm_multiplies_by_a_transposed_operand_as_numpy_does(dtype):
    rng = np.random.default_rng(2)
    a, b = rng.normal(size=(7, 9)).astype(dtype), rng.normal(size=(5, 9)).astype(dtype)
    c = np.full((7, 5), np.nan, dtype=dtype)
    blas.gemm(dtype)(blas.ROW_MAJOR, blas.NO_TRANS, blas.TRANS, 7, 5, 9, 1.0, a.ctypes.data, 9,
                     b.ctypes.data, 9, 0.0, c.ctypes.data, 5)
    np.testing.assert_allclose(c, a @ b.T, rtol=0, atol=32 * np.finfo(dtype).eps)


@needs_blas
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("trans", ["no", "yes"])
def test_gemv_multiplies_a_vector_by_a_matrix_or_its_transpose_as_numpy_does(dtype, trans):
    rng = np.random.default_rng(3)
    a = rng.normal(size=(7, 9)).astype(dtype)
    x = rng.normal(size=9 if trans == "no" else 7).astype(dtype)
    y = np.full(7 if trans == "no" else 9, np.nan, dtype=dtype)
    blas.gemv(dtype)(blas.ROW_MAJOR, blas.NO_TRANS if trans == "no" else blas.TRANS, 7, 9, 1.0,
                     a.ctypes.data, 9, x.ctypes.data, 1, 0.0, y.ctypes.data, 1)
    np.testing.assert_allclose(y, (a if trans == "no" else a.T) @ x, rtol=0,
                               atol=32 * np.finfo(dtype).eps)


def test_no_library_beside_numpy_means_no_blas_pass(monkeypatch):
    blas._routines.cache_clear()
    monkeypatch.setattr(blas, "_library_paths", lambda: [])
    try:
        assert not blas.available()
        assert not blas.axpy(-0.1, np.ones(4), np.zeros(4))
    finally:
        blas._routines.cache_clear()
