"""The optimizers' updates compiled for the CPU: one call and one pass over memory per
parameter, where the ufunc code (``optim.py``) makes 4 (SGD) to 10 (Adam) passes through a
scratch buffer. The same bits as that code (``_numba_optim`` says why; the self-check and
``tests/test_optim_compiled.py`` compare them), numpy arrays only, where the compiled LSTM loops
run (``kernels.optimizer_loops`` chooses).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

Array = Any


def sgd(w: Array, g: Array, m: Array | None, rate: float, momentum: float,
        regulariser: float) -> None:
    """``SGD``'s update of ``w`` (and its velocity ``m``, None without momentum) by gradient
    ``g`` in place."""
    flat = _flat(w, g) if m is None else _flat(w, g, m)
    one = w.dtype.type
    _compiled().sgd(flat[0], flat[1], flat[-1], one(-rate), one(momentum),
                    one(rate * regulariser), m is not None, regulariser != 0)


def adam(w: Array, g: Array, m: Array, v: Array, beta1: float, beta2: float, step: float,
         eps: float) -> None:
    """``Adam``'s update of ``w`` and its moments ``m``, ``v`` by gradient ``g`` in place, with
    the step size and ``eps`` its bias corrections give (``Adam._corrections``)."""
    fw, fg, fm, fv = _flat(w, g, m, v)
    one = w.dtype.type
    _compiled().adam(fw, fg, fm, fv, one(beta1), one(1.0 - beta1), one(beta2), one(1.0 - beta2),
                     one(step), one(eps))


def _flat(*arrays: Array) -> list[Array]:
    """The arrays as 1-D views; ``ValueError`` unless all are C-contiguous numpy arrays of one
    size and of the first one's dtype, float32 or float64 (the compiled code indexes them)."""
    first = arrays[0]
    if type(first) is not np.ndarray or first.dtype not in (np.float32, np.float64):
        raise ValueError(f"numba_optim: float32 or float64 numpy arrays only, got "
                         f"{getattr(first, 'dtype', type(first).__name__)}")
    for a in arrays:
        if type(a) is not np.ndarray or a.dtype != first.dtype or a.size != first.size or (
                not a.flags.c_contiguous):
            raise ValueError(f"numba_optim: operands must be C-contiguous {first.dtype} arrays "
                             f"of {first.size} elements, got {getattr(a, 'dtype', type(a))} "
                             f"{getattr(a, 'shape', '')}")
    return [a.reshape(-1) for a in arrays]


@functools.cache
def _compiled() -> Any:
    """The compiled functions (numba imported here, on first use, the disk cache folder
    checked first: ``numba_cache.load``)."""
    from . import numba_cache

    return numba_cache.load("_numba_optim")
