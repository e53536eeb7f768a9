"""The matrix-product floor of a standard cell's step (``cells/standard-lstm-80x80-batch-32``,
``cells/gru-80x80-batch-32``: one layer of 80 over 50 steps at batch 32, forwards and back):
the time numpy's BLAS takes for the step's products alone, at their shapes, on one thread,
next to dualtape's whole step and torch's (when installed), in turns.

    python bench/cell_floor.py [--cell StandardLSTM|GRU] [--rounds 7]

The products of one step, ``g`` gates (4 for StandardLSTM, 3 for GRU), ``rows = T x B``: the
input projection ``xs Wᵀ`` (rows x 80 by 80 x 80g); per time step, forwards and back, the
recurrent product (32 x 80 by 80 x 80g, ``Uᵀ`` kept in C order as the loops keep it, and
back 32 x 80g by 80g x 80); the
weight gradients ``dᵀ xs`` and ``dᵀ h`` (80g x rows by rows x 80, twice); the input gradient
``d W`` (rows x 80g by 80g x 80). Their sum is what no change to the code around them can
beat on this BLAS: a target below it is a finding.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np
from threadpoolctl import threadpool_limits

import dualtape as dt
from dualtape.benchmarks import cells
from dualtape.benchmarks.workloads import WORKLOADS

STEPS, BATCH, SIZE = 50, 32, 80


def products(gates: int) -> list[tuple[str, Callable[[], object], int]]:
    """``(what, call, times per step)`` for each product of one step, float32."""
    rng = np.random.default_rng(0)

    def draw(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32)

    rows, wide = STEPS * BATCH, gates * SIZE
    xs, W, d, h = draw(rows, SIZE), draw(wide, SIZE), draw(rows, wide), draw(BATCH, SIZE)
    U, dstep, out = draw(wide, SIZE), draw(BATCH, wide), np.empty((wide, SIZE), np.float32)
    U_t = np.ascontiguousarray(U.T)  # as the compiled loops keep it: OpenBLAS's product with
    # a transposed view took twice as long at this shape (30 against 15.5 µs, AMD EPYC Zen 4)
    return [("projection xs Wᵀ", lambda: xs @ W.T, 1),
            ("recurrent h Uᵀ, per step", lambda: h @ U_t, STEPS),
            ("recurrent d U, per step", lambda: dstep @ U, STEPS),
            ("weight gradient dᵀ xs (W and U)", lambda: np.matmul(d.T, xs, out=out), 2),
            ("input gradient d W", lambda: d @ W, 1)]


def median_ms(call: Callable[[], object], number: int = 20) -> float:
    """One sample: ms per call over ``number`` calls."""
    start = time.perf_counter()
    for _ in range(number):
        call()
    return (time.perf_counter() - start) / number * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cell", choices=("StandardLSTM", "GRU"), default="StandardLSTM")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    key = "standard-lstm" if args.cell == "StandardLSTM" else "gru"
    workload = next(w for w in WORKLOADS if w.key == f"cells/{key}-80x80-batch-32")
    data = cells.host_data(workload, "float32", 1)
    steps = {"dualtape": cells.prepare(dt.backend.resolve_backend("numpy"), data, args.cell)}
    try:
        steps["torch"] = cells.torch_step(data, args.cell)
    except ImportError:
        pass
    shapes = products(4 if args.cell == "StandardLSTM" else 3)
    samples: dict[str, list[float]] = {name: [] for name, _, _ in shapes} | {
        name: [] for name in steps}
    with threadpool_limits(1):
        if "torch" in steps:
            import torch

            torch.set_num_threads(1)
        for _ in range(args.rounds):
            for name, call, _ in shapes:
                samples[name].append(median_ms(call))
            for name, step in steps.items():
                samples[name].append(median_ms(step, 5))
    floor = 0.0
    for name, _, times in shapes:
        ms = statistics.median(samples[name]) * times
        floor += ms
        print(f"{name:34s} x{times:<3d} {ms:7.3f} ms")
    print(f"{'products in all (the floor)':39s} {floor:7.3f} ms")
    for name in steps:
        ms = statistics.median(samples[name])
        print(f"{name + ' step':39s} {ms:7.3f} ms  (floor / step {floor / ms:.2f})")


if __name__ == "__main__":
    main()
