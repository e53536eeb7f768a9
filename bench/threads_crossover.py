"""Where more BLAS threads start to pay for train-text: chars/s at 1 thread and at N threads.

    python bench/threads_crossover.py [--sizes 80x32,256x64,512x128] [--threads 2] [--rounds 5]

For each ``HIDDENxBATCH`` (two LSTM layers of HIDDEN, windows of 50, Adam, float32, numpy) it
trains one model and times ``--steps`` steps at a time, alternating 1 and N threads round-robin
(so drift in the machine's speed hits both alike), and prints the median chars/s of each and
their ratio, beside the per-step recurrent product (``threads.product_work``) that
``dualtape.text.threads`` compares with ``PARALLEL_WORK``. The machine's load average is
printed before and after: quote ratios from a run whose load is stated.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

from dualtape.backend import resolve_backend
from dualtape.text import threads
from dualtape.text.config import TrainConfig
from dualtape.text.model import MAX_CORPUS_MB, read_corpus
from dualtape.text.threads import limited_threads
from dualtape.text.trainer import TextTrainer


def size(text: str) -> tuple[int, int]:
    """``512x128`` -> ``(512, 128)``."""
    hidden, _, batch = text.partition("x")
    return int(hidden), int(batch)


def measure(hidden: int, batch: int, many: int, rounds: int, steps: int) -> dict[int, list]:
    """chars/s per round for 1 and ``many`` threads, one trainer, interleaved."""
    config = TrainConfig(hidden=[hidden, hidden], batch=batch, optimizer="adam", rate=0.01,
                         clip=0.0, seed=0)
    trainer = TextTrainer.new(read_corpus(None, "utf-8", MAX_CORPUS_MB), config,
                              resolve_backend("numpy"))
    trainer.step()  # first-use work outside the timing
    speeds: dict[int, list] = {1: [], many: []}
    for k in range(rounds):
        for n in (1, many) if k % 2 == 0 else (many, 1):
            with limited_threads(n):
                start = time.perf_counter()
                for _ in range(steps):
                    trainer.step()
                speeds[n].append(steps * trainer.chars_per_step / (time.perf_counter() - start))
    return speeds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="80x32,128x64,256x64,512x32,512x128")
    parser.add_argument("--threads", type=int, default=2, help="the N compared with 1")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=3, help="steps timed per round")
    args = parser.parse_args(argv)
    print(f"load average before: {os.getloadavg()}; cores usable: {threads.usable_cores()}")
    print(f"| hidden x batch | product work | 1 thread chars/s | {args.threads} threads "
          f"chars/s | {args.threads} threads / 1 |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for text in args.sizes.split(","):
        hidden, batch = size(text)
        speeds = measure(hidden, batch, args.threads, args.rounds, args.steps)
        one, many = (float(np.median(speeds[n])) for n in (1, args.threads))
        ratios = np.asarray(speeds[args.threads]) / np.asarray(speeds[1])
        print(f"| {text} | {threads.product_work([hidden, hidden], batch):,} | {one:,.0f} | "
              f"{many:,.0f} | {float(np.median(ratios)):.2f} "
              f"({ratios.min():.2f}–{ratios.max():.2f}) |", flush=True)
    print(f"load average after: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
