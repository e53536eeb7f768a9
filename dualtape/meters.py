"""Memory meters: the peak bytes a call's allocations held at once, as numpy and CuPy see them.

``TracedMeter``: tracemalloc, which numpy reports its arrays to; ``PoolMeter``: the blocks of
CuPy's memory pool (a ``cupy.cuda.MemoryHook``). Neither sees torch's or JAX's allocations.
Each is a context manager whose ``peak`` counts only what was allocated inside it and is still
held or was at once, and whose ``reset_peak`` starts a new phase (a peak of what is held from
then on). ``traced_peak`` and ``pool_peak`` measure one call. ``dualtape bench``'s memory group
and ``tape_report``'s measured peaks use them.
"""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from typing import Any

from . import spare


class TracedMeter:
    """tracemalloc, started on entry and stopped on exit; ``RuntimeError`` on entry if it is
    already tracing (its peak would include what was traced before). Inside it no spare array
    is kept or handed out again (``spare.suspend``): a call measured makes, and is charged
    for, every array it uses, as it does without them."""

    def __enter__(self) -> TracedMeter:
        if tracemalloc.is_tracing():
            raise RuntimeError("tracemalloc is already tracing: its peak would include what it "
                               "traced before the call")
        spare.suspend()
        tracemalloc.start()
        return self

    def __exit__(self, *exc: object) -> None:
        tracemalloc.stop()
        spare.resume()

    @property
    def peak(self) -> int:
        """The most bytes held at once since entry or the last ``reset_peak``."""
        return tracemalloc.get_traced_memory()[1]

    def reset_peak(self) -> None:
        """From now on, ``peak`` starts from the bytes held now."""
        tracemalloc.reset_peak()


def traced_peak(call: Callable[[], Any]) -> int:
    """The peak bytes of the blocks Python's allocator handed out during ``call()`` and held
    at once (``TracedMeter``; numpy's arrays included)."""
    with TracedMeter() as meter:
        call()
        return meter.peak


class PeakCounter:
    """Bytes of the blocks allocated since it was made and not yet freed (``in_use``), and
    their ``peak``; the freeing of a block from before is not counted, as tracemalloc."""

    def __init__(self) -> None:
        self.blocks: dict[int, int] = {}
        self.in_use = self.peak = 0

    def allocated(self, pointer: int, size: int) -> None:
        """A block of ``size`` bytes at ``pointer`` was handed out."""
        self.blocks[pointer] = size
        self.in_use += size
        self.peak = max(self.peak, self.in_use)

    def freed(self, pointer: int) -> None:
        """The block at ``pointer`` went back (ignored if allocated before this counter)."""
        self.in_use -= self.blocks.pop(pointer, 0)


class PoolMeter:
    """CuPy's memory pool, watched while inside: a ``PeakCounter`` fed by a memory hook
    (``malloc_postprocess`` for each block the pool hands out, cached or new, at its rounded
    size; ``free_preprocess`` when it goes back). ``hook_base``: the hook class (default
    ``cupy.cuda.MemoryHook``; tests give a fake)."""

    def __init__(self, hook_base: type | None = None) -> None:
        if hook_base is None:
            import cupy

            hook_base = cupy.cuda.MemoryHook
        counter = self.counter = PeakCounter()

        class PoolPeakHook(hook_base):  # type: ignore[misc, valid-type]
            name = "dualtape-pool-peak"

            def malloc_postprocess(self, **kwargs: Any) -> None:
                counter.allocated(kwargs["mem_ptr"], kwargs["mem_size"])

            def free_preprocess(self, **kwargs: Any) -> None:
                counter.freed(kwargs["mem_ptr"])

        self.hook = PoolPeakHook()

    def __enter__(self) -> PoolMeter:
        self.hook.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.hook.__exit__(*exc)

    @property
    def peak(self) -> int:
        """The most bytes held at once since entry or the last ``reset_peak``."""
        return self.counter.peak

    def reset_peak(self) -> None:
        """From now on, ``peak`` starts from the bytes held now."""
        self.counter.peak = self.counter.in_use


def pool_peak(call: Callable[[], Any], hook_base: type | None = None) -> int:
    """The peak bytes of CuPy memory-pool blocks handed out during ``call()`` and held at once
    (``PoolMeter``)."""
    with PoolMeter(hook_base) as meter:
        call()
        return meter.peak
