"""The memory group of ``dualtape bench``: the memory of one training call, measured.

``memory/{full,sqrt}-tape-{1000,10000,100000}-steps``: one ``train_recurrent`` call of the train
group's network (``[LSTM(40, 512), LSTM(512, 40)]``, ``SGD(rate=0.1)``, target = input, batch 1)
with ``tape="full"`` or ``"sqrt"``; the torch-autograd row runs the same maths with its full
autograd graph or, for ``"sqrt"``, ``torch.utils.checkpoint`` over segments of ``⌈√T⌉`` steps.
Every call starts from the seeded weights (``SeededCall.restore`` before it, timed with it):
one update with the gradients summed over a long sequence leaves weights whose next loss
overflows.

Besides the time (``measure.py``), a fresh process (``python -m dualtape.benchmarks.memory``) per
row measures, after a 2-step call of a network of the same sizes has loaded the code:

- ``rss``: how far the process's peak resident memory (Linux ``VmHWM``, reset through
  ``/proc/self/clear_refs`` just before) rose above its resident memory at the call's start:
  numpy, torch and the interpreter alike, the one column that compares every row like with
  like; host memory only (not a GPU's);
- ``allocated``: the peak of the bytes allocated during the call and alive at once: tracemalloc
  on numpy (numpy reports its arrays to it), the memory pool's blocks on CuPy (``pool_peak``, a
  ``cupy.cuda.MemoryHook``), in a second call; not measured elsewhere (torch's tensors are not
  seen by tracemalloc), and said so;
- the weights after the call, which ``compare_to_full_tape`` compares with the full tape's row
  of the same runner, steps and dtype.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from ..meters import pool_peak, traced_peak

ROUNDS = 3
"""Timed calls of a memory row at most, after one warm-up call (seconds each at 100,000 steps)."""
NOT_SEEN = "not measured: {}'s allocations are not seen by tracemalloc or a memory pool hook"


# --- peaks ----------------------------------------------------------------------------------


def allocation_peak(allocator: str, call: Callable[[], Any]) -> tuple[int | None, str]:
    """``(peak bytes, how measured)`` of ``call()`` for ``allocator`` (``numpy``: tracemalloc,
    ``cupy``: ``pool_peak``); ``(None, why not)`` for any other, without calling it."""
    if allocator == "numpy":
        return traced_peak(call), "tracemalloc"
    if allocator == "cupy":
        return pool_peak(call), "CuPy memory pool"
    return None, NOT_SEEN.format(allocator or "this row")


def _status_kib(name: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(name + ":"):
                return int(line.split()[1])
    raise OSError(f"/proc/self/status has no {name}")


def resident_increase(call: Callable[[], Any]) -> tuple[int | None, str]:
    """``(bytes, how measured)``: how far the peak resident memory rose during ``call()``
    above the resident memory at its start (Linux: ``VmHWM`` reset through
    ``/proc/self/clear_refs``); ``(None, why not)`` where that cannot be read or reset."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM to VmRSS
        before = _status_kib("VmRSS")
    except OSError as exc:
        return None, f"not measured: {exc}"
    call()
    return (_status_kib("VmHWM") - before) * 1024, "peak resident set increase (VmHWM)"


# --- one row, measured in a fresh process ---------------------------------------------------


@dataclass
class Memory:
    """What ``measure`` found for one row: ``allocated`` and ``rss`` in bytes (None: not
    measured, ``*_by`` says why; else how), the ``weights`` after the call, and, once
    ``compare_to_full_tape`` ran, their largest ``difference`` from the full tape's row and that
    over the largest change the full tape's update made (``relative``)."""

    allocated: int | None
    allocated_by: str
    rss: int | None
    rss_by: str
    weights: dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    difference: float | None = None
    relative: float | None = None

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready record (without the weights)."""
        return {"allocated_bytes": self.allocated, "allocated_by": self.allocated_by,
                "rss_bytes": self.rss, "rss_by": self.rss_by,
                "weights_max_abs_difference": self.difference,
                "weights_relative_difference": self.relative}


def measure(runner: Any, workload: Any, dtype: str, threads: int | None = None) -> Memory:
    """Measure one row in a fresh process (``python -m dualtape.benchmarks.memory``) for
    ``runner`` (rebuilt there from its label), under ``threads``; ``RuntimeError`` with the
    last line of its errors when it fails."""
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "weights.npz")
        spec = {"runner": runner.label, "reference": runner.reference, "dtype": dtype,
                "workload": asdict(workload), "threads": threads, "weights": path}
        done = subprocess.run([sys.executable, "-m", __name__, json.dumps(spec)],
                              capture_output=True, text=True)
        if done.returncode != 0:
            lines = done.stderr.strip().splitlines() or [f"exit status {done.returncode}"]
            killed = " (killed: out of memory?)" if done.returncode == -9 else ""
            raise RuntimeError(f"the memory measurement failed{killed}: {lines[-1]}")
        found = json.loads(done.stdout.strip().splitlines()[-1])
        with np.load(path) as saved:
            weights = {k: saved[k] for k in saved.files}
    return Memory(found["allocated"], found["allocated_by"], found["rss"], found["rss_by"],
                  weights)


def _rebuilt(label: str, reference: bool, threads: int | None) -> Any:
    """The runner ``label`` names: a reference (``bound.py``, ``references.py``) or dualtape
    on a backend."""
    from . import references
    from .bound import BoundRunner
    from .runners import BackendRunner, backend_from_label

    if reference:
        return next(r for r in [BoundRunner(), *references.reference_runners(threads)]
                    if r.label == label)
    return BackendRunner(backend_from_label(label))


def measure_here(spec: dict[str, Any]) -> dict[str, Any]:
    """The child's side of ``measure``: the peak resident increase of one call (the weights
    after it saved to ``spec["weights"]``), then the allocation peak of another."""
    from ..allocator import keep_freed_memory
    from ..text.threads import limited_threads
    from .workloads import Workload

    keep_freed_memory()  # as dualtape bench times the rows
    workload = Workload(**spec["workload"])
    with limited_threads(spec["threads"]):
        runner = _rebuilt(spec["runner"], spec["reference"], spec["threads"])
        runner.prepare(replace(workload, steps=2), spec["dtype"])()  # code loaded, compiled
        call = runner.prepare(workload, spec["dtype"])
        call.restore()
        rss, rss_by = resident_increase(lambda: (call.train(), runner.synchronize()))
        np.savez(spec["weights"], **call.weights())
        call.restore()
        allocated, allocated_by = allocation_peak(call.allocator, call.train)
    return {"allocated": allocated, "allocated_by": allocated_by, "rss": rss, "rss_by": rss_by}


# --- the weights against the full tape's ----------------------------------------------------


def compare_to_full_tape(results: list[Any]) -> None:
    """Set each memory row's ``difference`` and ``relative`` against the full-tape row of the
    same runner, steps and dtype (where both were measured): the largest absolute difference
    of the weights after the call, and that over the largest change the full tape's update made
    to the seeded weights."""
    measured = [r for r in results if r.memory is not None]
    for r in measured:
        full = next((f for f in measured if f.workload.tape == "full" and f.runner == r.runner
                     and f.reference == r.reference and f.dtype == r.dtype
                     and f.workload.steps == r.workload.steps), None)
        if full is None or full is r:
            continue
        seeded = r.workload.host_data(r.dtype)["params"]
        mine, theirs = r.memory.weights, full.memory.weights
        if mine.keys() != theirs.keys():
            raise ValueError(f"{r.workload.key} on {r.runner}: weights {sorted(mine)} against "
                             f"the full tape's {sorted(theirs)}")
        r.memory.difference = max(float(np.max(np.abs(mine[k].astype(np.float64) - theirs[k])))
                                  for k in mine)
        change = max(float(np.max(np.abs(theirs[f"{k}.{name}"].astype(np.float64) - p)))
                     for k, params in enumerate(seeded) for name, p in params.items())
        r.memory.relative = r.memory.difference / change if change else None


if __name__ == "__main__":
    print(json.dumps(measure_here(json.loads(sys.argv[1]))))
