"""Data-parallel steps on this machine, and the allreduce's share of them.

    mpiexec -n N python bench/mpi_scaling.py [--steps 40] [--threads 1]

Every rank trains with a ``DataParallel`` optimizer and one BLAS thread (so N ranks use N
cores); rank 0 prints one markdown row per model: train-text's default model (LSTM 80,80 on the
built-in corpus, windows of 50 x batch 32 per rank, float32, SGD with clipping, as
``dualtape train-text`` runs it) and Grenade's seed network [LSTM(40, 512), LSTM(512, 40)]
(``train_recurrent``, T = 50, batch 32 per rank, float32, SGD). The share is the time spent
packing, reducing and unpacking gradients over the step's wall time, on rank 0 (it includes
waiting for the slower rank); the last column is a bare allreduce of the same number of float32
after a barrier. Columns: model | ranks | parameters | ms per step | symbols per second over all
ranks | reduce share | bare allreduce ms.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np

import dualtape
from dualtape import distributed
from dualtape.backend import resolve_backend
from dualtape.text.config import TrainConfig
from dualtape.text.model import read_corpus
from dualtape.text.threads import limited_threads
from dualtape.text.trainer import TextTrainer

WARMUP = 3


def timed(step: Callable[[], None], optimizer: distributed.DataParallel, steps: int):
    """``(seconds per step, reduce share)`` over ``steps`` steps after a warm-up."""
    for _ in range(WARMUP):
        step()
    comm = optimizer.comm
    if comm is not None:
        comm.Barrier()
    reduced, began = optimizer.reduce_seconds, time.perf_counter()
    for _ in range(steps):
        step()
    seconds = time.perf_counter() - began
    return seconds / steps, (optimizer.reduce_seconds - reduced) / seconds


def bare_allreduce(count: int, repeats: int = 20) -> float:
    """Median seconds of an allreduce of ``count`` float32 after a barrier (no waiting)."""
    if distributed.world_size() == 1:
        return 0.0
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    buffer, times = np.ones(count, dtype=np.float32), []
    for _ in range(repeats):
        comm.Barrier()
        began = time.perf_counter()
        comm.Allreduce(MPI.IN_PLACE, buffer, op=MPI.SUM)
        times.append(time.perf_counter() - began)
    return float(np.median(times))


def text_model(steps: int) -> tuple[str, int, int, float, float]:
    trainer = TextTrainer.new(read_corpus(None), TrainConfig(seed=1), resolve_backend("numpy"))
    trainer.window_rng = np.random.Generator(
        trainer.window_rng.bit_generator.jumped(distributed.rank()))
    trainer.optimizer = optimizer = distributed.DataParallel(trainer.optimizer)
    per_step, share = timed(trainer.step, optimizer, steps)
    count = sum(p.size for group in trainer.net.params for p in group.values())
    return "train-text default", count, trainer.chars_per_step, per_step, share


def seed_network(steps: int) -> tuple[str, int, int, float, float]:
    rnet = dualtape.RecurrentNetwork([dualtape.LSTM(40, 512, seed=1),
                                      dualtape.LSTM(512, 40, seed=2)])
    rng = np.random.default_rng(distributed.rank())
    xs = rng.uniform(-1, 1, (50, 32, 40)).astype(np.float32)
    optimizer = distributed.DataParallel(dualtape.SGD(0.01))
    per_step, share = timed(lambda: dualtape.train_recurrent(rnet, xs, xs, optimizer),
                            optimizer, steps)
    count = sum(p.size for group in rnet.params for p in group.values())
    return "seed network, batch 32", count, 50 * 32, per_step, share


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    size = distributed.world_size()
    with limited_threads(args.threads):
        rows = [text_model(args.steps), seed_network(max(args.steps // 4, 5))]
    bare = [bare_allreduce(row[1]) for row in rows]
    if distributed.rank() == 0:
        for (name, count, chars, per_step, share), alone in zip(rows, bare, strict=True):
            print(f"| {name} | {size} | {count:,} | {per_step * 1e3:.1f} | "
                  f"{size * chars / per_step:,.0f} | {share:.1%} | {alone * 1e3:.2f} |")


if __name__ == "__main__":
    main()
