"""The round-robin timing bookkeeping of ``measure_workload``, on a fake clock: fake runners
advance it by exact binary fractions of a second, so every count is exact and nothing depends on
this machine's speed."""

from __future__ import annotations

import contextlib
import math
from dataclasses import replace

import numpy as np
import pytest

from dualtape.backend import resolve_backend
from dualtape.benchmarks import measure
from dualtape.benchmarks.measure import Result, Timing, measure_workload
from dualtape.benchmarks.runners import backend_label
from dualtape.benchmarks.workloads import WORKLOADS
from dualtape.text.threads import limited_threads

TICK = 1 / 1024
WORKLOAD = WORKLOADS[0]


class Clock:
    """``time.perf_counter`` stand-in that moves only when told."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class FakeRunner:
    """A runner whose call costs ``cost`` ticks of device time, queued until ``synchronize``
    (as on a GPU); preparing it queues ``setup`` ticks of uploads. ``calls`` logs every call;
    the call numbered ``fail_at`` (from 1) raises. ``log``, shared between runners, records the
    order of all their calls."""

    reference = False

    def __init__(self, clock: Clock, label: str, cost: int = 1, setup: int = 0,
                 fail_at: int | None = None, covers: bool = True,
                 log: list[str] | None = None) -> None:
        self.clock, self.label, self.cost, self.setup = clock, label, cost, setup
        self.fail_at, self.covers = fail_at, covers
        self.pending = 0
        self.calls: list[str] = []
        self.log = self.calls if log is None else log

    def prepare(self, workload, dtype):
        if not self.covers:
            return None
        self.pending += self.setup

        def run():
            self.calls.append(f"{self.label}/{dtype}")
            if self.log is not self.calls:
                self.log.append(self.calls[-1])
            if len(self.calls) == self.fail_at:
                raise RuntimeError("device lost")
            self.pending += self.cost

        return run

    def synchronize(self) -> None:
        self.clock.now += self.pending * TICK
        self.pending = 0


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(measure.time, "perf_counter", fake)
    return fake


def fixed(rounds: int, min_sample: float = 0.0, warmup: int = 2) -> Timing:
    return Timing(budget=1.0, min_rounds=rounds, max_rounds=rounds, min_sample=min_sample,
                  warmup=warmup)


def test_each_sample_lasts_at_least_min_sample_after_the_warmup_calls(clock):
    runner = FakeRunner(clock, "a", cost=3)
    (result,) = measure_workload(WORKLOAD, [runner], ["float64"], fixed(4, 8 * TICK))
    assert result.number == math.ceil(8 / 3) == 3
    assert result.samples == [3 * TICK] * 4
    assert len(runner.calls) == 2 + 4 * 3  # two warm-up calls, four samples of three calls


@pytest.mark.parametrize("quick", [False, True], ids=["full", "quick"])
@pytest.mark.parametrize("slow", [1, 2], ids=["second-call", "third-call"])
def test_a_one_time_cost_in_a_late_warm_up_call_does_not_shrink_the_samples(clock, slow, quick):
    """A training workload's second call may make a plan or run a self-check once (an
    optimizer's): the estimate is the faster of the last two of the three warm-up calls."""
    runner = FakeRunner(clock, "a", cost=1)
    run = runner.prepare

    def prepare(workload, dtype):
        call = run(workload, dtype)

        def slow_second():
            runner.pending += 60 if len(runner.calls) == slow else 0
            call()

        return slow_second

    runner.prepare = prepare
    timing = replace(measure.QUICK if quick else measure.FULL, budget=1.0, min_rounds=2,
                     max_rounds=2, min_sample=8 * TICK)
    (result,) = measure_workload(WORKLOAD, [runner], ["float64"], timing)
    assert result.number == 8 and result.samples == [TICK, TICK]
    assert len(runner.calls) == 3 + 2 * 8


def test_uploads_queued_while_preparing_do_not_count_as_a_call(clock):
    runner = FakeRunner(clock, "a", cost=1, setup=100)
    (result,) = measure_workload(WORKLOAD, [runner], ["float64"], fixed(2, 4 * TICK, warmup=1))
    assert result.number == 4 and result.samples == [TICK, TICK]


def test_the_budget_buys_rounds_of_every_case(clock):
    cheap, dear = FakeRunner(clock, "cheap", cost=1), FakeRunner(clock, "dear", cost=3)
    timing = Timing(budget=20 * TICK, min_rounds=1, max_rounds=1000, min_sample=2 * TICK)
    results = measure_workload(WORKLOAD, [cheap, dear], ["float64"], timing)
    # a round: 2 calls of the cheap case + 1 of the dear one = 5 ticks; 2 cases x 20 ticks
    assert [r.number for r in results] == [2, 1]
    assert [len(r.samples) for r in results] == [8, 8]


def test_rounds_stay_within_min_and_max_rounds(clock):
    runner = FakeRunner(clock, "a")
    (few,) = measure_workload(WORKLOAD, [runner], ["float64"],
                              Timing(budget=TICK / 8, min_rounds=3, max_rounds=9))
    (many,) = measure_workload(WORKLOAD, [runner], ["float64"],
                               Timing(budget=100.0, min_rounds=3, max_rounds=9))
    assert (len(few.samples), len(many.samples)) == (3, 9)


def test_each_round_starts_one_case_later(clock):
    log: list[str] = []
    runners = [FakeRunner(clock, "a", log=log), FakeRunner(clock, "b", log=log)]
    measure_workload(WORKLOAD, runners, ["float32", "float64"], fixed(4, warmup=1))
    cases = ["a/float32", "a/float64", "b/float32", "b/float64"]
    assert log[:4] == cases  # one warm-up call each, as each case is prepared
    assert log[4:] == [cases[(k + j) % 4] for k in range(4) for j in range(4)]


def test_a_runner_that_covers_nothing_gives_no_row(clock):
    results = measure_workload(WORKLOAD, [FakeRunner(clock, "a", covers=False),
                                          FakeRunner(clock, "b")], ["float64"], fixed(3))
    assert [r.runner for r in results] == ["b"]


def test_a_case_that_fails_while_timed_stops_and_the_others_go_on(clock):
    failing, fine = FakeRunner(clock, "failing", fail_at=4), FakeRunner(clock, "fine")
    results = measure_workload(WORKLOAD, [failing, fine], ["float64"], fixed(5, warmup=1))
    assert results[0].error == "RuntimeError: device lost"
    assert len(results[0].samples) == 2 and len(failing.calls) == 4
    assert results[1].error is None and len(results[1].samples) == 5


def test_the_median_is_the_middle_sample():
    result = Result(WORKLOAD, "numpy", False, "float64", samples=[0.001, 0.002, 0.010])
    assert result.median_ms == pytest.approx(2.0)
    assert (result.min_ms, result.max_ms) == pytest.approx((1.0, 10.0))
    assert np.isnan(Result(WORKLOAD, "numpy", False, "float64").median_ms)


def test_a_row_is_labelled_with_its_device_only_off_the_default():
    assert backend_label(resolve_backend("numpy")) == "numpy"
    assert backend_label(resolve_backend("array_api_strict")) == "array_api_strict"
    other = backend_label(resolve_backend("array_api_strict", "device1"))
    assert other.startswith("array_api_strict:") and "device1" in other


def test_limited_threads_refuses_zero_and_restores_torch_threads(monkeypatch):
    with pytest.raises(ValueError, match="at least 1, got 0"), limited_threads(0):
        pass
    torch = pytest.importorskip("torch", reason="torch is not installed")
    threadpoolctl = pytest.importorskip("threadpoolctl")
    # threadpoolctl restores the OpenMP pool torch shares on some builds, not on all: here it
    # restores nothing, so torch's own count must be put back by limited_threads.
    monkeypatch.setattr(threadpoolctl, "threadpool_limits",
                        lambda limits: contextlib.nullcontext())
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with limited_threads(1):
            assert torch.get_num_threads() == 1
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
