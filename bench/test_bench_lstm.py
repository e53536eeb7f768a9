"""Grenade's ``bench-lstm`` groups in pytest-benchmark, on every available backend and dtype.

``pytest bench/`` (the project's addopts hold ``--benchmark-disable``) runs each workload once as
a test, with the batch-32/256 variants cut to 2 time steps; ``pytest bench/ --benchmark-enable``
measures them at full size. Timings on a GPU wait for the device before the clock stops. Speed
is never asserted: ``dualtape bench`` is where the numbers are compared. For one-thread numbers,
set ``OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1`` in the environment of that run.
"""

from __future__ import annotations

import numpy as np
import pytest

from dualtape.backend import resolve_backend, to_numpy
from dualtape.benchmarks.measure import DTYPES, WORKLOADS, BackendRunner

TOLERANCE = {"float32": 5e-3, "float64": 1e-8}


def host_arrays(result) -> list[np.ndarray]:
    """Every array (and float) in a workload's result, as float64 numpy arrays, in order."""
    if result is None:
        return []
    if isinstance(result, dict):
        return [a for key in sorted(result) for a in host_arrays(result[key])]
    if isinstance(result, list | tuple):
        return [a for item in result for a in host_arrays(item)]
    return [np.asarray(to_numpy(result) if hasattr(result, "shape") else result, dtype=float)]


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
    result = host_arrays(benchmark(timed))
    if workload.op == "sgd":  # updates in place and returns nothing
        return
    assert result and all(np.all(np.isfinite(a)) for a in result)
    if benchmark.disabled:  # one call: the numpy float64 run of the same workload is the oracle
        oracle = BackendRunner(resolve_backend("numpy")).prepare(workload, "float64")()
        expected = host_arrays(oracle)
        if workload.op == "train":  # the saturated 512-wide states amplify rounding: the loss
            result, expected = result[:1], expected[:1]
        assert [a.shape for a in result] == [a.shape for a in expected]
        for got, want in zip(result, expected, strict=True):
            np.testing.assert_allclose(got, want, rtol=TOLERANCE[dtype], atol=TOLERANCE[dtype])
