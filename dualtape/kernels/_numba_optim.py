"""The optimizers' updates compiled for the CPU behind ``numba_optim`` (imports numba).

Each function updates one parameter in one pass over flat (1-D, C-contiguous) arrays, in the
order of operations of the ufunc code in ``optim.py`` (``SGD._update_in_place``,
``Adam._update_in_place``), so it gives the same bits: every operation is an IEEE-rounded
multiply, add, divide or square root, none fused (numba contracts nothing into FMA without
``fastmath``), and the scalars come in the arrays' dtype. ``error_model="numpy"`` lets LLVM
vectorize the divide (Python's model checks each divisor for zero, which no SIMD loop can).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

Array = Any


@njit(cache=True, nogil=True, error_model="numpy")
def sgd(w: Array, g: Array, m: Array, minus_rate: Any, momentum: Any, decay: Any,
        has_momentum: bool, has_decay: bool) -> None:  # pragma: no cover - compiled
    """``step = momentum·m + (−rate)·g`` (only ``(−rate)·g`` without momentum; ``m`` then
    unused), kept in ``m``; ``w = (w + step) − decay·w`` (``w + step`` without decay)."""
    for k in range(w.size):
        step = g[k] * minus_rate
        if has_momentum:
            step = m[k] * momentum + step
            m[k] = step
        if has_decay:
            w[k] = (w[k] + step) - w[k] * decay
        else:
            w[k] = w[k] + step


@njit(cache=True, nogil=True, error_model="numpy")
def adam(w: Array, g: Array, m: Array, v: Array, beta1: Any, keep1: Any, beta2: Any,
         keep2: Any, step: Any, eps: Any) -> None:  # pragma: no cover - compiled
    """``m = β1·m + (1−β1)·g``; ``v = β2·v + ((1−β2)·g)·g``; ``w = w − (m/(√v + eps))·step``
    (``keep1``, ``keep2`` are ``1−β1``, ``1−β2``)."""
    for k in range(w.size):
        gk = g[k]
        mk = m[k] * beta1 + gk * keep1
        vk = v[k] * beta2 + (gk * keep2) * gk
        m[k] = mk
        v[k] = vk
        w[k] = w[k] - (mk / (np.sqrt(vk) + eps)) * step


@njit(cache=True, nogil=True, error_model="numpy")
def sgd_many(ws: Any, gs: Any, ms: Any, minus_rate: Any, momentum: Any, decay: Any,
             has_momentum: bool, has_decay: bool) -> None:  # pragma: no cover - compiled
    """``sgd`` of each parameter of the equal-length tuples ``ws``, ``gs``, ``ms``."""
    for j in range(len(ws)):
        sgd(ws[j], gs[j], ms[j], minus_rate, momentum, decay, has_momentum, has_decay)


@njit(cache=True, nogil=True, error_model="numpy")
def adam_many(ws: Any, gs: Any, ms: Any, vs: Any, beta1: Any, keep1: Any, beta2: Any,
              keep2: Any, step: Any, eps: Any) -> None:  # pragma: no cover - compiled
    """``adam`` of each parameter of the equal-length tuples ``ws``, ``gs``, ``ms``, ``vs``."""
    for j in range(len(ws)):
        adam(ws[j], gs[j], ms[j], vs[j], beta1, keep1, beta2, keep2, step, eps)
