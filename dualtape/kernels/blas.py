"""numpy's own BLAS, called directly: ``axpy`` for SGD, ``gemm`` and ``gemv`` for compiled loops.

numpy has no fused multiply-add: ``w − rate·g`` takes two ufunc passes, a product into scratch
and a sum. numpy's wheels (2.0 and later, from PyPI) bundle scipy-openblas64; this module calls
its ``cblas_saxpy``/``cblas_daxpy`` through ctypes, and hands its ``cblas_?gemm`` and
``cblas_?gemv`` to compiled code (``numba_lstm``, which calls them without the interpreter). It
is the library numpy itself loaded, so the work runs on numpy's own BLAS threads: a second BLAS
(SciPy's, say) would bring a second thread pool, and on 2 cores training ran 2.5x slower while
the two pools spun. The library is found by its file name beside numpy and checked against
numpy on small arrays at first use; where it is not there (conda's numpy, MKL, Accelerate)
``axpy`` declines, SGD keeps numpy's two passes, and ``gemm`` and ``gemv`` are None. BLAS
rounds ``a·x + y`` once where numpy rounds the product and the sum, so results agree with numpy
to one rounding, not bit for bit.
"""

from __future__ import annotations

import ctypes
import functools
import glob
import os
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

Axpy = Callable[[int, float, int, int, int, int], None]  # n, a, x pointer, 1, y pointer, 1


def _library_paths() -> list[str]:
    """Where numpy's wheels keep their OpenBLAS: ``numpy.libs`` (Linux, Windows) or
    ``numpy/.dylibs`` (macOS)."""
    here = os.path.dirname(np.__file__)
    found: list[str] = []
    for folder in (os.path.join(here, os.pardir, "numpy.libs"), os.path.join(here, ".dylibs")):
        found += sorted(glob.glob(os.path.join(folder, "libscipy_openblas64_*")))
    return found


GEMM = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_int, ctypes.c_int, *[ctypes.c_int64] * 3,
                       ctypes.c_double, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p,
                       ctypes.c_int64, ctypes.c_double, ctypes.c_void_p, ctypes.c_int64)
"""``cblas_dgemm``'s ctypes type (``order, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb,
beta, c, ldc``, sizes 64-bit); ``cblas_sgemm`` has the same with float scalars (``GEMM32``)."""
GEMM32 = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_int, ctypes.c_int, *[ctypes.c_int64] * 3,
                         ctypes.c_float, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p,
                         ctypes.c_int64, ctypes.c_float, ctypes.c_void_p, ctypes.c_int64)
GEMV = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_int, *[ctypes.c_int64] * 2, ctypes.c_double,
                       ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64,
                       ctypes.c_double, ctypes.c_void_p, ctypes.c_int64)
"""``cblas_dgemv``'s ctypes type (``order, trans, m, n, alpha, a, lda, x, incx, beta, y,
incy``, sizes 64-bit); ``cblas_sgemv`` has the same with float scalars (``GEMV32``). At one row
a product is a ``gemv``: ``gemm`` would pack the whole matrix on every call (2-3x slower)."""
GEMV32 = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_int, *[ctypes.c_int64] * 2, ctypes.c_float,
                         ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64,
                         ctypes.c_float, ctypes.c_void_p, ctypes.c_int64)
ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112
"""The CBLAS enum values ``gemm`` and ``gemv`` take."""


class Routines(NamedTuple):
    """The checked routines of one library, by dtype."""

    axpy: dict[np.dtype, Axpy]
    gemm: dict[np.dtype, Any]
    gemv: dict[np.dtype, Any]


def _load(path: str) -> Routines:
    """The ILP64 ``axpy``, ``gemm`` and ``gemv`` routines of the library at ``path`` (64-bit
    sizes, as the ``64_`` suffix of their names says)."""
    library = ctypes.CDLL(path)
    axpy, gemm, gemv = {}, {}, {}
    for dtype, prefix, ctype, gemm_type, gemv_type in (
            (np.float32, "s", ctypes.c_float, GEMM32, GEMV32),
            (np.float64, "d", ctypes.c_double, GEMM, GEMV)):
        routine = getattr(library, f"scipy_cblas_{prefix}axpy64_")
        routine.restype = None
        routine.argtypes = [ctypes.c_int64, ctype, ctypes.c_void_p, ctypes.c_int64,
                            ctypes.c_void_p, ctypes.c_int64]
        axpy[np.dtype(dtype)] = routine
        gemm[np.dtype(dtype)] = gemm_type((f"scipy_cblas_{prefix}gemm64_", library))
        gemv[np.dtype(dtype)] = gemv_type((f"scipy_cblas_{prefix}gemv64_", library))
    return Routines(axpy, gemm, gemv)


def _agrees(routines: Routines) -> bool:
    """Whether each routine computes what numpy does on small arrays (to rounding): ``y + a·x``,
    ``a @ b.T`` (one operand transposed, as the compiled loops call it), and ``b @ x``, ``bᵀ @ y``
    (both ways the loops call ``gemv``)."""
    for dtype, routine in routines.axpy.items():
        x = np.linspace(-1.0, 1.0, 37, dtype=dtype)
        y = np.linspace(2.0, -3.0, 37, dtype=dtype)
        expected = y.astype(np.float64) - 0.25 * x.astype(np.float64)
        routine(x.size, -0.25, x.ctypes.data, 1, y.ctypes.data, 1)
        if not np.allclose(y, expected, rtol=0, atol=8 * np.finfo(dtype).eps):
            return False
    for dtype, routine in routines.gemm.items():
        a = np.linspace(-1.0, 1.0, 15, dtype=dtype).reshape(3, 5)
        b = np.linspace(2.0, -3.0, 20, dtype=dtype).reshape(4, 5)
        c = np.full((3, 4), np.nan, dtype=dtype)
        routine(ROW_MAJOR, NO_TRANS, TRANS, 3, 4, 5, 1.0, a.ctypes.data, 5, b.ctypes.data, 5,
                0.0, c.ctypes.data, 4)
        expected = a.astype(np.float64) @ b.astype(np.float64).T
        if not np.allclose(c, expected, rtol=0, atol=16 * np.finfo(dtype).eps):
            return False
    for dtype, routine in routines.gemv.items():
        b = np.linspace(2.0, -3.0, 20, dtype=dtype).reshape(4, 5)
        for trans, x in ((NO_TRANS, np.linspace(-1.0, 1.0, 5, dtype=dtype)),
                         (TRANS, np.linspace(1.0, -2.0, 4, dtype=dtype))):
            y = np.full(9 - x.size, np.nan, dtype=dtype)
            routine(ROW_MAJOR, trans, 4, 5, 1.0, b.ctypes.data, 5, x.ctypes.data, 1, 0.0,
                    y.ctypes.data, 1)
            wide = b.astype(np.float64)
            expected = (wide if trans == NO_TRANS else wide.T) @ x.astype(np.float64)
            if not np.allclose(y, expected, rtol=0, atol=16 * np.finfo(dtype).eps):
                return False
    return True


@functools.cache
def _routines() -> Routines:
    """The checked routines by dtype; empty when numpy bundles no such library."""
    for path in _library_paths():
        try:
            routines = _load(path)
        except (OSError, AttributeError):  # not loadable here, or without these symbols
            continue
        if _agrees(routines):
            return routines
    return Routines({}, {}, {})


def available() -> bool:
    """Whether numpy's bundled OpenBLAS is there (and passed its check)."""
    return bool(_routines().axpy)


def gemm(dtype: Any) -> Any:
    """numpy's ``cblas_sgemm`` or ``cblas_dgemm`` for ``dtype`` as a ctypes function, for
    compiled code to call (see ``GEMM``); None where numpy bundles no OpenBLAS."""
    return _routines().gemm.get(np.dtype(dtype))


def gemv(dtype: Any) -> Any:
    """numpy's ``cblas_sgemv`` or ``cblas_dgemv`` for ``dtype`` as a ctypes function, for
    compiled code to call (see ``GEMV``); None where numpy bundles no OpenBLAS."""
    return _routines().gemv.get(np.dtype(dtype))


@functools.cache
def addresses(dtype: Any) -> tuple[int, int]:
    """The addresses of ``gemm(dtype)`` and ``gemv(dtype)`` as integers, for compiled code to
    call (``_numba_blas``: an integer argument costs numba's dispatcher far less than a ctypes
    function). ``RuntimeError`` where either is missing (``numba_lstm.unavailable`` says so
    first), never an address 0 for compiled code to jump to; a refusal is not cached."""
    routines = (gemm(dtype), gemv(dtype))
    if None in routines:
        raise RuntimeError(f"numpy bundles no OpenBLAS gemm/gemv for {dtype} here")
    return tuple(ctypes.cast(r, ctypes.c_void_p).value for r in routines)  # type: ignore[return-value]


def axpy(a: float, x: Any, y: Any) -> bool:
    """``y += a·x`` in place by BLAS and True, when the library is there and ``x``, ``y`` are
    C-contiguous, aligned numpy arrays of one shape and of dtype float32 or float64, ``y``
    writeable and not overlapping ``x`` (numpy buffers an overlap, BLAS would not); otherwise
    False, and ``y`` is untouched."""
    call = axpy_call(x, y)
    if call is None:
        return False
    call(a)
    return True


def axpy_call(x: Any, y: Any) -> Callable[[float], None] | None:
    """``axpy(a, x, y)`` as ``call(a)``, checked and its addresses found once, or None where
    ``axpy`` declines: for a caller that updates the same arrays again and again, keeps them
    alive and checks that they are still writeable (``held_update``)."""
    routine = _routines().axpy.get(y.dtype) if type(y) is np.ndarray else None
    if routine is None or type(x) is not np.ndarray or (
        x.dtype != y.dtype or x.shape != y.shape or not y.flags.writeable
        or not (x.flags.c_contiguous and y.flags.c_contiguous)
        or not (x.flags.aligned and y.flags.aligned) or np.may_share_memory(x, y)
    ):
        return None
    size, x_at, y_at = y.size, x.ctypes.data, y.ctypes.data
    return lambda a: routine(size, a, x_at, 1, y_at, 1)
