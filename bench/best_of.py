"""The timing loop the small probes in ``bench/`` share (``python bench/<probe>.py``)."""

import time
from collections.abc import Callable


def best_seconds(call: Callable[[], object], number: int, repeats: int = 7) -> float:
    """The best over ``repeats`` rounds of the mean seconds of one of ``number`` calls."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(number):
            call()
        best = min(best, (time.perf_counter() - start) / number)
    return best
