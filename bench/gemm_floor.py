"""The BLAS floor of the main job: numpy's (OpenBLAS) and torch's (MKL on x86) float32 matrix
products at the shapes of one train-text step (LSTM 80 -> 80, one-hot 57, batch 32 x 50), on
one thread. Per shape the two libraries take turns, ``ROUNDS`` samples of ``NUMBER`` calls
each, the one that goes first alternating, so drift in the shared machine's speed hits both.

    python bench/gemm_floor.py

Prints each product's median µs and GFLOP/s in both libraries and numpy's time over torch's: the
part of the main job's gap to ``torch.nn.LSTM`` that no change to dualtape's own code reaches.
Needs torch.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import torch
from threadpoolctl import threadpool_limits

# (what it is, (rows, inner) of the left factor, (inner, columns) of the right; transposed
# left: the factor is a transposed view, as a weight gradient's is)
SHAPES = [
    ("projection xs @ W.T", (1600, 80), (80, 320), False),
    ("weight gradient d.T @ xs", (320, 1600), (1600, 80), True),
    ("input gradient d @ W", (1600, 320), (320, 80), False),
    ("one step of the loop", (32, 80), (80, 160), False),
    ("one-hot projection", (1600, 57), (57, 320), False),
    ("top layer", (1600, 80), (80, 57), False),
]


ROUNDS, NUMBER = 15, 20


def interleaved_micros(first: Callable[[], object], second: Callable[[], object]
                       ) -> tuple[float, float]:
    """Median µs per call of ``first`` and of ``second``, sampled in turns after a warm-up."""
    runs = (first, second)
    samples: tuple[list[float], list[float]] = ([], [])
    for run in runs:
        for _ in range(NUMBER):
            run()
    for r in range(ROUNDS):
        for k in (0, 1) if r % 2 == 0 else (1, 0):
            start = time.perf_counter()
            for _ in range(NUMBER):
                runs[k]()
            samples[k].append((time.perf_counter() - start) / NUMBER * 1e6)
    return float(np.median(samples[0])), float(np.median(samples[1]))


def main() -> None:
    rng = np.random.default_rng(0)
    torch.set_num_threads(1)
    with threadpool_limits(1):
        for name, (m, k), (_, n), transposed in SHAPES:
            a = (rng.standard_normal((k, m)).T if transposed
                 else rng.standard_normal((m, k))).astype(np.float32)
            b = rng.standard_normal((k, n)).astype(np.float32)
            c = np.empty((m, n), np.float32)
            ta = torch.from_numpy(a.T.copy()).T if transposed else torch.from_numpy(a.copy())
            tb, tc = torch.from_numpy(b), torch.empty(m, n)
            ours, theirs = interleaved_micros(lambda a=a, b=b, c=c: np.matmul(a, b, out=c),
                                              lambda ta=ta, tb=tb, tc=tc: torch.mm(ta, tb,
                                                                                  out=tc))
            flop = 2 * m * k * n / 1e3
            print(f"{name:26s} ({m}x{k} @ {k}x{n}): numpy {ours:7.1f} µs "
                  f"({flop / ours:5.1f} GFLOP/s), torch {theirs:7.1f} µs "
                  f"({flop / theirs:5.1f} GFLOP/s), numpy/torch {ours / theirs:.2f}")


if __name__ == "__main__":
    main()
