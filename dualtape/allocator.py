"""Keep freed memory in the process for the next training step (glibc's malloc), opt-in.

A training step on numpy allocates its tapes afresh: at ``train-text``'s default sizes about
twenty arrays of 0.3-2 MB a step. glibc's malloc serves blocks that large with ``mmap`` and
returns them to the system when freed (or trims its heap when the free space at its top
passes a threshold that adapts as it goes), so every step pays page faults to touch new pages
again: about 2,000 faults and 1.8-3.4 ms of system time per 10-13 ms step here (2-core AMD
EPYC, glibc 2.36). ``keep_freed_memory()`` sets fixed thresholds (``mallopt``) so blocks up to
``MMAP_THRESHOLD`` come from the heap and up to ``TRIM_THRESHOLD`` of free heap stays mapped:
the faults go away; the price is that much memory kept after the arrays are freed. It changes
the whole process (numpy, torch and anything else that calls malloc), which is why the library
never calls it on import: ``dualtape train-text`` and ``dualtape bench`` do, and say so.
Elsewhere than glibc (macOS, Windows, musl) it does nothing and says why.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import platform

MMAP_THRESHOLD = 32 << 20
"""Blocks below this come from the heap (glibc's largest fixed threshold on 64-bit)."""
TRIM_THRESHOLD = 64 << 20
"""Free memory at the top of the heap kept for reuse, at most."""
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's malloc.h


def keep_freed_memory() -> str | None:
    """Set glibc's malloc to keep freed blocks for reuse (see the module's docstring); the
    reason when it cannot (not glibc, or ``mallopt`` refused), else None. Idempotent."""
    return _set_thresholds()


def describe(why: str | None) -> str:
    """One line for a header from what ``keep_freed_memory()`` returned."""
    if why is not None:
        return f"memory: the allocator's own behaviour ({why})"
    return (f"memory: freed blocks kept for reuse (glibc malloc: mmap threshold "
            f"{MMAP_THRESHOLD >> 20} MiB, trim threshold {TRIM_THRESHOLD >> 20} MiB)")


@functools.cache
def _set_thresholds() -> str | None:
    libc_name, _ = platform.libc_ver()
    if libc_name != "glibc":
        return f"not glibc ({platform.system()}{', ' + libc_name if libc_name else ''})"
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError) as exc:
        return f"glibc's mallopt is not reachable: {exc}"
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    for name, option, value in (("M_MMAP_THRESHOLD", M_MMAP_THRESHOLD, MMAP_THRESHOLD),
                                ("M_TRIM_THRESHOLD", M_TRIM_THRESHOLD, TRIM_THRESHOLD)):
        if mallopt(option, value) != 1:
            return f"mallopt({name}, {value}) was refused"
    return None
