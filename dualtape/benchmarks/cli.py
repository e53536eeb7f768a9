"""The ``dualtape bench`` command: its options, their checks, and the printed report.

A request that cannot run is one line on stderr and exit status 1, before anything is timed:
an unknown, empty or repeated workload, backend, dtype or reference; a torch reference without
torch; backends none of which works here; ``--threads`` below 1; a ``--json``, ``--markdown``
or ``--plot`` file that could not be written (its folder missing, a folder, read-only, not a
regular file, two options naming one file, a plot format matplotlib does not write). A backend
that cannot run here (``torch:cuda`` on a CPU-only torch) beside ones that can is skipped with a
note. The files are written atomically once the report is printed; one that still fails then (a
full disk) is a line on stderr and exit status 1, as is a failed row.

Before timing, the process keeps freed memory for reuse (``allocator.keep_freed_memory``, as
``train-text`` does; every row runs under it) and the header says so, with the threads and the
CPU LSTM loop in use. ``--threads auto`` (the default) gives each row the threads train-text's
rule gives its time loop (``text/threads.py``: one thread below 8 M multiply-adds in the loop's
largest product, so every row but the largest batches runs on one); ``unset`` leaves the
libraries at their own defaults; N limits every row to N.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..allocator import keep_freed_memory
from ..backend import Backend, BackendUnavailable, available_backends
from ..text.threads import (
    AUTO,
    UNSET,
    ThreadChoice,
    busy_cores,
    choose_threads,
    limited_threads,
    parse_threads,
    threadpoolctl_installed,
    usable_cores,
)
from .bound import BoundRunner
from .measure import FULL, QUICK, Result, Timing, measure_workload, require_threadpoolctl
from .memory import compare_to_full_tape
from .output import destination
from .runners import BackendRunner, Runner, backend_from_label
from .workloads import DTYPES, QUICK_STEPS, SPEED_BACKENDS_EXCLUDED, Workload, select_workloads

NO_TORCH = ("no torch reference rows (torch-autograd, torch.nn.LSTM, torch.nn): torch is not "
            "installed; `pip install torch` adds them")
NO_JAX = ("no JAX reference row (jax, text and train groups): JAX is not installed; `pip install "
          "jax` adds it")
NO_LIBRARY = {"torch": NO_TORCH, "jax": NO_JAX}
"""The note ``--references all`` prints when a library of reference rows is missing."""
OUTPUTS = ("json", "markdown", "plot")
DEFAULTS = {"references": "all", "threads": AUTO}
QUICK_DTYPES = ("float32",)
"""The dtypes ``--quick`` times when ``--dtypes`` is not given: float64 doubles the run (80 s
against 39 with torch and JAX on an idle 2-core AMD EPYC, 2026-12-03), past its minute."""


def _refused(message: str) -> SystemExit:
    return SystemExit(f"dualtape bench: {message}")


def _names(option: str, text: str, example: str) -> list[str]:
    """The comma-separated names given to ``option``; refused when there is none or one of
    them is given twice."""
    names = [s.strip() for s in text.split(",") if s.strip()]
    if not names:
        raise _refused(f"{option} needs at least one name, e.g. {example}")
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise _refused(f"{option} names {', '.join(repeated)} more than once")
    return names


def parse_backends(text: str | None) -> tuple[list[Backend], list[str]]:
    """``numpy,cupy,torch:cuda`` -> backends, plus notes on those unavailable here; refused
    when none of the named backends works here, or two name the same backend and device.

    Default: every available backend except array_api_strict (a correctness backend)."""
    if text is None:
        names = [b for b in available_backends() if b not in SPEED_BACKENDS_EXCLUDED]
    else:
        names = _names("--backends", text, "numpy,cupy")
    backends: list[Backend] = []
    given: list[str] = []
    unavailable = []
    for item in names:
        try:
            chosen = backend_from_label(item)
        except BackendUnavailable as exc:
            unavailable.append(f"{item}: {exc}")
            continue
        except ValueError as exc:
            raise _refused(str(exc)) from None
        if chosen in backends:
            raise _refused(f"--backends {given[backends.index(chosen)]} and {item} are the "
                           "same backend and device")
        backends.append(chosen)
        given.append(item)
    if not backends:
        raise _refused("none of the requested backends can run here: " + "; ".join(unavailable))
    return backends, [f"skipped backend {reason}" for reason in unavailable]


def reference_runners(wanted: str, threads: int | None = None
                      ) -> tuple[list[Runner], list[str]]:
    """The reference rows ``--references`` asks for (all, none or a list), and notes: the
    torch or JAX rows missing from "all", and what a JAX row's threads are (``threads``:
    the ``--threads`` limit)."""
    from . import references

    names = _names("--references", wanted, "naive")
    if names == ["none"]:
        return [], []
    found: list[Runner] = [BoundRunner(), *references.reference_runners(threads)]
    missing = references.missing_libraries()
    if names == ["all"]:
        chosen, notes = found, [NO_LIBRARY[library] for library in missing]
    else:
        chosen, notes = _listed(names, found, missing), []
    return chosen, notes + [r.note for r in chosen if isinstance(r, references.JaxRunner)]


def _listed(names: list[str], found: list[Runner], missing: list[str]) -> list[Runner]:
    """The runners of ``found`` that ``names`` lists; refused when a name needs a library
    of ``missing``, or is unknown."""
    from . import references

    known = {r.label for r in found}
    unknown = sorted(set(names) - known)
    for library in missing:
        absent = [n for n in unknown if n.partition(":")[0] in references.LIBRARIES[library][0]]
        if absent:
            raise _refused(f"--references {', '.join(absent)} needs {library}, which is not "
                           f"installed here: pip install {library}")
    if unknown:
        raise _refused(f"unknown references {unknown}; here: all, none or "
                       f"{', '.join(sorted(known))}")
    return [r for r in found if r.label in names]


def _workloads(text: str | None, quick: bool) -> list[Workload]:
    try:
        chosen = select_workloads(None if text is None else
                                  _names("--workloads", text, "lstm,train/one-time-step"), quick)
    except ValueError as exc:
        raise _refused(str(exc)) from None
    if not chosen:
        raise _refused("--quick leaves none of these workloads (it drops batches above 32 "
                       f"and the memory rows above {QUICK_STEPS:,} steps)")
    return chosen


def _dtypes(text: str | None, quick: bool) -> list[str]:
    if text is None:
        return list(QUICK_DTYPES if quick else DTYPES)
    dtypes = _names("--dtypes", text, "float32")
    if set(dtypes) - set(DTYPES):
        raise _refused(f"--dtypes takes {', '.join(DTYPES)}, got {text}")
    return dtypes


def _threads(text: str, workloads: Sequence[Workload]) -> dict[str, ThreadChoice]:
    """Each workload's threads (by key) as ``--threads`` asks: a count >= 1 for every row
    (needs threadpoolctl), ``unset``, or ``auto``: train-text's rule for the row's time loop,
    on this process's cores and the cores other work keeps busy now (``busy_cores``)."""
    try:
        option = parse_threads(text)
    except ValueError as exc:
        raise _refused(str(exc)) from None
    if isinstance(option, int):
        require_threadpoolctl()
    cores, can_limit = usable_cores(), threadpoolctl_installed()
    load = busy_cores() if option == AUTO else None
    return {w.key: choose_threads(option, hidden, w.batch, gates=gates, cores=cores, load=load,
                                  can_limit=can_limit)
            for w in workloads for hidden, gates in [w.time_loop()]}


def threads_summary(option: str, chosen: dict[str, ThreadChoice]) -> str:
    """The header's account of the rows' threads: the count of every row, and why."""
    counts = {c.count for c in chosen.values()}
    extra = "" if not any(c.overlap for c in chosen.values()) else (
        "; where a row's threads leave a core free, dualtape's weight gradients take it "
        "(overlap_gradients)")
    if parse_threads(option) != AUTO or len(counts) == 1 and None in counts:
        return next(iter(chosen.values())).why + extra
    by_count: dict[int | None, list[str]] = {}
    for key, choice in chosen.items():
        by_count.setdefault(choice.count, []).append(key)
    usual = max(by_count, key=lambda n: len(by_count[n]))
    others = "; ".join(f"{n} for {', '.join(keys)}" for n, keys in by_count.items()
                       if n != usual)
    return (f"--threads auto, train-text's rule for each row's time loop: {usual} for every "
            f"row{' but: ' + others if others else ''}{extra}; --threads N or unset overrides")


def jax_limit(chosen: dict[str, ThreadChoice]) -> int | None:
    """The one thread limit JAX gets for the whole run (XLA takes it once, at start): 1 when
    every row runs on one thread, else none."""
    return 1 if {c.count for c in chosen.values()} == {1} else None


def _outputs(args: argparse.Namespace) -> dict[str, str]:
    """``{"--json": path, ...}`` for the files asked for, each checked writable; refused when
    one cannot be written or two options name the same file."""
    from . import report

    chosen: dict[str, str] = {}
    targets: dict[Any, str] = {}
    for name in OUTPUTS:
        path, option = getattr(args, name), f"--{name}"
        if path is None:
            continue
        try:
            if name == "plot":
                report.plot_format(path)
            target = destination(option, path)
        except ValueError as exc:
            raise _refused(str(exc)) from None
        if target in targets:
            raise _refused(f"{targets[target]} and {option} name the same file, {path}")
        targets[target] = option
        chosen[option] = path
    return chosen


@dataclass(frozen=True)
class Request:
    """A checked ``dualtape bench`` request: what to time, on what, and the files to write."""

    dtypes: list[str]
    workloads: list[Workload]
    runners: list[Runner]
    notes: list[str]
    outputs: dict[str, str]
    timing: Timing
    threads: dict[str, ThreadChoice]
    threads_line: str


def check(args: argparse.Namespace) -> Request:
    """Every option of ``args`` checked before anything is timed; a refusal raises
    ``SystemExit`` with one line."""
    workloads = _workloads(args.workloads, args.quick)
    threads = _threads(args.threads, workloads)
    outputs = _outputs(args)
    dtypes = _dtypes(args.dtypes, args.quick)
    backends, notes = parse_backends(args.backends)
    references, reference_notes = reference_runners(args.references, jax_limit(threads))
    runners: list[Runner] = [*(BackendRunner(b) for b in backends), *references]
    return Request(dtypes, workloads, runners, notes + reference_notes, outputs,
                   QUICK if args.quick else FULL, threads, threads_summary(args.threads, threads))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``dualtape bench`` (also used by ``bench/compare_devices.py``)."""
    parser.add_argument(
        "--backends", metavar="LIST",
        help="comma-separated backends, NAME or NAME:DEVICE (e.g. numpy,cupy,torch:cuda); "
             "default: every available one except array_api_strict, which is a correctness "
             "backend (it checks the array-API contract), not a speed one",
    )
    parser.add_argument("--dtypes", metavar="LIST",
                        help="comma-separated dtypes (default: float32,float64; float32 with "
                             "--quick)")
    parser.add_argument("--workloads", metavar="LIST",
                        help="groups (lstm, update, train, text, cells, conv, memory), "
                             "names or group/name; default: all but memory (minutes and "
                             "GBs: run it by name)")
    parser.add_argument("--references", default="all", metavar="LIST",
                        help="reference rows: all (default), none, or a list of "
                             "structural-bound, naive, torch-autograd, torch.nn.LSTM, torch.nn, "
                             "jax "
                             "(the torch ones need torch, jax needs JAX)")
    parser.add_argument("--quick", action="store_true",
                        help="fewer, shorter samples, float32 only (unless --dtypes says), no run "
                             "above batch 32 and no memory row above 1,000 steps (under a "
                             "minute)")
    parser.add_argument("--threads", default=AUTO, metavar="N",
                        help=f"{AUTO} (default): each row the BLAS/OpenMP and torch threads "
                             "train-text's rule gives its time loop (one, but for the largest "
                             f"batches); {UNSET}: the libraries' own; N: N for every row "
                             "(threadpoolctl); the project's targets are measured with "
                             "--threads 1")
    parser.add_argument("--json", metavar="FILE", help="write all samples and machine details")
    parser.add_argument("--markdown", metavar="FILE", help="write the table as a results page")
    parser.add_argument("--plot", metavar="FILE.png",
                        help="draw × faster than numpy against batch size and hidden size "
                             "(needs matplotlib, in the bench extra)")


def register(commands: Any) -> None:
    """Add the ``bench`` subcommand to ``dualtape``'s subparsers."""
    parser = commands.add_parser(
        "bench", help="time the LSTM workloads on every backend, with reference rows",
        description="Time Grenade's LSTM workloads (groups lstm, update, train) and the "
        "main job (group text: a training step of train-text's default model) and the "
        "standard LSTM and GRU at its sizes (group cells) and one convolution layer and an "
        "epoch of the digits example's network (group conv) on each backend, and, when "
        "named, the peak memory of one training call with the full and the checkpointed "
        "tape (group memory) on each backend, interleaved round-robin; print the median ms "
        "per call, min–max and how many times faster than dualtape on numpy each row is, and "
        "characters per second for the text group. Reference rows (ref:naive, "
        "ref:torch-autograd, ref:torch.nn.LSTM, ref:torch.nn, ref:jax, "
        "ref:structural-bound) compare dualtape with other implementations.",
    )
    add_arguments(parser)
    parser.set_defaults(run=run)


@dataclass
class BenchRun:
    """What ``execute`` did: the results, the machine details, and the options (``--json``,
    ...) whose file could not be written."""

    results: list[Result]
    meta: dict[str, Any]
    unwritten: list[str] = field(default_factory=list)

    @property
    def status(self) -> int:
        """The exit status: 1 when a row failed or a file was not written, else 0."""
        return 1 if self.unwritten or any(r.error for r in self.results) else 0


def run(args: argparse.Namespace) -> int:
    """Run ``dualtape bench`` with parsed ``args``; the exit status (``BenchRun.status``, 130
    after Ctrl-C)."""
    try:
        return execute(args).status
    except KeyboardInterrupt:
        print("dualtape bench: interrupted", file=sys.stderr)
        return 130


def command_line(args: argparse.Namespace) -> str:
    """The ``dualtape bench`` command that repeats ``args`` (options at their default left out)."""
    words = ["dualtape", "bench", *(["--quick"] if args.quick else [])]
    for name in ("backends", "dtypes", "workloads", "references", "threads", *OUTPUTS):
        value = getattr(args, name)
        if value is not None and value != DEFAULTS.get(name):
            words += [f"--{name}", shlex.quote(str(value))]
    return " ".join(words)


def execute(args: argparse.Namespace, command: str | None = None,
            extra: Callable[[list[Result], dict[str, Any]], Sequence[str]] | None = None,
            ) -> BenchRun:
    """Check, measure, print and write what ``args`` asks for. ``command`` is the command line
    recorded for re-running (default: ``command_line(args)``); ``extra(results, meta)`` gives
    markdown sections printed after the report and added to the ``--markdown`` page."""
    from . import report

    request = check(args)
    for note in request.notes:
        print(f"note: {note}")
    results: list[Result] = []
    memory = keep_freed_memory()
    first = request.threads[request.workloads[0].key].count
    with limited_threads(first):  # the header shows the libraries' pools under a row's limit
        meta = report.system_info(args.threads, request.threads_line,
                                  [r.label for r in request.runners], memory)
    print(report.header_text(meta), flush=True)
    started = time.perf_counter()
    for workload in request.workloads:
        print(f"... {workload.key}", file=sys.stderr, flush=True)
        choice = request.threads[workload.key]
        count = choice.count
        with limited_threads(count, choice.overlap):
            found = measure_workload(workload, request.runners, request.dtypes,
                                     request.timing, count)
        for result in found:
            result.threads = count
        results += found
    compare_to_full_tape(results)
    meta["seconds"] = round(time.perf_counter() - started, 1)
    meta["command"] = command or command_line(args)
    sections = [("Times", report.table(results)),
                ("Characters per second", report.throughput(results)),
                (f"References, {report.FASTER}", report.ratios(results)),
                ("Distance from the structural bound", report.bound_distance(results)),
                ("Memory of one training call", report.memory_table(results))]
    print("\n\n".join(f"{title}:\n{body}" for title, body in sections if body))
    print(report.how_to_read(results))
    more = list(extra(results, meta)) if extra else []
    for text in more:
        print(text)
    sys.stdout.flush()
    return BenchRun(results, meta, write_outputs(request.outputs, results, meta, more))


def write_outputs(outputs: dict[str, str], results: list[Result], meta: dict[str, Any],
                  extra: Sequence[str] = ()) -> list[str]:
    """Write each file of ``outputs`` (``{"--json": path, ...}``); the options whose file
    could not be written, each said in one line on stderr."""
    from . import report

    writers = {
        "--json": lambda path: report.write_json(path, results, meta),
        "--markdown": lambda path: report.write_markdown(path, results, meta, extra),
        "--plot": lambda path: report.plot(path, results),
    }
    failed = []
    for option, path in outputs.items():
        try:
            writers[option](path)
        except Exception as exc:  # one file that fails must not keep the others unwritten
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            print(f"dualtape bench: {option} {path} was not written: {reason}", file=sys.stderr)
            failed.append(option)
    return failed
