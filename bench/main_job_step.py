"""Milliseconds a step of the main job (``dualtape bench``'s ``text/char-model-80x80-batch-32``:
train-text's own ``TextTrainer.step``) for the dualtape checkout at ROOT, one BLAS thread,
150 timed steps after 5; with ``--overlap``, inside ``dualtape.overlap_gradients()``; with
``--cell StandardLSTM`` or ``--cell GRU``, the same model with that cell (``train-text
--cell``), its weights drawn from the workload's seed.
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
data = workload.host_data("float32")
if "--cell" in sys.argv[2:]:
    import dataclasses  # noqa: E402

    from dualtape.backend import use_backend  # noqa: E402
    from dualtape.text.config import make_optimizer  # noqa: E402
    from dualtape.text.model import build_text_network  # noqa: E402
    from dualtape.text.trainer import TextTrainer  # noqa: E402

    cfg = dataclasses.replace(data["config"], cell=sys.argv[sys.argv.index("--cell") + 1])
    with use_backend("numpy"):
        net = build_text_network(len(data["vocab"]), cfg.hidden, dtype=cfg.dtype,
                                 cell=cfg.cell, seed=cfg.seed)
    step = TextTrainer(net, data["vocab"], cfg, make_optimizer(cfg), data["ids"]).step
else:
    step = char_model.prepare(resolve_backend("numpy"), data)
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
