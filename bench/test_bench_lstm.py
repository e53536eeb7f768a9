"""Grenade's ``bench-lstm`` groups in pytest-benchmark, on every available backend and dtype.

``pytest bench/`` (the project's addopts hold ``--benchmark-disable``) runs each workload once as
a test, with the batch-32/256 variants cut to 2 time steps; ``pytest bench/ -n 0
--benchmark-enable`` measures them at full size, in one process. Timings on a GPU wait for the
device before the clock stops. Speed is never asserted: ``dualtape bench`` is where the numbers
are compared. For one-thread numbers, set ``OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1`` in the
environment of that run. The groups ``dualtape bench`` runs only on request (memory: minutes and
GBs a call) are not in the suite; ``test_memory_bench.py`` tests them.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from dualtape.backend import resolve_backend, to_numpy
from dualtape.benchmarks.runners import BackendRunner
from dualtape.benchmarks.workloads import DTYPES, ON_REQUEST, WORKLOADS, Workload

SUITE = [w for w in WORKLOADS if w.group not in ON_REQUEST]
TOLERANCE = {"float32": 5e-3, "float64": 1e-8}
COMPARED_STEPS = {"float32": 10}
"""How many time steps of a train workload the comparison with the oracle runs, per dtype.
Grenade's saturated 512-wide LSTM is chaotic over 50 steps: its float64 loss moves by 0.27%
when the weights move by one float32 rounding, so a float32 run's loss there depends on the
BLAS kernel (1424.5 on OpenBLAS's SkylakeX kernel, 1438.1 on its generic one, against 1433.0);
over its first 10 steps it moves by 1e-6. ``test_comparisons_are_well_conditioned`` holds
every compared quantity to that standard."""


SATURATED_STEPS = 5
"""The train steps compared for the saturated row (weights 30x Grenade's), in either dtype: it
is chaotic sooner (one rounding of the inputs moves its 50-step float64 loss by 80%; at 10
steps the float32 comparison is already too close to its tolerance)."""


def compared(workload: Workload, dtype: str) -> Workload:
    """The workload whose result is compared with the oracle: the smoke run, its train time
    steps cut to ``COMPARED_STEPS`` (the same inputs' first steps)."""
    workload = workload.smoke()
    steps = SATURATED_STEPS if workload.gain != 1 else COMPARED_STEPS.get(dtype)
    if workload.op == "train" and steps is not None and workload.steps > steps:
        return replace(workload, steps=steps)
    return workload


def upcast(data):
    """``host_data`` with every float array as float64: the oracle's inputs are then exactly
    the rounded inputs the run in a lower precision sees (labels stay integers)."""
    if isinstance(data, dict):
        return {key: upcast(value) for key, value in data.items()}
    if isinstance(data, list):
        return [upcast(item) for item in data]
    return data.astype(np.float64) if data.dtype.kind == "f" else data


def perturbed(data, scale: float, rng: np.random.Generator):
    """``data`` with every float array multiplied by ``1 + u·scale``, ``u`` uniform in [-1,
    1] (labels stay as they are)."""
    if isinstance(data, dict):
        return {key: perturbed(value, scale, rng) for key, value in data.items()}
    if isinstance(data, list):
        return [perturbed(item, scale, rng) for item in data]
    if data.dtype.kind != "f":
        return data
    return data * (1.0 + scale * rng.uniform(-1.0, 1.0, data.shape))


def oracle(workload: Workload, data) -> list[np.ndarray]:
    """The compared arrays of ``workload`` run on numpy in float64 from ``data``."""
    numpy = BackendRunner(resolve_backend("numpy"))
    expected = host_arrays(numpy.prepare_data(workload, upcast(data))())
    return expected[:1] if workload.op == "train" else expected  # the loss, not the states


def host_arrays(result) -> list[np.ndarray]:
    """Every array (and float) in a workload's result, as float64 numpy arrays, in order."""
    if result is None or type(result) is int:  # an int is a tape's version stamp, no result
        return []
    if isinstance(result, dict):
        return [a for key in sorted(result) for a in host_arrays(result[key])]
    if isinstance(result, list | tuple):
        return [a for item in result for a in host_arrays(item)]
    return [np.asarray(to_numpy(result) if hasattr(result, "shape") else result, dtype=float)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("workload", SUITE, ids=lambda w: w.key)
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
    if workload.op in ("sgd", "text"):  # updates in place and returns nothing (text: checked
        return  # against JAX's and torch's numbers in test_char_model.py)
    assert result and all(np.all(np.isfinite(a)) for a in result)
    if benchmark.disabled:  # one call: numpy in float64 on the same rounded inputs is the oracle
        checked = compared(workload, dtype)
        data = checked.host_data(dtype)
        if checked != workload:
            result = host_arrays(runner.prepare_data(checked, data)())
        expected = oracle(checked, data)
        result = result[: len(expected)]
        assert [a.shape for a in result] == [a.shape for a in expected]
        for got, want in zip(result, expected, strict=True):
            np.testing.assert_allclose(got, want, rtol=TOLERANCE[dtype], atol=TOLERANCE[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("workload", [w for w in SUITE if w.op not in ("sgd", "text")],
                         ids=lambda w: w.key)
def test_comparisons_are_well_conditioned(workload, dtype):
    """What ``test_workload`` compares moves by less than a tenth of its tolerance when the
    inputs move by one rounding of the dtype: a run in that dtype, on any BLAS kernel, can then
    only miss the oracle by a bug, not by rounding amplified by the network."""
    checked = compared(workload, dtype)
    data = checked.host_data(dtype)
    rounding = float(np.finfo(dtype).eps) / 2
    exact = oracle(checked, data)
    moved = oracle(checked, perturbed(upcast(data), rounding, np.random.default_rng(0)))
    for a, b in zip(exact, moved, strict=True):
        change = float(np.max(np.abs(a - b) / np.maximum(np.abs(a), 1.0)))
        assert change < TOLERANCE[dtype] / 10, (
            f"{checked.key} in {dtype}: one rounding of the inputs moves the result by "
            f"{change:.2g}, too close to the tolerance {TOLERANCE[dtype]:g}")
