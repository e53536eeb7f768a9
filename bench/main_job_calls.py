"""Python-level calls a step of the main job makes (issue 30, item 2: the count to cut), for the
dualtape checkout at ROOT (default: this one): cProfile's count (Python functions, and builtins
called from Python code) of ``TextTrainer.step`` on ``dualtape bench``'s
``text/char-model-80x80-batch-32``, over 20 steps after 5, one BLAS thread; then the calls
under each function the step calls (and under each that ``backpropagate_sequence`` calls).

    python bench/main_job_calls.py [ROOT]
"""

import cProfile
import pstats
import sys
from collections import defaultdict

sys.path.insert(0, sys.argv[1] if len(sys.argv) > 1 else ".")

from threadpoolctl import threadpool_limits  # noqa: E402

from dualtape.backend import resolve_backend  # noqa: E402
from dualtape.benchmarks import char_model  # noqa: E402
from dualtape.benchmarks.workloads import WORKLOADS  # noqa: E402

STEPS = 20
workload = next(w for w in WORKLOADS if w.key == "text/char-model-80x80-batch-32")
trainer = char_model.trainer(resolve_backend("numpy"), workload.host_data("float32"))
with threadpool_limits(1):
    for _ in range(5):
        trainer.step()
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(STEPS):
        trainer.step()
    profile.disable()
stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]
callees: dict = defaultdict(dict)
for function, (_, _, _, _, callers) in stats.items():
    for caller, counts in callers.items():
        callees[caller][function] = counts[1]


def under(function: tuple, seen: frozenset = frozenset()) -> float:
    """Calls made under ``function`` in all, its calls' share of each callee's."""
    total = 0.0
    for callee, n in callees[function].items():
        if callee not in seen:
            total += n + n / stats[callee][1] * under(callee, seen | {function})
    return total


print(f"{sum(v[1] for v in stats.values()) / STEPS:.0f} calls a step")
for frame in ("_step", "backpropagate_sequence", "planned_backprop"):
    for function in [f for f in stats if f[2] == frame]:
        print(f"under {frame}:")
        rows = [(n + n / stats[g][1] * under(g, frozenset({function})), g)
                for g, n in callees[function].items()]
        for n, g in sorted(rows, reverse=True):
            print(f"  {n / STEPS:6.1f} {g[0].rsplit('/', 1)[-1]}:{g[2]}")
