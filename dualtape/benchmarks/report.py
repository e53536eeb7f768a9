"""Reports of ``dualtape bench``: machine details, the table, ratios, JSON, markdown and a plot.

Every ratio is "× faster than numpy": dualtape-on-numpy's median divided by the row's, same
workload and dtype (> 1: the row is faster than dualtape on numpy).

Kept apart from ``measure.py`` so the timing code stays small; imported only when a
benchmark runs. Files are written atomically (``dualtape.files``): a failure leaves no half file.
matplotlib and threadpoolctl are imported lazily, inside the functions.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import json
import math
import os
import platform
import sys
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from ..files import write_atomically
from .bound import LABEL as BOUND_LABEL
from .measure import Result
from .workloads import WORKLOADS

PACKAGES = ("dualtape", "numpy", "array-api-compat", "array-api-strict", "torch", "cupy",
            "cupy-cuda12x", "cupy-cuda13x", "numba", "jax", "threadpoolctl", "matplotlib")
ENV_PREFIXES = ("OPENBLAS_", "OMP_", "MKL_", "GOTO", "BLIS_", "NVPL_", "DUALTAPE_",
                "CUDA_VISIBLE", "MALLOC_", "NUMBA_")
FASTER = "× faster than numpy"
CONVENTION = (f"{FASTER} = dualtape-on-numpy's median / the row's median, same workload and "
              "dtype (> 1: faster than dualtape on numpy)")


def cpu_model(cpuinfo: str = "/proc/cpuinfo") -> str:
    """The CPU's model name with its family, model and widest vector instructions, from the
    first processor of ``cpuinfo`` on Linux (``AMD EPYC (family 26, model 2, AVX-512)``: a
    virtual machine may name only the brand, and kernels and speed differ by generation);
    else ``platform.processor()``."""
    fields: dict[str, str] = {}
    with contextlib.suppress(OSError):
        with open(cpuinfo) as f:
            for line in f:
                if not line.strip():
                    break  # the first processor only
                key, _, value = line.partition(":")
                fields.setdefault(key.strip(), value.strip())
    if "model name" not in fields:
        return platform.processor() or platform.machine()
    flags = fields.get("flags", "").split()
    vector = next((name for flag, name in (("avx512f", "AVX-512"), ("avx2", "AVX2"),
                                           ("avx", "AVX")) if flag in flags), None)
    details = [f"family {fields['cpu family']}" if "cpu family" in fields else None,
               f"model {fields['model']}" if "model" in fields else None, vector]
    found = ", ".join(d for d in details if d)
    return f"{fields['model name']} ({found})" if found else fields["model name"]


def gpu_models() -> list[str]:
    """Names of the CUDA devices seen by CuPy or torch, if either is already imported."""
    names: list[str] = []
    cupy, torch = sys.modules.get("cupy"), sys.modules.get("torch")
    with contextlib.suppress(Exception):
        if cupy is not None:
            for k in range(cupy.cuda.runtime.getDeviceCount()):
                name = cupy.cuda.runtime.getDeviceProperties(k)["name"]
                names.append(f"cuda:{k} {name.decode() if isinstance(name, bytes) else name}")
    with contextlib.suppress(Exception):
        if not names and torch is not None and torch.cuda.is_available():
            names = [f"cuda:{k} {torch.cuda.get_device_name(k)}"
                     for k in range(torch.cuda.device_count())]
    return names


def versions() -> dict[str, str]:
    """Installed versions of the packages that matter to the timings."""
    found = {"python": platform.python_version()}
    for name in PACKAGES:
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            found[name] = importlib.metadata.version(name)
    return found


def thread_info(requested: str, line: str) -> dict[str, Any]:
    """``--threads`` as given (``requested``), what it chose for the rows (``line``), and the
    thread counts now: threadpoolctl's pools (BLAS, OpenMP) and torch's intra-op threads."""
    info: dict[str, Any] = {"requested": requested, "line": line}
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        info["pools"] = "threadpoolctl not installed"
    else:
        coretype = os.environ.get("OPENBLAS_CORETYPE")
        info["pools"] = [
            {k: pool.get(k) for k in ("internal_api", "prefix", "version", "architecture",
                                      "num_threads") if pool.get(k) is not None}
            | ({"coretype": coretype} if coretype and pool.get("internal_api") == "openblas"
               else {})
            for pool in threadpool_info()
        ]
    torch = sys.modules.get("torch")
    if torch is not None:
        info["torch"] = torch.get_num_threads()
    return info


def system_info(threads: str, threads_line: str, runners: Sequence[str],
                memory: str | None = None) -> dict[str, Any]:
    """Everything needed to compare two runs: date, machine, versions, threads, the CPU LSTM
    loop, the allocator (``memory``: what ``allocator.keep_freed_memory()`` returned), BLAS
    env."""
    from .. import allocator
    from ..kernels import cpu_path

    affinity = getattr(os, "sched_getaffinity", None)
    path, why = cpu_path()
    return {
        "date": datetime.now().astimezone().isoformat(timespec="seconds"),
        "platform": platform.platform(),
        "cpu": cpu_model(),
        "cpus": os.cpu_count(),
        "cpus_usable": len(affinity(0)) if affinity else os.cpu_count(),
        "gpus": gpu_models(),
        "versions": versions(),
        "threads": thread_info(threads, threads_line),
        "cpu_loops": path if why is None else f"{path} ({why})",
        "memory": allocator.describe(memory),
        "env": {k: v for k, v in sorted(os.environ.items()) if k.startswith(ENV_PREFIXES)},
        "runners": list(runners),
    }


def _threads_text(threads: dict[str, Any]) -> str:
    pools = threads["pools"]
    if isinstance(pools, str):
        parts = [pools]
    else:
        parts = [f"{p.get('internal_api')} {p.get('version') or ''} ({p.get('prefix')}"
                 f"{_kernels(p)}): {p.get('num_threads')}".replace("  ", " ") for p in pools]
    if "torch" in threads:
        parts.append(f"torch intra-op: {threads['torch']}")
    return "; ".join(parts)


def _kernels(pool: dict[str, Any]) -> str:
    """``, Haswell kernels`` for a BLAS pool that names them, and whether the environment chose
    them: with ``OPENBLAS_CORETYPE`` OpenBLAS runs what it says, not its pick for the CPU (on
    this project's AVX-512 machine its own pick, SkylakeX, runs the main job's products about
    2x as fast as Haswell's)."""
    architecture = pool.get("architecture")
    if not architecture:
        return ""
    return f", {architecture} kernels" + (", as OPENBLAS_CORETYPE sets" if pool.get("coretype")
                                          else "")


def header_text(meta: dict[str, Any]) -> str:
    """A few lines describing the machine and the run."""
    gpus = ", ".join(meta["gpus"]) or "none"
    env = ", ".join(f"{k}={v}" for k, v in meta["env"].items()) or "none set"
    libs = ", ".join(f"{k} {v}" for k, v in meta["versions"].items())
    lines = [
        f"- date: {meta['date']}",
        f"- CPU: {meta['cpu']} ({meta['cpus_usable']} of {meta['cpus']} CPUs usable); "
        f"GPU: {gpus}",
        f"- platform: {meta['platform']}",
        f"- versions: {libs}",
        f"- threads: {meta['threads']['line']}: {_threads_text(meta['threads'])}",
        f"- LSTM loops on numpy: {meta['cpu_loops']}",
        f"- {meta['memory']}",
        f"- environment: {env}",
        f"- rows: {', '.join(meta['runners'])}",
    ]
    if "numpy" in meta["runners"]:
        lines.append(f"- ratios: {CONVENTION}")
    return "\n".join(lines)


def _ms(value: float) -> str:
    if math.isnan(value):
        return "–"
    if value < 1:
        return f"{value:.4f}"
    return f"{value:.2f}" if value < 100 else f"{value:.0f}"


def _row_label(r: Result) -> str:
    return f"ref:{r.runner}" if r.reference else r.runner


def _numpy(results: Sequence[Result], r: Result) -> Result | None:
    return next((x for x in results if x.runner == "numpy" and not x.reference
                 and x.workload == r.workload and x.dtype == r.dtype and x.samples), None)


def _ordered(results: Sequence[Result]) -> list[Result]:
    order = {w.key: k for k, w in enumerate(WORKLOADS)}
    runners = list(dict.fromkeys(r.runner for r in results))
    return sorted(results, key=lambda r: (order.get(r.workload.key, 99), r.workload.key,
                                          r.dtype, r.reference, runners.index(r.runner)))


def _compared(results: Sequence[Result]) -> bool:
    """Whether any row but dualtape on numpy itself has a numpy row to be compared with."""
    return any(r.samples and (base := _numpy(results, r)) is not None and base is not r
               for r in results)


def table(results: Sequence[Result]) -> str:
    """The results as a markdown table: median and min–max ms per call, and × faster than
    numpy unless nothing but dualtape on numpy could be compared (the column would be 1.00×)."""
    ratio = _compared(results)
    head = ["workload", "backend", "dtype", "median ms", "min–max ms", *([FASTER] * ratio)]
    lines = ["| " + " | ".join(head) + " |", "| --- | --- | --- |" + " ---: |" * (len(head) - 3)]
    for r in _ordered(results):
        cells = [r.workload.key, _row_label(r), r.dtype]
        base = _numpy(results, r)
        if r.error:
            cells += [f"failed: {r.error[:60]}", "", *([""] * ratio)]
        else:
            cells += [_ms(r.median_ms), f"{_ms(r.min_ms)}–{_ms(r.max_ms)}"]
            cells += [f"{base.median_ms / r.median_ms:.2f}×" if base else "–"] * ratio
        lines.append("| " + " | ".join(cells) + " |")
    if any(r.reference for r in results):
        lines.append("\nref: rows are other implementations of the same maths, not dualtape.")
    return "\n".join(lines)


def throughput(results: Sequence[Result]) -> str:
    """Characters per second of every row of a text workload, and × faster than numpy."""
    rows = [r for r in _ordered(results) if r.workload.chars_per_call and r.samples]
    if not rows:
        return ""
    lines = [f"| workload | backend | dtype | chars/s | {FASTER} |",
             "| --- | --- | --- | ---: | ---: |"]
    for r in rows:
        base = _numpy(results, r)
        ratio = f"{base.median_ms / r.median_ms:.2f}×" if base else "–"
        lines.append(f"| {r.workload.key} | {_row_label(r)} | {r.dtype} | "
                     f"{r.chars_per_second:,.0f} | {ratio} |")
    lines.append("\nchars/s = characters per step (window length × batch) / the median time "
                 "of a step.")
    return "\n".join(lines)


def ratios(results: Sequence[Result]) -> str:
    """Each reference (but the structural bound, which has its own table) in × faster than
    numpy, one row per workload and dtype."""
    refs = list(dict.fromkeys(r.runner for r in results
                              if r.reference and r.runner != BOUND_LABEL))
    if not refs:
        return ""
    lines = ["| workload | dtype | " + " | ".join(f"{name}: {FASTER}" for name in refs) + " |",
             "| --- | --- |" + " ---: |" * len(refs)]
    for key in dict.fromkeys(r.workload.key for r in _ordered(results)):
        for dtype in dict.fromkeys(r.dtype for r in results):
            mine = [r for r in results if r.workload.key == key and r.dtype == dtype]
            base = next((r for r in mine if r.runner == "numpy" and not r.reference
                         and r.samples), None)
            cells = []
            for name in refs:
                ref = next((r for r in mine if r.runner == name and r.reference and r.samples),
                           None)
                cells.append(f"{base.median_ms / ref.median_ms:.2f}×" if ref and base else "–")
            if base and any(c != "–" for c in cells):
                lines.append(f"| {key} | {dtype} | " + " | ".join(cells) + " |")
    lines.append("\nEach cell: dualtape-on-numpy's median divided by the reference's (< 1: "
                 "dualtape is faster than the reference).")
    return "\n".join(lines)


def bound_distance(results: Sequence[Result]) -> str:
    """How far dualtape on numpy is from the structural bound, per train workload and dtype."""
    lines = []
    for r in _ordered(results):
        if r.runner == BOUND_LABEL and r.reference and r.samples:
            base = _numpy(results, r)
            if base:
                lines.append(f"| {r.workload.key} | {r.dtype} | {_ms(base.median_ms)} | "
                             f"{_ms(r.median_ms)} | {base.median_ms / r.median_ms:.2f}× |")
    if not lines:
        return ""
    return "\n".join([
        f"| workload | dtype | dualtape on numpy, ms | structural bound, ms | bound: {FASTER} |",
        "| --- | --- | ---: | ---: | ---: |", *lines,
        "\nThe structural bound (dualtape/benchmarks/bound.py) times only the matrix products no "
        "implementation avoids: two recurrent products with U's f and i rows per step, "
        "compiled, and the projection, output gate and gradient products once per call. Its "
        "ratio is the most any "
        "implementation could gain over dualtape on numpy (1.00×: nothing left to gain)."])


def _mib(value: int | None) -> str:
    return "not measured" if value is None else f"{value / 2**20:,.1f}"


def memory_table(results: Sequence[Result]) -> str:
    """The memory rows: time, the time over the full tape's (same runner, steps, dtype), the
    two peaks, and the weights' difference from the full tape's after the update."""
    rows = [r for r in _ordered(results) if r.memory is not None]
    memory = {id(r): r.memory for r in rows if r.memory is not None}
    if not rows:
        return ""
    lines = ["| workload | backend | dtype | median ms | × the full tape's time | allocated "
             "peak, MiB | peak RSS increase, MiB | weights − full tape's: max abs | relative |",
             "| --- | --- | --- |" + " ---: |" * 6]
    for r in rows:
        full = next((f for f in rows if f.workload.tape == "full" and f.runner == r.runner
                     and f.reference == r.reference and f.dtype == r.dtype
                     and f.workload.steps == r.workload.steps and f.samples), None)
        m = memory[id(r)]
        ratio = f"{r.median_ms / full.median_ms:.2f}×" if full and r.samples else "–"
        same = ("(itself)" if full is r else "–") if m.difference is None else None
        lines.append(" | ".join([
            f"| {r.workload.key} | {_row_label(r)} | {r.dtype} | {_ms(r.median_ms)} | {ratio}",
            _mib(m.allocated), _mib(m.rss), same or f"{m.difference:.2e}",
            same or (f"{m.relative:.2e}" if m.relative is not None else "–")]) + " |")
    measures = sorted({f"{_row_label(r)}: {memory[id(r)].allocated_by}" for r in rows})
    lines.append(
        "\nOne `train_recurrent` call (torch-autograd: one training step of the same maths) "
        "from the seeded weights, tape full or checkpointed every ⌈√T⌉ steps (torch: "
        "`torch.utils.checkpoint`), measured in a fresh process after a 2-step call loaded "
        "the code. Allocated peak: the bytes allocated during the call and held at once ("
        + "; ".join(measures) + "). Peak RSS increase: how far the process's peak resident "
        "memory (VmHWM) rose above its resident memory at the call's start, host memory of "
        "every kind, so this column compares every row like with like. Weights: after the "
        "update, against the full tape's row of the same backend, steps and dtype: the largest "
        "absolute difference, and that over the largest change the full tape's update made.")
    return "\n".join(lines)


def how_to_read(results: Sequence[Result]) -> str:
    """One closing line: what to look at in the tables above."""
    if not _compared(results):
        return ("Read: the median ms per call (lower is faster); rows of other backends or "
                "references beside numpy also say how many times faster than numpy they are.")
    return (f"Read: \"{FASTER}\" above 1 means faster than dualtape on numpy, below 1 slower; "
            "ref: rows are other implementations, and the structural bound is the floor for all.")


def write_json(path: str, results: Sequence[Result], meta: dict[str, Any]) -> None:
    """All samples and the machine details as strict JSON (a NaN or infinite number, such as
    the weights' difference of a diverged update, is written as null), written atomically."""
    record = {"meta": meta, "results": [r.as_dict() for r in results]}
    text = json.dumps(_finite(record), indent=1, allow_nan=False) + "\n"
    write_atomically(path, lambda f: f.write(text.encode()))


def _finite(value: Any) -> Any:
    """``value`` with every NaN or infinite float inside it replaced by None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def write_markdown(path: str, results: Sequence[Result], meta: dict[str, Any],
                   extra: Sequence[str] = ()) -> None:
    """A results page, written atomically: how to re-run it, the machine, the table, the
    ratios, and the ``extra`` sections (markdown) at the end."""
    gpus = " + " + ", ".join(meta["gpus"]) if meta["gpus"] else ""
    text = "\n\n".join([
        f"# dualtape bench on {meta['cpu']}{gpus}",
        f"Re-run with (from the repository root):\n\n```\n{meta['command']}\n```",
        header_text(meta) + f"\n- wall time of the run: {meta.get('seconds', '?')} s",
        "## Times\n\n" + table(results),
        *([f"## Characters per second\n\n{chars}"] if (chars := throughput(results)) else []),
        f"## References, {FASTER}\n\n" + (ratios(results) or "No reference rows in this run."),
        "## Distance from the structural bound\n\n" + (bound_distance(results)
                                                          or "Not measured in this run."),
        *([f"## Memory of one training call\n\n{mem}"] if (mem := memory_table(results))
          else []),
        how_to_read(results),
        *extra,
    ])
    write_atomically(path, lambda f: f.write((text + "\n").encode()))


def require_matplotlib() -> None:
    """Fail early, with the fix, when ``--plot`` is asked for without matplotlib."""
    if importlib.util.find_spec("matplotlib") is None:
        raise SystemExit("dualtape bench: --plot needs matplotlib: pip install 'dualtape[bench]'")


def plot_format(path: str) -> str:
    """The image format ``path``'s suffix names (``png``, ``pdf``, ``svg``, ...), or
    ``ValueError`` when matplotlib writes no such format."""
    require_matplotlib()
    from matplotlib.backend_bases import FigureCanvasBase

    formats = FigureCanvasBase.get_supported_filetypes()
    suffix = os.path.splitext(path)[1][1:].lower()
    if suffix not in formats:
        raise ValueError(f"--plot {path}: the name must end in a format matplotlib writes: "
                         f"{', '.join('.' + f for f in sorted(formats))}")
    return suffix


def plot(path: str, results: Sequence[Result]) -> None:
    """× faster than numpy (same dtype) against batch size (train, fifty time steps) and hidden
    size (one LSTM step forwards, and backwards): one colour per row, one line style per dtype;
    written atomically, in the format ``path``'s suffix names."""
    require_matplotlib()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import LogLocator, NullFormatter, ScalarFormatter

    panels = [
        (lambda w: w.op == "train" and w.steps == 50, lambda w: w.batch, "batch size",
         "train, fifty time steps"),
        (lambda w: w.op == "forwards", lambda w: w.size, "hidden size", "one step forwards"),
        (lambda w: w.op == "backwards", lambda w: w.size, "hidden size", "one step backwards"),
    ]
    labels = list(dict.fromkeys(_row_label(r) for r in results if r.runner != "numpy"))
    colours = {label: plt.get_cmap("tab10")(k % 10) for k, label in enumerate(labels)}
    fig, axes = plt.subplots(1, len(panels), figsize=(14, 4.5))
    for axis, (chosen, x_of, xlabel, title) in zip(axes, panels, strict=True):
        lines: dict[tuple[str, str], list[tuple[int, float]]] = {}
        for r in results:
            base = _numpy(results, r)
            if chosen(r.workload) and r.samples and base and _row_label(r) != "numpy":
                point = (x_of(r.workload), base.median_ms / r.median_ms)
                lines.setdefault((_row_label(r), r.dtype), []).append(point)
        for (label, dtype), points in sorted(lines.items()):
            xs, ys = zip(*sorted(points), strict=True)
            axis.plot(xs, ys, color=colours[label], marker="o" if dtype == "float32" else "s",
                      linestyle="--" if dtype == "float32" else "-", label=f"{label} {dtype}")
        axis.axhline(1.0, color="grey", linewidth=0.8, label="numpy (dualtape)")
        axis.set(xscale="log", yscale="log", xlabel=xlabel, title=title,
                 ylabel="× faster than dualtape on numpy (same dtype)")
        ticks = sorted({x for points in lines.values() for x, _ in points})
        if ticks:
            axis.set_xticks(ticks)
        axis.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
        for scale in (axis.xaxis, axis.yaxis):
            scale.set_major_formatter(ScalarFormatter())
            scale.set_minor_formatter(NullFormatter())
        axis.legend(fontsize=6)
    fig.tight_layout()
    try:
        write_atomically(path, lambda f: fig.savefig(f, format=plot_format(path), dpi=120))
    finally:
        plt.close(fig)
