"""The LSTM's time loops compiled for the CPU by numba: each direction is one call.

``NumbaLSTM.forward_loop`` and ``backward_loop`` run a whole sequence's recurrence without the
interpreter: per step the recurrent product through numpy's own ``cblas_?gemm`` (``cblas_?gemv``
at batch 1; ``blas.gemm``, ``blas.gemv``, called from compiled code, on numpy's BLAS threads),
then the pointwise update, which LLVM turns into SIMD code. numba's ``exp`` is a scalar libm
call that no loop can vectorize (2.7 ns a value here, against numpy's 0.3), so σ uses ``exp``
written out: Cephes's range reduction ``x = n·ln 2 + r`` with its polynomial (float32) or Padé
form (float64) for ``exp(r)`` and ``2ⁿ`` built from its exponent bits; NaN stays NaN and the
result is within 2 ulp of numpy's (``tests/test_numba_lstm.py``). The passes around the loops
(``output_gate``, ``gate_factors``, ``candidate_gradient``) are one compiled pass each.
Functions are compiled on first use for each dtype and cached on disk (numba's ``cache=True``:
beside this file, or in the user's cache folder when the install is read-only), so later
processes load them; ``numba_cache`` refuses a folder others could write to and rebuilds a
damaged cache.

Only numpy arrays, only where numba imports and numpy bundles OpenBLAS (``unavailable()``
says why not); ``kernels.sequence_path`` checks the loops against the generic code once per
dtype before using them.
"""

from __future__ import annotations

import functools
import importlib.util
import time
from typing import Any

import numpy as np

from . import blas

Array = Any
COMPILED = ("forward_loop", "backward_loop", "output_gate", "gate_factors", "candidate_gradient")
"""The names of the compiled functions in ``_numba_lstm``."""


def unavailable() -> str | None:
    """Why the compiled loops cannot run here, or None when they can."""
    if importlib.util.find_spec("numba") is None:
        return "numba is not installed (pip install 'dualtape[jit]')"
    try:
        _compiled()
    except Exception as exc:  # an llvmlite or numba that does not load on this machine
        return f"numba does not load here: {type(exc).__name__}: {exc}"
    if any(get(dtype) is None for get in (blas.gemm, blas.gemv)
           for dtype in ("float32", "float64")):
        return "this numpy bundles no OpenBLAS for compiled code to call (not a PyPI wheel)"
    return None


class NumbaLSTM:
    """``Cell`` whose two loops, and each pass around them, are one compiled call each (numpy
    arrays, float32/float64)."""

    def forward_loop(self, U_fi: Array, projected: Array, r: Array, cells: Array,
                     gates: Array) -> None:
        U_fi = _operands(U_fi, projected, r, cells, gates)
        U_fi_t = U_fi if cells.shape[1] == 1 else np.ascontiguousarray(U_fi.T)
        _compiled().forward_loop(blas.gemm(U_fi.dtype), blas.gemv(U_fi.dtype), U_fi, U_fi_t,
                                 projected, r, cells, gates, U_fi.dtype.type(1))

    def backward_loop(self, U_fi: Array, gates: Array, rec: Array, q: Array, carry: Array,
                      dfi: Array, dc: Array) -> None:
        U_fi = _operands(U_fi, gates, rec, q, carry, dfi, dc)
        _compiled().backward_loop(blas.gemm(U_fi.dtype), blas.gemv(U_fi.dtype), U_fi, gates,
                                  rec, q, carry, dfi, dc, U_fi.dtype.type(1))

    def output_gate(self, mod: Any, gates: Array, projected: Array, cells: Array) -> Array:
        hs = np.empty_like(cells[1:])
        _check(gates, projected, cells, hs)
        _compiled().output_gate(gates, projected, cells, hs, gates.dtype.type(1))
        return hs

    def gate_factors(self, mod: Any, gates: Array, cells: Array, dhs: Array
                     ) -> tuple[Array, Array, Array]:
        dhs = np.ascontiguousarray(dhs)  # the layer above may hand a strided view
        q, da_o = np.empty_like(cells[1:]), np.empty_like(cells[1:])
        dfi = np.empty_like(gates[..., : gates.shape[-1] // 2])
        _check(gates, cells, dhs, q, da_o, dfi)
        _compiled().gate_factors(gates, cells, dhs, q, da_o, dfi, gates.dtype.type(1))
        return q, da_o, dfi

    def candidate_gradient(self, mod: Any, gates: Array, dc: Array, out: Array) -> Array:
        _check(gates, dc, out)
        _compiled().candidate_gradient(gates, dc, out, gates.dtype.type(1))
        return out


def _operands(U_fi: Array, *buffers: Array) -> Array:
    """``U_fi`` (a numpy array of the buffers' dtype, any layout) in C order, a copy when it is
    not; ``ValueError`` for anything else, or for buffers ``_check`` refuses."""
    _check(*buffers)
    if type(U_fi) is not np.ndarray or U_fi.dtype != buffers[0].dtype:
        raise ValueError(f"NumbaLSTM: U must be a {buffers[0].dtype} numpy array, got "
                         f"{getattr(U_fi, 'dtype', type(U_fi).__name__)}")
    return np.ascontiguousarray(U_fi)


def _check(*buffers: Array) -> None:
    """``ValueError`` unless every buffer is a C-contiguous numpy array of the first one's
    dtype, float32 or float64: the compiled code indexes raw memory, and writes into them."""
    dtype = getattr(buffers[0], "dtype", None)
    for a in buffers:
        if type(a) is not np.ndarray:
            raise ValueError(f"NumbaLSTM: operands must be numpy arrays, got {type(a).__name__}")
        if a.dtype != dtype or not a.flags.c_contiguous:
            raise ValueError(f"NumbaLSTM: operands must be C-contiguous {dtype} arrays, got "
                             f"{a.dtype} with strides {a.strides}")
    if dtype not in (np.float32, np.float64):
        raise ValueError(f"NumbaLSTM: float32 or float64 only, got {dtype}")


def warm_up(dtype: Any) -> float:
    """Compile (or load from the cache) every function for ``dtype`` by running a one-step
    sequence forwards and back, compiled afresh if the disk cache is damaged
    (``numba_cache.checked``); the seconds it took."""
    from . import numba_cache
    from .lstm_sequence import backward_sequence, forward_sequence

    def one_step() -> None:
        n = 2
        U = np.random.default_rng(0).uniform(-1, 1, (3 * n, n)).astype(dtype)
        c0, cell = np.zeros((1, n), dtype), NumbaLSTM()
        cells, gates, hs = forward_sequence(np, cell, U, c0, np.zeros((1, 1, 4 * n), dtype))
        backward_sequence(np, cell, U, cells, gates, np.zeros_like(hs), c0)

    began, dtype = time.perf_counter(), np.dtype(dtype)
    numba_cache.checked("_numba_lstm", one_step)
    return time.perf_counter() - began


def loaded_from_cache() -> bool:
    """Whether every loop compiled so far in this process came from the disk cache."""
    return not any(sum(f.stats.cache_misses.values()) for f in _functions())


def version() -> str:
    """The numba version the loops are compiled with."""
    import numba

    return numba.__version__


@functools.cache
def _compiled() -> Any:
    """The compiled functions, by name (numba is imported here, on first use; ``numba_cache``
    refuses an unsafe disk cache folder before any is loaded)."""
    from . import numba_cache

    return numba_cache.load("_numba_lstm")


def _functions() -> tuple[Any, ...]:
    """Every compiled function, for the cache statistics."""
    loops = _compiled()
    return tuple(getattr(loops, name) for name in COMPILED)
