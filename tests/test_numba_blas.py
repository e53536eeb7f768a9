"""``kernels._numba_blas``: compiled code calls numpy's ``cblas_?gemm``/``cblas_?gemv`` through
their addresses as integers, with the same results, bit for bit, as the ctypes functions of
``kernels.blas`` (the same routines), for both dtypes and every scalar and pointer argument.
numpy only: the compiled loops exist for numpy arrays alone."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from dualtape.kernels import blas

numba = pytest.importorskip("numba", reason="the compiled loops need numba (the jit extra)")
if not blas.available():
    pytest.skip("this numpy bundles no OpenBLAS (not a PyPI wheel)", allow_module_level=True)

from dualtape.kernels._numba_blas import call_gemm, call_gemv  # noqa: E402  (needs numba)


@numba.njit(cache=False)
def gemm_at(address, a, b, c, alpha, beta):
    """``c = alpha a bᵀ + beta c`` on rows 1.. of ``c`` (a pointer into the array's middle)."""
    m, k = a.shape
    n = b.shape[0]
    call_gemm(address, blas.ROW_MAJOR, blas.NO_TRANS, blas.TRANS, m, n, k, alpha,
              a.ctypes.data, k, b.ctypes.data, k, beta, c[1:].ctypes.data, n)


@numba.njit(cache=False)
def gemv_at(address, trans, a, x, y, alpha, beta):
    m, n = a.shape
    call_gemv(address, blas.ROW_MAJOR, trans, m, n, alpha, a.ctypes.data, n, x.ctypes.data, 1,
              beta, y.ctypes.data, 1)


def operands(dtype, seed):
    rng = np.random.default_rng(seed)
    return [rng.normal(size=shape).astype(dtype) for shape in ((7, 9), (5, 9), (8, 5))]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_gemm_by_address_is_the_ctypes_routine_bit_for_bit(dtype):
    a, b, c = operands(dtype, 0)
    alpha, beta = np.dtype(dtype).type(0.3), np.dtype(dtype).type(-1.7)
    expected = c.copy()
    blas.gemm(dtype)(blas.ROW_MAJOR, blas.NO_TRANS, blas.TRANS, 7, 5, 9, alpha, a.ctypes.data,
                     9, b.ctypes.data, 9, beta, expected[1:].ctypes.data, 5)
    gemm_at(blas.addresses(np.dtype(dtype))[0], a, b, c, alpha, beta)
    np.testing.assert_array_equal(c, expected)
    assert np.array_equal(c[0], operands(dtype, 0)[2][0])  # the row before the pointer kept
    np.testing.assert_allclose(c[1:], 0.3 * a @ b.T - 1.7 * operands(dtype, 0)[2][1:],
                               rtol=0, atol=64 * np.finfo(dtype).eps)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("trans", [blas.NO_TRANS, blas.TRANS])
def test_gemv_by_address_is_the_ctypes_routine_bit_for_bit(dtype, trans):
    rng = np.random.default_rng(1)
    a = rng.normal(size=(7, 9)).astype(dtype)
    x = rng.normal(size=9 if trans == blas.NO_TRANS else 7).astype(dtype)
    y = rng.normal(size=7 if trans == blas.NO_TRANS else 9).astype(dtype)
    alpha, beta = np.dtype(dtype).type(1.5), np.dtype(dtype).type(0.25)
    given, expected = y.copy(), y.copy()
    blas.gemv(dtype)(blas.ROW_MAJOR, trans, 7, 9, alpha, a.ctypes.data, 9, x.ctypes.data, 1,
                     beta, expected.ctypes.data, 1)
    gemv_at(blas.addresses(np.dtype(dtype))[1], trans, a, x, y, alpha, beta)
    np.testing.assert_array_equal(y, expected)
    product = (a if trans == blas.NO_TRANS else a.T) @ x
    np.testing.assert_allclose(y, 1.5 * product + 0.25 * given, rtol=0,
                               atol=64 * np.finfo(dtype).eps)


def test_the_addresses_are_the_ctypes_functions():
    for dtype in (np.dtype("float32"), np.dtype("float64")):
        assert blas.addresses(dtype) == tuple(
            ctypes.cast(get(dtype), ctypes.c_void_p).value for get in (blas.gemm, blas.gemv))


def test_no_address_is_handed_out_for_a_missing_routine(monkeypatch):
    blas.addresses.cache_clear()
    monkeypatch.setattr(blas, "gemv", lambda dtype: None)
    try:
        with pytest.raises(RuntimeError, match="no OpenBLAS gemm/gemv for float32"):
            blas.addresses(np.dtype("float32"))
    finally:
        blas.addresses.cache_clear()
    monkeypatch.undo()
    assert all(blas.addresses(np.dtype("float32")))


def test_a_scalar_that_is_not_a_float_is_refused_when_compiling():
    a, b, c = operands("float64", 2)
    with pytest.raises(numba.core.errors.TypingError):
        gemm_at(blas.addresses(np.dtype("float64"))[0], a, b, c, 1, 0)
