"""BLAS ``axpy`` (``y += a·x`` in one pass) for numpy arrays, from the OpenBLAS numpy bundles.

numpy has no fused multiply-add: ``w − rate·g`` takes two ufunc passes, a product into scratch
and a sum. numpy's wheels (2.0 and later, from PyPI) bundle scipy-openblas64; this module calls
its ``cblas_saxpy``/``cblas_daxpy`` through ctypes. It is the library numpy itself loaded, so
the update runs on numpy's own BLAS threads: a second BLAS (SciPy's, say) would bring a second
thread pool, and on 2 cores training ran 2.5x slower while the two pools spun. The library is
found by its file name beside numpy and checked against numpy on a small array at first use;
where it is not there (conda's numpy, MKL, Accelerate) ``axpy`` declines and SGD keeps numpy's
two passes. BLAS rounds ``a·x + y`` once where numpy rounds the product and the sum, so results
agree with numpy to one rounding, not bit for bit.
"""

from __future__ import annotations

import ctypes
import functools
import glob
import os
from collections.abc import Callable
from typing import Any

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


def _load(path: str) -> dict[np.dtype, Axpy]:
    """The ILP64 ``axpy`` routines of the library at ``path`` (64-bit sizes, as the ``64_``
    suffix of their names says)."""
    library = ctypes.CDLL(path)
    routines = {}
    for dtype, name, ctype in ((np.float32, "saxpy", ctypes.c_float),
                               (np.float64, "daxpy", ctypes.c_double)):
        routine = getattr(library, f"scipy_cblas_{name}64_")
        routine.restype = None
        routine.argtypes = [ctypes.c_int64, ctype, ctypes.c_void_p, ctypes.c_int64,
                            ctypes.c_void_p, ctypes.c_int64]
        routines[np.dtype(dtype)] = routine
    return routines


def _agrees(routines: dict[np.dtype, Axpy]) -> bool:
    """Whether each routine computes ``y + a·x`` on a small array as numpy does (to rounding)."""
    for dtype, routine in routines.items():
        x = np.linspace(-1.0, 1.0, 37, dtype=dtype)
        y = np.linspace(2.0, -3.0, 37, dtype=dtype)
        expected = y.astype(np.float64) - 0.25 * x.astype(np.float64)
        routine(x.size, -0.25, x.ctypes.data, 1, y.ctypes.data, 1)
        if not np.allclose(y, expected, rtol=0, atol=8 * np.finfo(dtype).eps):
            return False
    return True


@functools.cache
def _routines() -> dict[np.dtype, Axpy]:
    """The checked ``axpy`` routines by dtype; empty when numpy bundles no such library."""
    for path in _library_paths():
        try:
            routines = _load(path)
        except (OSError, AttributeError):  # not loadable here, or without these symbols
            continue
        if _agrees(routines):
            return routines
    return {}


def available() -> bool:
    """Whether numpy's bundled OpenBLAS is there (and passed its check) for ``axpy``."""
    return bool(_routines())


def axpy(a: float, x: Any, y: Any) -> bool:
    """``y += a·x`` in place by BLAS and True, when the library is there and ``x``, ``y`` are
    C-contiguous, aligned numpy arrays of one shape and of dtype float32 or float64, ``y``
    writeable and not overlapping ``x`` (numpy buffers an overlap, BLAS would not); otherwise
    False, and ``y`` is untouched."""
    routine = _routines().get(y.dtype) if type(y) is np.ndarray else None
    if routine is None or type(x) is not np.ndarray or (
        x.dtype != y.dtype or x.shape != y.shape or not y.flags.writeable
        or not (x.flags.c_contiguous and y.flags.c_contiguous)
        or not (x.flags.aligned and y.flags.aligned) or np.may_share_memory(x, y)
    ):
        return False
    routine(y.size, a, x.ctypes.data, 1, y.ctypes.data, 1)
    return True
