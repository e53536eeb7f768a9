"""The timing of ``dualtape bench``: every workload (``workloads.py``) on every runner
(``runners.py``, ``references.py``, ``bound.py``) and dtype in turn, round-robin, so drift in
the machine's speed hits all of them alike; a memory row's memory is then measured in a fresh
process (``memory.py``).

Heavy imports (torch, JAX, matplotlib, threadpoolctl) happen inside functions, so
``dualtape --help`` stays fast. ``limited_threads`` (``text/threads.py``, shared with train-text)
limits the BLAS, OpenMP and torch threads of a run.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ..text.threads import threadpoolctl_installed
from . import memory
from .runners import Runner
from .workloads import DTYPES, Workload


@dataclass(frozen=True)
class Timing:
    """How long to measure each (workload, runner, dtype) case: ``warmup`` calls first (the
    faster of the last two also estimates the time of a call: a one-time cost in the second
    call, a fast path's self-check or a plan an optimizer makes, must not shrink the samples to
    one call each, every one of them run cold after the other cases), then samples of
    ``number`` calls lasting at least ``min_sample`` s, about ``budget`` s of them, but no
    fewer than ``min_rounds`` and no more than ``max_rounds``."""

    budget: float = 1.5
    min_rounds: int = 5
    max_rounds: int = 200
    min_sample: float = 0.01
    warmup: int = 3


FULL = Timing()
QUICK = Timing(budget=0.25, min_rounds=3, max_rounds=30, min_sample=0.004)


@dataclass
class Result:
    """The samples (seconds per call) of one workload on one runner in one dtype."""

    workload: Workload
    runner: str
    reference: bool
    dtype: str
    samples: list[float] = field(default_factory=list)
    number: int = 1
    error: str | None = None
    memory: memory.Memory | None = None
    threads: int | None = None
    """The BLAS/OpenMP and torch thread limit the row ran under (None: the libraries' own)."""

    @property
    def median_ms(self) -> float:
        """Median time per call in milliseconds (NaN without samples)."""
        return 1e3 * float(np.median(self.samples)) if self.samples else math.nan

    @property
    def min_ms(self) -> float:
        """Fastest sample, ms per call."""
        return 1e3 * min(self.samples) if self.samples else math.nan

    @property
    def max_ms(self) -> float:
        """Slowest sample, ms per call."""
        return 1e3 * max(self.samples) if self.samples else math.nan

    @property
    def chars_per_second(self) -> float | None:
        """Characters trained on per second at the median (text workloads; else None)."""
        chars = self.workload.chars_per_call
        return None if chars is None else 1e3 * chars / self.median_ms

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready record."""
        w = self.workload
        return {
            "workload": w.key, "group": w.group, "size": w.size, "batch": w.batch,
            "steps": w.steps, "runner": self.runner, "reference": self.reference,
            "dtype": self.dtype, "median_ms": self.median_ms, "min_ms": self.min_ms,
            "max_ms": self.max_ms, "chars_per_call": w.chars_per_call,
            "chars_per_s": self.chars_per_second, "calls_per_sample": self.number,
            "samples_ms": [1e3 * s for s in self.samples], "error": self.error,
            "threads": self.threads,
            **({"tape": w.tape, "memory": self.memory.as_dict()} if self.memory else {}),
        }


def _timer(run: Callable[[], Any], sync: Callable[[], None]) -> Callable[[int], float]:
    def timed(number: int) -> float:
        sync()
        start = time.perf_counter()
        for _ in range(number):
            run()
        sync()
        return (time.perf_counter() - start) / number

    return timed


def measure_workload(
    workload: Workload,
    runners: Sequence[Runner],
    dtypes: Sequence[str] = DTYPES,
    timing: Timing = FULL,
    threads: int | None = None,
) -> list[Result]:
    """Time ``workload`` on every runner and dtype, round-robin; failures become error rows.
    A memory workload is timed in at most ``memory.ROUNDS`` calls after one warm-up call,
    then each row's memory is measured in a fresh process under ``threads``
    (``memory.measure``)."""
    if workload.op == "memory":
        timing = replace(timing, warmup=1, min_rounds=min(timing.min_rounds, memory.ROUNDS),
                         max_rounds=min(timing.max_rounds, memory.ROUNDS))
    results: list[Result] = []
    cases: list[tuple[Result, Callable[[int], float]]] = []
    runner_of: dict[int, Runner] = {}
    per_round = 0.0
    for runner in runners:
        for dtype in dtypes:
            result = Result(workload, runner.label, runner.reference, dtype)
            try:
                run = runner.prepare(workload, dtype)
                if run is None:
                    continue
                timed = _timer(run, runner.synchronize)
                warm = [timed(1) for _ in range(timing.warmup)]
                once = max(min(warm[-2:]), 1e-9)
                result.number = max(1, math.ceil(timing.min_sample / once))
                per_round += once * result.number
            except Exception as exc:  # a broken backend must not stop the others
                result.error = f"{type(exc).__name__}: {exc}"
            results.append(result)
            if result.error is None:
                cases.append((result, timed))
                runner_of[id(result)] = runner
    if not cases:
        return results
    rounds = int(timing.budget * len(cases) / max(per_round, 1e-9))
    rounds = min(max(rounds, timing.min_rounds), timing.max_rounds)
    for k in range(rounds):
        shift = k % len(cases)
        for result, timed in cases[shift:] + cases[:shift]:
            if result.error is None:
                try:
                    result.samples.append(timed(result.number))
                except Exception as exc:
                    result.error = f"{type(exc).__name__}: {exc}"
    if workload.op == "memory":
        for result, _ in cases:
            if result.error is None:
                try:
                    result.memory = memory.measure(runner_of[id(result)], workload,
                                                   result.dtype, threads)
                except Exception as exc:
                    result.error = f"{type(exc).__name__}: {exc}"
    return results


def require_threadpoolctl() -> None:
    """Refuse (``SystemExit`` with the fix) a thread limit without threadpoolctl."""
    if not threadpoolctl_installed():
        raise SystemExit("dualtape bench: --threads needs threadpoolctl: "
                         "pip install 'dualtape[bench]'")
