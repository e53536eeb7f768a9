"""Grenade's ``bench-lstm`` groups in pytest-benchmark, on every available backend and dtype.

``pytest bench/`` (the project's addopts hold ``--benchmark-disable``) runs each workload once as
a test, with the batch-32/256 variants cut to 2 time steps; ``pytest bench/ --benchmark-enable``
measures them at full size. Timings on a GPU wait for the device before the clock stops. Speed
is never asserted: ``dualtape bench`` is where the numbers are compared. For one-thread numbers,
set ``OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1`` in the environment of that run.
"""

from __future__ import annotations

import pytest

from dualtape.benchmark import DTYPES, WORKLOADS, BackendRunner


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("workload", WORKLOADS, ids=lambda w: w.key)
def test_workload(benchmark, bench_backend, workload, dtype):
    runner = BackendRunner(bench_backend)
    if benchmark.disabled:
        workload = workload.smoke()
    run = runner.prepare(workload, dtype)

    def timed():
        result = run()
        runner.synchronize()
        return result

    if not benchmark.disabled:
        timed()  # warm-up: first calls, allocation, kernel compilation on a GPU
    benchmark.group = workload.group
    benchmark.extra_info.update(backend=runner.label, dtype=dtype, batch=workload.batch,
                                steps=workload.steps, size=workload.size)
    benchmark(timed)
