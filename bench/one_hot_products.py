"""What the main job's one-hot input costs in matrix products, against the gather and the
scatter-add that ids would allow instead.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/one_hot_products.py [--rounds 300]

The main job (``text/char-model-80x80-batch-32``) feeds one-hot rows (50 × 32 of them, 57
symbols) to an LSTM of 80 units, whose input weights ``W`` are (320, 57). Its input projection
``onehot @ Wᵀ`` and weight gradient ``dᵀ @ onehot`` are products of 1600 × 57 × 320
multiply-adds each, at BLAS's peak, where all but one term in 57 is a zero. With the ids instead,
the projection is a row gather of ``Wᵀ`` (the same bits: one non-zero term per entry) and the
gradient a scatter-add of ``d``'s rows into the rows of the ids (the same terms, summed in row
order rather than in BLAS's blocks: not the same bits). One thread; medians of ``--rounds``
calls each, the four in turns; prints the CPU model.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np
from numba import njit
from threadpoolctl import threadpool_limits

from dualtape.benchmarks.report import cpu_model

ROWS, VOCAB, GATES = 50 * 32, 57, 4 * 80


@njit(cache=False)
def scatter_rows(d: np.ndarray, ids: np.ndarray, out: np.ndarray) -> None:  # pragma: no cover
    """``out[ids[r]] += d[r]`` for every row ``r``, in row order."""
    for r in range(d.shape[0]):
        row = out[ids[r]]
        for j in range(d.shape[1]):
            row[j] += d[r, j]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=300)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    ids = rng.integers(0, VOCAB, ROWS)
    onehot = np.zeros((ROWS, VOCAB), np.float32)
    onehot[np.arange(ROWS), ids] = 1
    W = rng.uniform(-1, 1, (GATES, VOCAB)).astype(np.float32)
    W_t = np.ascontiguousarray(W.T)
    d = rng.uniform(-1, 1, (ROWS, GATES)).astype(np.float32)
    grad = np.zeros((VOCAB, GATES), np.float32)

    def scatter() -> None:
        grad.fill(0)
        scatter_rows(d, ids, grad)

    cases: dict[str, Callable[[], object]] = {
        "projection, one-hot product": lambda: onehot @ W.T,
        "projection, row gather": lambda: W_t[ids],
        "weight gradient, one-hot product": lambda: d.T @ onehot,
        "weight gradient, compiled scatter-add": scatter,
    }
    times: dict[str, list[float]] = {name: [] for name in cases}
    with threadpool_limits(1):
        for call in cases.values():
            for _ in range(10):
                call()
        for _ in range(args.rounds):
            for name, call in cases.items():
                start = time.perf_counter()
                call()
                times[name].append(time.perf_counter() - start)
    assert np.array_equal(W_t[ids], onehot @ W.T)
    scatter()
    np.testing.assert_allclose(grad, (d.T @ onehot).T, rtol=1e-5, atol=1e-4)
    print(f"CPU: {cpu_model()}; float32, one thread, {ROWS} rows, {VOCAB} symbols, "
          f"{GATES} gate rows; medians of {args.rounds} calls")
    print("| operation | µs |\n| --- | ---: |")
    for name, sample in times.items():
        print(f"| {name} | {statistics.median(sample) * 1e6:.0f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
