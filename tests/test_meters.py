"""``dualtape.meters``: tracemalloc's peak counts what a call made and held, nothing from before;
the pool meter counts CuPy's blocks held at once (a fake hook here, the real pool in
``bench/test_memory_bench.py`` where a GPU is)."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from dualtape import meters, spare


def test_the_traced_peak_holds_an_array_made_during_the_call_and_nothing_from_before():
    made = np.ones(1_000_000)
    assert meters.traced_peak(lambda: np.ones(1_000_000)) >= made.nbytes
    before = [np.ones(2_000_000)]
    assert meters.traced_peak(lambda: None) < 100_000  # earlier arrays are not counted
    assert 0 <= meters.traced_peak(before.pop) < 100_000  # nor their freeing
    assert meters.traced_peak(lambda: np.ones(1000)) < 100_000  # nor an earlier call's peak
    assert not tracemalloc.is_tracing()


def test_the_traced_peak_refuses_to_start_inside_a_trace():
    tracemalloc.start()
    try:
        with pytest.raises(RuntimeError, match="^tracemalloc is already tracing: its peak would "
                           "include what it traced before the call$"):
            meters.traced_peak(lambda: None)
    finally:
        tracemalloc.stop()
    assert spare._SUSPENDED[0] == 0  # refused before it suspended the spare arrays


class FakeHookBase:
    """cupy.cuda.MemoryHook's protocol: ``with hook:`` registers it for this thread."""

    active: list = []

    def __enter__(self):
        FakeHookBase.active.append(self)
        return self

    def __exit__(self, *exc):
        FakeHookBase.active.remove(self)


def _malloc(pointer: int, rounded: int) -> None:
    for hook in FakeHookBase.active:  # as the pool calls them: requested and rounded sizes
        hook.malloc_postprocess(device_id=0, size=rounded - 7, mem_size=rounded,
                                mem_ptr=pointer, pmem_id=1)


def _free(pointer: int, rounded: int) -> None:
    for hook in FakeHookBase.active:
        hook.free_preprocess(device_id=0, mem_size=rounded, mem_ptr=pointer, pmem_id=1)


def test_the_pool_peak_counts_the_blocks_held_at_once_at_their_rounded_size():
    def call():
        _malloc(1, 512)
        _malloc(2, 1024)
        _free(1, 512)
        _free(99, 8192)  # a block from before the call going back: not counted
        _malloc(3, 2048)
        _free(2, 1024)
        _malloc(4, 512)  # after the peak: 2,560 in use
        _free(3, 2048)

    assert meters.pool_peak(call, FakeHookBase) == 1024 + 2048
    assert FakeHookBase.active == []


def test_the_pool_hook_is_removed_when_the_call_fails():
    def failing():
        _malloc(1, 512)
        raise ValueError("out of memory")

    with pytest.raises(ValueError):
        meters.pool_peak(failing, FakeHookBase)
    assert FakeHookBase.active == []


def test_reset_peak_starts_a_phase_from_what_is_held():
    with meters.TracedMeter() as meter:
        big = np.ones(1_000_000)
        del big
        kept = np.ones(100_000)
        assert meter.peak >= 8_000_000
        meter.reset_peak()
        assert kept.nbytes <= meter.peak < 8_000_000 / 4  # the freed array is not in it
    with meters.PoolMeter(FakeHookBase) as pool:
        _malloc(1, 4096)
        _free(1, 4096)
        _malloc(2, 512)
        pool.reset_peak()
        assert pool.peak == 512
        _malloc(3, 1024)
        assert pool.peak == 1536
    assert FakeHookBase.active == [] and not tracemalloc.is_tracing()
