"""The structural bound of a training call: the matrix products no LSTM implementation avoids.

For each LSTM layer of a ``train`` workload, per time step the two recurrent matrix-vector
products with the whole ``U`` (3o × o), ``c Uᵀ`` forward and ``da U`` backward, which depend on
the previous step and so run one step at a time; and once per call, as whole-sequence matrix
products, the input projection, the gradients of ``W`` and ``U`` and, except for the first
layer, the gradient of the layer's input (at one row, T = 1 and batch 1, the gradients are
outer products, timed as such). Elementwise work, the update and all interpreter work count as
free. The runner times exactly these products, on numpy, in the benchmark's
interleaved rounds, so "measured / bound" compares times taken under the same conditions.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

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
        products = []
        for k, params in enumerate(data["params"]):
            n4, n_in = params["W"].shape
            n = n4 // 4
            products += _sequence_products(rng, dtype, steps, batch, n_in, n, input_grad=k > 0)
            products += _step_products(rng, dtype, batch, n, steps)

        def run() -> None:
            for a, b, out in products:
                _product(a, b, out)

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


def _operands(rng: np.random.Generator, dtype: str, m: int, k: int, n: int) -> tuple:
    a, b = rng.uniform(-1, 1, (m, k)).astype(dtype), rng.uniform(-1, 1, (k, n)).astype(dtype)
    return a, b, np.empty((m, n), dtype=dtype)


def _sequence_products(rng: np.random.Generator, dtype: str, steps: int, batch: int, n_in: int,
                       n: int, input_grad: bool) -> list[tuple]:
    rows = steps * batch
    shapes = [(rows, n_in, 4 * n), (4 * n, rows, n_in), (3 * n, rows, n)]
    if input_grad:
        shapes.append((rows, 4 * n, n_in))
    return [_operands(rng, dtype, *s) for s in shapes]


def _step_products(rng: np.random.Generator, dtype: str, batch: int, n: int,
                   steps: int) -> list[tuple]:
    U = rng.uniform(-1, 1, (3 * n, n)).astype(dtype)
    c, da = (rng.uniform(-1, 1, (batch, k)).astype(dtype) for k in (n, 3 * n))
    forward = (c, U.T, np.empty((batch, 3 * n), dtype=dtype))
    backward = (da, U, np.empty((batch, n), dtype=dtype))
    return [forward, backward] * steps
