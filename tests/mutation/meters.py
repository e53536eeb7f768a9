"""Mutants of ``dualtape/meters.py`` (the peak memory meters ``dualtape bench`` and
``tape_report`` read)."""

from run_mutants import Mutant

P = "dualtape/meters.py"
TESTS = ("tests/test_meters.py",)
MUTANTS = [
    Mutant(P, 'counter.freed(kwargs["mem_ptr"])', 'counter.in_use -= kwargs["mem_size"]',
           "a block from before the call going back lowers the pool's count", TESTS),
    Mutant(P, 'counter.allocated(kwargs["mem_ptr"], kwargs["mem_size"])',
           'counter.allocated(kwargs["mem_ptr"], kwargs["size"])',
           "the pool's blocks counted at the requested, not the rounded, size", TESTS),
    Mutant(P, "        self.peak = max(self.peak, self.in_use)", "        self.peak = self.in_use",
           "the pool's last count taken for its peak", TESTS),
    Mutant(P, "        self.in_use -= self.blocks.pop(pointer, 0)", "        pass",
           "freed pool blocks never subtracted", TESTS),
    Mutant(P, "        return tracemalloc.get_traced_memory()[1]",
           "        return tracemalloc.get_traced_memory()[0]",
           "tracemalloc's current size taken for its peak", TESTS),
    Mutant(P, "        if tracemalloc.is_tracing():\n            raise",
           "        if False:\n            raise", "a trace already running folded into the peak",
           TESTS),
    Mutant(P, "    def __exit__(self, *exc: object) -> None:\n        tracemalloc.stop()",
           "    def __exit__(self, *exc: object) -> None:\n        pass",
           "tracemalloc left tracing after the call", TESTS),
    Mutant(P, "        tracemalloc.reset_peak()", "        pass",
           "a new phase's peak includes the earlier phases'", TESTS),
    Mutant(P, "        self.hook.__exit__(*exc)", "        pass",
           "the pool's hook left registered after the call", TESTS),
    Mutant(P, "        self.counter.peak = self.counter.in_use", "        self.counter.peak = 0",
           "the pool's new phase forgets what is held", TESTS),
]
