"""Fixtures of the benchmark suite: the backends to time, each skipped with a reason when it
cannot run here."""

from __future__ import annotations

import pytest

from dualtape.backend import Backend, BackendUnavailable, resolve_backend

BENCH_BACKENDS = [
    pytest.param("numpy", id="numpy"),
    pytest.param("torch", id="torch"),
    pytest.param("cupy", id="cupy", marks=pytest.mark.gpu),
    pytest.param("array_api_strict", id="strict"),
]


@pytest.fixture(params=BENCH_BACKENDS)
def bench_backend(request: pytest.FixtureRequest) -> Backend:
    """Each available backend. array_api_strict only runs when benchmarks are disabled (the
    smoke run): it checks the array-API contract and is far too slow to be worth timing."""
    try:
        chosen = resolve_backend(request.param)
    except BackendUnavailable as exc:
        pytest.skip(str(exc))
    if chosen.name == "array_api_strict" and not _benchmarks_disabled(request.config):
        pytest.skip("array_api_strict is a correctness backend, not timed (smoke run only)")
    return chosen


def _benchmarks_disabled(config: pytest.Config) -> bool:
    disabled = config.getoption("benchmark_disable", default=False)
    return bool(disabled) and not config.getoption("benchmark_enable", default=False)
