"""The optimizers' updates compiled for the CPU: one pass over memory per parameter, where
the ufunc code (``optim.py``) makes 4 (SGD) to 10 (Adam) passes through a scratch buffer; one
call per parameter (``sgd``, ``adam``) or per ``BATCH`` parameters (``sgd_many``,
``adam_many``, over ``batches``). The same bits as that code (``_numba_optim`` says why; the
self-check and ``tests/test_optim_compiled.py`` compare them), numpy arrays only, where the
compiled LSTM loops run (``kernels.optimizer_loops`` chooses).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

Array = Any
BATCH = 8
"""Parameters per call of ``sgd_many``/``adam_many``: a fixed length gives one compiled
signature per dtype whatever the network (``batches`` pads the last one)."""


def sgd(w: Array, g: Array, m: Array | None, rate: float, momentum: float,
        regulariser: float) -> None:
    """``SGD``'s update of ``w`` (and its velocity ``m``, None without momentum) by gradient
    ``g`` in place."""
    flat = _flat(w, g) if m is None else _flat(w, g, m)
    _compiled().sgd(flat[0], flat[1], flat[-1], *_sgd_scalars(w, rate, momentum, regulariser),
                    m is not None, regulariser != 0)


def sgd_many(batch: tuple[tuple[Array, ...], ...], rate: float, momentum: float,
             regulariser: float, has_momentum: bool) -> None:
    """``sgd`` of every parameter of ``batch`` (``batches`` of weights, gradients and
    velocities; the weights again in place of the velocities without momentum)."""
    ws, gs, ms = batch
    _compiled().sgd_many(ws, gs, ms, *_sgd_scalars(ws[0], rate, momentum, regulariser),
                         has_momentum, regulariser != 0)


def _sgd_scalars(like: Array, rate: float, momentum: float,
                 regulariser: float) -> tuple[Any, Any, Any]:
    """``−rate``, ``momentum`` and ``rate·regulariser`` in ``like``'s dtype."""
    one = like.dtype.type
    return one(-rate), one(momentum), one(rate * regulariser)


def adam(w: Array, g: Array, m: Array, v: Array, beta1: float, beta2: float, step: float,
         eps: float) -> None:
    """``Adam``'s update of ``w`` and its moments ``m``, ``v`` by gradient ``g`` in place, with
    the step size and ``eps`` its bias corrections give (``Adam._corrections``)."""
    _compiled().adam(*_flat(w, g, m, v), *_adam_scalars(w, beta1, beta2, step, eps))


def adam_many(batch: tuple[tuple[Array, ...], ...], beta1: float, beta2: float, step: float,
              eps: float) -> None:
    """``adam`` of every parameter of ``batch`` (``batches`` of weights, gradients, first and
    second moments)."""
    ws, gs, ms, vs = batch
    _compiled().adam_many(ws, gs, ms, vs, *_adam_scalars(ws[0], beta1, beta2, step, eps))


def _adam_scalars(like: Array, beta1: float, beta2: float, step: float,
                  eps: float) -> tuple[Any, ...]:
    """``β1, 1−β1, β2, 1−β2``, the step size and ``eps`` in ``like``'s dtype."""
    one = like.dtype.type
    return one(beta1), one(1.0 - beta1), one(beta2), one(1.0 - beta2), one(step), one(eps)


def batches(columns: list[list[Array]]) -> list[tuple[tuple[Array, ...], ...]]:
    """Parameters in batches of ``BATCH``: ``columns`` lists, per operand (weights,
    gradients, each slot), one array per parameter; each batch is a tuple of one tuple of flat
    views per operand, the last padded with empty arrays. ``ValueError`` as ``_flat`` unless
    every array is also aligned and writeable (one compiled type for all)."""
    rows = [_flat(*arrays) for arrays in zip(*columns, strict=True)]
    if not rows:
        return []
    for row in rows:
        if not all(a.flags.aligned and a.flags.writeable for a in row):
            raise ValueError("numba_optim: operands must be aligned and writeable")
        if row[0].dtype != rows[0][0].dtype:
            raise ValueError(f"numba_optim: one dtype per batch, got {rows[0][0].dtype} and "
                             f"{row[0].dtype}")
    found = []
    for start in range(0, len(rows), BATCH):
        part = rows[start:start + BATCH]
        part += [[np.empty(0, rows[0][0].dtype)] * len(columns)] * (BATCH - len(part))
        found.append(tuple(tuple(row[c] for row in part) for c in range(len(columns))))
    return found


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
