"""The one backend fixture every array test runs through, plus shared test helpers."""

from __future__ import annotations

import contextlib
import os
from typing import Any

import numpy as np
import pytest

import dualtape
from dualtape import switches
from dualtape.backend import BackendUnavailable, resolve_backend, use_backend
from dualtape.kernels import cpu_path
from dualtape.recompute_check import CountingNamespace

os.environ.setdefault("DUALTAPE_BACKGROUND_COMPILE", "0")
"""train-text waits for the compiler in the tests (their processes too), as their outputs and
paths are compared: ``tests/test_compile_ahead.py`` tests the background compile."""

BACKEND_PARAMS = [
    pytest.param(("numpy", None), id="numpy"),
    pytest.param(("numpy", "ufuncs"), id="numpy-ufuncs"),
    pytest.param(("array_api_strict", None), id="strict"),
    pytest.param(("array_api_strict", "device1"), id="strict-device1"),
    pytest.param(("cupy", None), id="cupy", marks=pytest.mark.gpu),
    pytest.param(("torch", None), id="torch"),
]
"""Each backend and device, and numpy twice: with its default LSTM loop (compiled where numba
is installed) and with the ufunc loop (``DUALTAPE_JIT=0``), so every numpy test checks both."""


@pytest.fixture(params=BACKEND_PARAMS)
def backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch):
    """Each available backend (and array_api_strict's second fake device, and numpy's ufunc
    loop) in turn, selected for new arrays; unavailable ones skip with the reason."""
    name, device = request.param
    if device == "ufuncs":
        path, why = cpu_path()
        if path != "compiled":
            UNAVAILABLE_REASONS.add(reason := f"Skipped: numpy runs the ufunc loop anyway: {why}")
            pytest.skip(reason[len("Skipped: "):])
        monkeypatch.setenv("DUALTAPE_JIT", "0")
        device = None
    try:
        chosen = resolve_backend(name, device)
    except BackendUnavailable as exc:
        UNAVAILABLE_REASONS.add(f"Skipped: {exc}")
        pytest.skip(str(exc))
    with use_backend(name, device):
        yield chosen


@pytest.fixture(autouse=True)
def fresh_choices(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test makes its own fast-path choices (``switches.held_choice`` keeps them across
    calls): one that plants a failing self-check or resets the verdicts is not served a
    choice an earlier test made."""
    monkeypatch.setattr(switches, "_CHOICES", {})


UNAVAILABLE_REASONS: set[str] = set()
"""The skip reasons the ``backend`` fixture gave, as pytest's reports word them."""


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """Report a skip for a missing backend at the fixture, not at each test, so the summary
    (``-rs``) says "SKIPPED [400] tests/conftest.py: backend 'torch' needs PyTorch ..." once
    per backend rather than once per test function."""
    report = yield
    if report.skipped and isinstance(report.longrepr, tuple):
        _, _, reason = report.longrepr
        if reason in UNAVAILABLE_REASONS:
            report.longrepr = (__file__, None, reason)
    return report


def np64(a: Any) -> np.ndarray:
    """Any supported array as a float64 numpy array, for comparing against the oracle."""
    return np.asarray(dualtape.to_numpy(a), dtype=np.float64)


@contextlib.contextmanager
def counting_transcendentals(xp):
    """A ``CountingNamespace`` over ``xp`` that also counts numpy's own exp/expm1/tanh/log,
    which numpy's in-place fast path calls directly instead of through ``xp``."""
    counter = CountingNamespace(xp)

    def counted(name, function):
        def call(*args, **kwargs):
            counter.calls[name] += 1
            return function(*args, **kwargs)

        return call

    with contextlib.suppress(ImportError):  # numba reads numpy's ufuncs when it first compiles
        import numba.np.npyimpl  # noqa: F401 - or loads: before the patch, not under it
    with pytest.MonkeyPatch.context() as patch:
        for name in counter.calls:
            patch.setattr(np, name, counted(name, getattr(np, name)))
        yield counter
