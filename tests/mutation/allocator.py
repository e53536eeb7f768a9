"""Mutants of ``dualtape/allocator.py``."""

from run_mutants import Mutant

ALLOCATOR, TESTS = "dualtape/allocator.py", ("tests/test_allocator.py",)
MUTANTS = [
    Mutant(ALLOCATOR, "        if mallopt(option, value) != 1:", "        if False:",
           "the thresholds are said to be set but never are", TESTS),
    Mutant(ALLOCATOR, "M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3",
           "M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -1",
           "the mmap threshold never set (the trim one twice)", TESTS),
    Mutant(ALLOCATOR, '    if libc_name != "glibc":', "    if False:",
           "mallopt looked for outside glibc", TESTS),
    Mutant(ALLOCATOR, '            return f"mallopt({name}, {value}) was refused"',
           "            pass", "a refused setting reported as set", TESTS),
]
