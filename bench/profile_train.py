"""Where the time of ``train/fifty-time-steps`` (numpy, float64, batch 1) goes, and how far it is
from the memory-bandwidth bound.

- a Python-level profile (cProfile): which functions hold the time;
- a native profile (Linux ``perf``, when it works here): the time share of BLAS matrix products,
  numpy's elementwise loops, numpy's per-call machinery and the Python interpreter;
- the bound: each step reads the recurrent matrix ``U`` of ``LSTM(40, 512)`` (1536×512) once
  forwards and once backwards; 100 reads at the bandwidth a numpy copy reaches, from DRAM (a
  large array) and from cache (an array the size of ``U``; ``U`` fits in this CPU's L3).

``python -m bench.profile_train`` prints the section; ``compare_devices.py --profile`` appends it
to the results page. Run from the repository root.
"""

from __future__ import annotations

import cProfile
import io
import os
import pstats
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from dualtape.backend import resolve_backend
from dualtape.benchmarks.runners import BackendRunner
from dualtape.benchmarks.workloads import WORKLOADS
from dualtape.text.threads import limited_threads

ROOT = Path(__file__).resolve().parent.parent
WORKLOAD = next(w for w in WORKLOADS if w.key == "train/fifty-time-steps")
DTYPE = "float64"


def train_call() -> Callable[[], Any]:
    """The benchmark's own callable for the profiled case."""
    return BackendRunner(resolve_backend("numpy")).prepare(WORKLOAD, DTYPE)


def median_time(run: Callable[[], Any], calls: int = 30) -> float:
    """Median seconds per call after two warm-up calls."""
    run()
    run()
    samples = []
    for _ in range(calls):
        start = time.perf_counter()
        run()
        samples.append(time.perf_counter() - start)
    return float(np.median(samples))


def python_profile(run: Callable[[], Any], calls: int = 20, top: int = 10) -> str:
    """A markdown table of the functions with the most own time under cProfile."""
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        run()
    profiler.disable()
    stats = pstats.Stats(profiler, stream=io.StringIO())
    total = sum(row[2] for row in stats.stats.values())  # type: ignore[attr-defined]
    rows = sorted(stats.stats.items(), key=lambda kv: -kv[1][2])[:top]  # type: ignore[attr-defined]
    lines = ["| function | calls per train call | own time share |", "| --- | ---: | ---: |"]
    for (path, line, name), (_, ncalls, tottime, _, _) in rows:
        where = f"{os.path.basename(path)}:{line}({name})" if line else name
        lines.append(f"| `{where}` | {ncalls / calls:.0f} | {100 * tottime / total:.1f}% |")
    return "\n".join(lines)


def category(dso: str, symbol: str) -> str:
    """The kind of work a sampled native symbol does."""
    if "blas" in dso or "mkl" in dso or re.search(r"gemm|gemv|matmul", symbol, re.I):
        return "matrix products (BLAS)"
    if dso.startswith("libm") and not symbol.startswith("fe"):
        return "elementwise loops (numpy, libm)"
    if "_multiarray_umath" in dso:
        if re.search(r"cast|copy|assign", symbol, re.I):
            return "copies (concat, stack, casts)"
        if re.match(r"[A-Z]+_\w+", symbol) or symbol.startswith(("simd_", "npyv_")):
            return "elementwise loops (numpy, libm)"
        return "numpy per-call machinery"
    if "python" in dso:
        return "Python interpreter"
    if dso.startswith("libc"):
        if re.search(r"mem(cpy|move|set)", symbol):
            return "copies (concat, stack, casts)"
        return "allocation (malloc, free)"
    if "kernel" in dso:
        return "kernel (page faults of fresh arrays)"
    return "numpy per-call machinery" if dso.startswith("libm") else "other"


def _child(seconds: float, threads: int) -> None:
    """Run the workload in a loop (``perf`` attaches to this process)."""
    with limited_threads(threads):
        run = train_call()
        for _ in range(5):
            run()
        print("ready", flush=True)
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            run()


def native_profile(threads: int, seconds: float = 3.0) -> dict[str, float] | str:
    """Shares of native time by ``category``, or a note saying why ``perf`` could not run."""
    perf = shutil.which("perf")
    if perf is None:
        return "`perf` is not installed here, so no native split"
    child = subprocess.Popen(
        [sys.executable, "-m", "bench.profile_train", "--child", str(seconds + 2), str(threads)],
        stdout=subprocess.PIPE, text=True, cwd=ROOT,
    )
    try:
        assert child.stdout is not None
        child.stdout.readline()
        with tempfile.TemporaryDirectory() as tmp:
            data = os.path.join(tmp, "perf.data")
            record = subprocess.run(
                [perf, "record", "-F", "1999", "-p", str(child.pid), "-o", data, "--",
                 "sleep", str(seconds)], capture_output=True, text=True)
            report = subprocess.run(
                [perf, "report", "-i", data, "--sort", "dso,sym", "--stdio", "--no-children"],
                capture_output=True, text=True)
    finally:
        child.wait()
    if record.returncode != 0 or report.returncode != 0:
        return f"`perf` failed here: {(record.stderr or report.stderr).strip()[-200:]}"
    shares: dict[str, float] = defaultdict(float)
    for line in report.stdout.splitlines():
        match = re.match(r"\s*([\d.]+)%\s+(\S+)\s+\[.\]\s+(.*)$", line)
        if match:
            shares[category(match[2], match[3].strip())] += float(match[1])
    return dict(sorted(shares.items(), key=lambda kv: -kv[1]))


def copy_bandwidth(nbytes: int, repeats: int) -> float:
    """Bytes per second a numpy copy moves (read + write) for an array of ``nbytes``."""
    source = np.ones(nbytes // 8)
    target = np.empty_like(source)
    np.copyto(target, source)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        np.copyto(target, source)
        best = min(best, time.perf_counter() - start)
    return 2 * nbytes / best


def matvec_time(repeats: int = 200) -> float:
    """Seconds for the two per-step products with ``U`` (1536×512 float64) at batch 1."""
    rng = np.random.default_rng(0)
    u = rng.uniform(-1, 1, (1536, 512))
    c, da = rng.uniform(-1, 1, (1, 512)), rng.uniform(-1, 1, (1, 1536))
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        c @ u.T
        da @ u
        best = min(best, time.perf_counter() - start)
    return best


def section(threads: int = 1) -> str:
    """The markdown section "Where the time goes"."""
    with limited_threads(threads):
        run = train_call()
        total = median_time(run)
        table = python_profile(run)
        dram = copy_bandwidth(512 * 2**20, 5)
        cache = copy_bandwidth(1536 * 512 * 8, 50)
        matvec = matvec_time()
    shares = native_profile(threads)
    u_bytes = 1536 * 512 * 8
    traffic = 2 * WORKLOAD.steps * u_bytes
    lines = [
        "## Where the time goes (numpy, float64, batch 1, train fifty-time-steps)",
        f"Measured here: **{1e3 * total:.1f} ms** per training call (median of 30, "
        f"{threads} thread{'s' if threads > 1 else ''}).",
        "### Native profile (perf, by library and symbol)",
    ]
    if isinstance(shares, str):
        lines.append(shares + ".")
    else:
        rows = [f"| {k} | {v:.1f}% | {v * total * 10:.1f} |" for k, v in shares.items()]
        lines.append("\n".join(["| kind of work | share of samples | ≈ ms per call |",
                                "| --- | ---: | ---: |", *rows]))
        python = sum(v for k, v in shares.items() if not k.startswith(("matrix", "elementwise")))
        lines.append(
            f"\nMatrix products take {shares.get('matrix products (BLAS)', 0):.0f}% of the "
            f"time, elementwise loops {shares.get('elementwise loops (numpy, libm)', 0):.0f}%, "
            f"and the rest ({python:.0f}%) is overhead: Python, numpy's per-call machinery, "
            "allocation and copies.")
    lines += [
        "### Python-level profile (cProfile, own time)", table,
        "### The bandwidth bound",
        f"Each step reads `U` of `LSTM(40, 512)` (1536×512 float64 = {u_bytes / 1e6:.1f} MB) "
        f"once forwards and once backwards: {traffic / 1e6:.0f} MB per call over 50 steps.",
        "| bandwidth measured with a numpy copy (read + write) | GB/s | time to read "
        f"{traffic / 1e6:.0f} MB | measured / bound |\n| --- | ---: | ---: | ---: |\n"
        f"| 512 MiB array (DRAM) | {dram / 1e9:.1f} | {1e3 * traffic / dram:.1f} ms | "
        f"{total / (traffic / dram):.2f}× |\n"
        f"| 6.3 MB array (the size of `U`, which fits in the L3 cache) | {cache / 1e9:.1f} | "
        f"{1e3 * traffic / cache:.1f} ms | {total / (traffic / cache):.2f}× |",
        f"\nThe two products with `U` alone (`c @ U.T` and `da @ U`, batch 1) take "
        f"{1e6 * matvec:.0f} µs per step, {1e3 * 50 * matvec:.1f} ms for 50 steps "
        f"({100 * 50 * matvec / total:.0f}% of the call): the BLAS reads `U` at "
        f"{2 * u_bytes / matvec / 1e9:.1f} GB/s, "
        + ("faster than DRAM allows, so from cache." if 2 * u_bytes / matvec > dram
           else "no faster than DRAM."),
    ]
    if not isinstance(shares, str):
        blas = shares.get("matrix products (BLAS)", 0.0) * total / 100
        lines.append(
            f"Of the {1e3 * blas:.1f} ms in BLAS, about {1e3 * max(blas - 50 * matvec, 0):.1f} ms "
            "go to the other products: the input projections before the loop, the weight "
            "gradients after it and the second layer. The gap between the measured time and "
            "the bound is the elementwise work and the overhead above.")
    return "\n\n".join(lines)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        _child(float(sys.argv[2]), int(sys.argv[3]))
    else:
        print(section(int(sys.argv[1]) if len(sys.argv) > 1 else 1))
