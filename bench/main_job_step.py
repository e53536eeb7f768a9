"""Milliseconds a step of the main job (``dualtape bench``'s ``text/char-model-80x80-batch-32``:
train-text's own ``TextTrainer.step``) for the dualtape checkout at ROOT, one BLAS thread,
150 timed steps after 5; with ``--overlap``, inside ``dualtape.overlap_gradients()``.
Pair two checkouts (or the two settings) in turn for a before/after:

    git worktree add --detach /tmp/dt-before <commit>
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE farm-bench -n 10 --timeout 500 \\
      --vs "sh -c 'exec python bench/main_job_step.py /tmp/dt-before >>/tmp/b.txt'" \\
      -- sh -c 'exec python bench/main_job_step.py . >>/tmp/a.txt'
"""

import contextlib
import sys
import time

sys.path.insert(0, sys.argv[1])

from threadpoolctl import threadpool_limits  # noqa: E402

from dualtape.allocator import keep_freed_memory  # noqa: E402
from dualtape.backend import resolve_backend  # noqa: E402
from dualtape.benchmarks import char_model  # noqa: E402
from dualtape.benchmarks.workloads import WORKLOADS  # noqa: E402

keep_freed_memory()
workload = next(w for w in WORKLOADS if w.key.startswith("text"))
step = char_model.prepare(resolve_backend("numpy"), workload.host_data("float32"))
overlap = contextlib.nullcontext()
if "--overlap" in sys.argv[2:]:
    from dualtape import overlap_gradients  # noqa: E402

    overlap = overlap_gradients()
with threadpool_limits(1), overlap:
    for _ in range(5):
        step()
    start = time.perf_counter()
    for _ in range(150):
        step()
print((time.perf_counter() - start) / 150 * 1e3, "ms")
