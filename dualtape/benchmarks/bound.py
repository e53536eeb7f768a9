"""The structural bound of a training call: the matrix products no LSTM implementation avoids.

For each LSTM layer of a ``train`` workload, per time step the two recurrent products the
recurrence runs through, with the f and i rows of ``U`` (2o × o): ``c U_fiᵀ`` forward and
``d_fi U_fi`` backward, which depend on the previous step and so run one step at a time; and
once per call, as whole-sequence matrix products, the input projection, the output gate's
``c U_oᵀ`` and, for the steps after the first, ``da_o U_o`` (neither feeds the next
step's gates), the gradients of ``W`` and ``U`` and,
except for the first layer, the gradient of the layer's input (at one row, T = 1 and batch 1,
the gradients are outer products that need not be written: there, where the compiled loops
run, each weight's rank-1 update in place, compiled; else outer products). Each layer's
products read one ``W`` and one ``U``, as an implementation's do. Elementwise work, the update
and all interpreter work count as free: the per-step products run in one compiled call per layer
(``numba_lstm.recurrent_products``, the compiled loops' own forms), or, where the compiled
loops do not run, one numpy call each (then the bound includes the interpreter's time between
them, as the ufunc loop does). The runner times exactly these products, on numpy, in the
benchmark's interleaved rounds, so "measured / bound" compares times taken under the same
conditions.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from ..kernels import numba_descent, numba_lstm

LABEL = "structural-bound"


class BoundRunner:
    """A reference row: the structural bound of each ``train`` workload (numpy, host)."""

    label = LABEL
    reference = True

    def prepare(self, workload: Any, dtype: str) -> Callable[[], None] | None:
        """The bound's products for ``workload``, or None for a workload that is not training."""
        if workload.op != "train":
            return None
        data = workload.host_data(dtype)
        rng = np.random.default_rng(0)
        steps, batch = data["xs"].shape[:2]
        calls = [_layer(rng, dtype, steps, batch, params["W"].shape, input_grad=k > 0)
                 for k, params in enumerate(data["params"])]

        def run() -> None:
            for call in calls:
                call()

        return run

    def synchronize(self) -> None:
        """Nothing to wait for on the host."""


def _product(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    """``out = a b``; of inner size 1 (a gradient of one row: T = 1, batch 1) as the outer
    product it is, through ``einsum``: numpy's matmul there took 7x as long for the seed
    network's 1536 x 512 ``U``, so the bound was no floor at one row."""
    if a.shape[1] == 1:
        np.einsum("i,j->ij", a[:, 0], b[0], out=out)
    else:
        np.matmul(a, b, out=out)


def _layer(rng: np.random.Generator, dtype: str, steps: int, batch: int,
           shape: tuple[int, int], input_grad: bool) -> Callable[[], None]:
    """The bound's products of one layer whose ``W`` has ``shape`` (4o, i), as one call."""
    (n4, n_in), rows = shape, steps * batch
    n = n4 // 4

    def draw(*shape: int) -> np.ndarray:
        return rng.uniform(-1, 1, shape).astype(dtype)

    W, U, b = draw(4 * n, n_in), draw(3 * n, n), draw(4 * n)
    xs, cells, d = draw(rows, n_in), draw(rows, n), draw(rows, 4 * n)
    U_o = U[2 * n :]
    products = [(xs, W.T, np.empty((rows, 4 * n), dtype)),
                (cells, U_o.T, np.empty((rows, n), dtype))]
    if steps > 1:  # the output gate's product back feeds the steps after the first only
        products.append((d[batch:, 2 * n : 3 * n], U_o, np.empty((rows - batch, n), dtype)))
    update: Callable[[], None] | None = None
    if rows == 1 and numba_lstm.unavailable() is None:
        blocks = (np.ascontiguousarray(d[:, : 2 * n]), np.ascontiguousarray(d[:, 2 * n : 3 * n]),
                  np.ascontiguousarray(d[:, 3 * n :]))
        dxs = np.empty((1, n_in), dtype) if input_grad else None
        update = functools.partial(numba_descent.descend, W, U, b, xs, cells, blocks, dxs, 0.0)
    else:
        products += [(d.T, xs, np.empty((4 * n, n_in), dtype)),
                     (d[:, : 3 * n].T, cells, np.empty((3 * n, n), dtype))]
        if input_grad:
            products.append((d, W, np.empty((rows, n_in), dtype)))
    recurrence = _step_products(U, batch, steps)

    def run() -> None:
        for a, w, out in products:
            _product(a, w, out)
        recurrence()
        if update is not None:
            update()

    return run


def _step_products(U: np.ndarray, batch: int, steps: int) -> Callable[[], None]:
    """The per-step products with ``U``'s f and i rows, as one call."""
    if numba_lstm.unavailable() is None:
        return numba_lstm.recurrent_products(U, steps, batch)
    n = U.shape[1]
    U_fi = U[: 2 * n]
    c, d = np.ones((batch, n), U.dtype), np.ones((batch, 2 * n), U.dtype)
    forward = (c, U_fi.T, np.empty((batch, 2 * n), dtype=U.dtype))
    backward = (d, U_fi, np.empty((batch, n), dtype=U.dtype))
    products = [forward] * steps + [backward] * (steps - 1)

    def run() -> None:
        for a, w, out in products:
            np.matmul(a, w, out=out)

    return run
