"""The LSTM's time loops compiled for the CPU by numba: each direction is one call.

``NumbaLSTM.forward_sequence`` and ``backward_sequence`` run a whole sequence's recurrence
without the interpreter: per step the recurrent product through numpy's own ``cblas_?gemm``
(``cblas_?gemv`` at batch 1; ``blas.gemm``, ``blas.gemv``, called from compiled code, on numpy's
BLAS threads), then the pointwise update, which LLVM turns into SIMD code. numba's ``exp`` is
a scalar libm call that no loop can vectorize (2.7 ns a value here, against numpy's 0.3), so σ
uses ``exp`` written out: Cephes's range reduction ``x = n·ln 2 + r`` with its polynomial
(float32) or Padé form (float64) for ``exp(r)`` and ``2ⁿ`` built from its exponent bits; NaN
stays NaN and the result is within 2 ulp of numpy's (``tests/test_numba_lstm.py``). The passes
and the ``U_o`` products around the loops run inside the same call, in ``lstm_sequence``'s
order of operations (the same bits as its steps called one by one from Python).
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
from collections.abc import Callable
from typing import Any

import numpy as np

from .. import spare
from . import blas
from .lstm_sequence import backward_sequence, forward_buffers, forward_sequence

Array = Any
COMPILED = ("forward_sequence", "backward_sequence")
"""The compiled functions of ``_numba_lstm`` called from Python (the others run inside them;
Python reads ``layer_scratch``'s sizes from its ``py_func``, uncompiled)."""


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
    """``Cell`` whose forward and backward sequences are one compiled call each (numpy arrays,
    float32/float64)."""

    def forward_sequence(self, mod: Any, U: Array, c0: Array, projected: Array
                         ) -> tuple[Array, Array, Array]:
        """``lstm_sequence.forward_sequence`` (its result and contract): numpy's tanh of the
        candidates, then the loop, the ``U_o`` product and the output gate in one compiled
        call."""
        U = _operands(U, projected)  # checked before anything is made
        if c0.dtype != projected.dtype:
            raise ValueError(f"NumbaLSTM: the state must be {projected.dtype} like the "
                             f"projections, got {c0.dtype}")
        batch, n = projected.shape[1], projected.shape[2] // 4
        cells, gates, r = forward_buffers(np, c0, projected)  # new arrays of that dtype
        hs = spare.empty(cells[1:].shape, cells.dtype)
        U_fi_t = U if batch == 1 else np.ascontiguousarray(U[: 2 * n].T)
        _compiled().forward_sequence(*blas.addresses(U.dtype), U, U_fi_t,
                                     projected, r, cells, gates, hs, U.dtype.type(1))
        return cells, gates, hs

    def backward_sequence(self, mod: Any, U: Array, cells: Array, gates: Array, dhs: Array,
                          dc_last: Array, need_dc0: bool = True
                          ) -> tuple[tuple[Array, Array, Array], Array | None]:
        """``lstm_sequence.backward_sequence`` (its result and contract) in one compiled call:
        the passes, product and loop that take about 15 calls from Python one by one (for the
        tiny network's layers 10 µs of 30 each)."""
        n = gates.shape[-1] // 4
        dhs = np.ascontiguousarray(dhs)  # the layer above may hand a strided view
        shape, dtype = cells[1:].shape, cells.dtype
        q, da_o = spare.empty(shape, dtype), spare.empty(shape, dtype)
        dc = spare.empty(shape, dtype)
        dfi = spare.empty(gates.shape[:-1] + (2 * n,), dtype)
        carry = np.empty_like(cells[0])  # C order, whatever the layout of dc_last
        carry[...] = dc_last
        rec, carried_0 = np.empty_like(carry), np.empty_like(carry)
        U = _operands(U, gates, cells, dhs)  # the others are new arrays of cells' dtype
        _compiled().backward_sequence(*blas.addresses(U.dtype), U, gates, cells,
                                      dhs, q, da_o, dfi, dc, carry, rec, carried_0,
                                      bool(need_dc0), U.dtype.type(1))
        return (dfi, da_o, q), (carry if need_dc0 else None)


def recurrent_products(U: Array, steps: int, batch: int) -> Callable[[], None]:
    """A call of the compiled loops' per-step products alone (``_numba_lstm.
    recurrent_products``: ``U_fi`` forwards and back at every step, in the loops' forms) for
    ``steps`` steps of ``batch`` rows, on operands of ``U``'s dtype (C-contiguous (3o, o),
    float32 or float64) made here once; for the structural bound."""
    _check(U)
    n = U.shape[1]
    cells = np.random.default_rng(0).uniform(-1, 1, (steps + 1, batch, n)).astype(U.dtype)
    dfi = np.random.default_rng(1).uniform(-1, 1, (steps, batch, 2 * n)).astype(U.dtype)
    r, rec = np.empty((batch, 2 * n), U.dtype), np.empty((batch, n), U.dtype)
    U_fi_t = np.ascontiguousarray(U[: 2 * n].T)
    addresses, one = blas.addresses(U.dtype), U.dtype.type(1)
    loops = _compiled()

    def run() -> None:
        loops.recurrent_products(*addresses, U, U_fi_t, cells, r, dfi, rec, one)

    return run


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


def layer_scratch(rows: int, batch: int, n: int) -> int:
    """``_numba_lstm.layer_scratch`` (the one home of a stack pass's per-layer scratch) run as
    Python: a size, with nothing compiled for it."""
    return _compiled().layer_scratch.py_func(rows, batch, n)


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
