"""BLAS ``axpy`` (``y += a·x`` in one pass) for numpy arrays, through SciPy when it is installed.

numpy has no fused multiply-add: ``w − rate·g`` takes two ufunc passes, a product into scratch
and a sum. Plain SGD uses one BLAS pass instead for parameters of over ``optim.CHUNK``
elements (below that the call costs more than the pass it saves): the update of the seed
network's 0.96M float64 parameters inside a T=1 training call takes 0.6× the time (one
thread). BLAS rounds ``a·x + y`` once (a fused multiply-add) where numpy rounds the product and
the sum, so results agree with numpy to one rounding, not bit for bit. SciPy is optional
(``pip install "dualtape[blas]"``); without it, or for arrays BLAS cannot update in place,
``axpy`` does nothing and says so. SciPy is imported at the first call (about 0.3 s once).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np


@functools.cache
def _routines() -> dict[np.dtype, Any]:
    """SciPy's ``saxpy``/``daxpy`` by dtype; empty without SciPy."""
    try:
        from scipy.linalg import blas
    except ImportError:
        return {}
    return {np.dtype(np.float32): blas.saxpy, np.dtype(np.float64): blas.daxpy}


def available() -> bool:
    """Whether SciPy's BLAS is there for ``axpy``."""
    return bool(_routines())


def axpy(a: float, x: np.ndarray, y: np.ndarray) -> bool:
    """``y += a·x`` in place by BLAS and True, when SciPy is installed and ``x``, ``y`` are
    C-contiguous, aligned numpy arrays of one shape and of dtype float32 or float64, ``y``
    writeable and not overlapping ``x`` (numpy buffers an overlap, BLAS would not); otherwise
    False, and ``y`` is untouched."""
    routine = _routines().get(y.dtype)
    if routine is None or not all(type(v) is np.ndarray for v in (x, y)) or (
        x.dtype != y.dtype or x.shape != y.shape or not y.flags.writeable
        or not (x.flags.c_contiguous and y.flags.c_contiguous)
        or not (x.flags.aligned and y.flags.aligned) or np.may_share_memory(x, y)
    ):
        return False
    flat = y.reshape(-1)
    result = routine(x.reshape(-1), flat, a=a)
    if result.ctypes.data != flat.ctypes.data:  # SciPy documents y's storage; make sure
        raise RuntimeError("dualtape: SciPy's axpy did not update its argument in place")
    return True
