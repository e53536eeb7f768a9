"""The ``dualtape bench`` command: its options, their checks, and the printed report.

A request that cannot run (an unknown workload, backend, dtype or reference, a torch reference
without torch, backends none of which works here) is one line on stderr and exit status 1,
before anything is timed.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from ..backend import Backend, BackendUnavailable, available_backends, resolve_backend
from .bound import BoundRunner
from .measure import (
    DTYPES,
    FULL,
    QUICK,
    SPEED_BACKENDS_EXCLUDED,
    BackendRunner,
    Result,
    Runner,
    Workload,
    limited_threads,
    measure_workload,
    select_workloads,
)

NO_TORCH = ("no torch reference rows (torch-autograd, torch.nn.LSTM): torch is not installed; "
            "`pip install torch` adds them")


def _refused(message: str) -> SystemExit:
    return SystemExit(f"dualtape bench: {message}")


def parse_backends(text: str | None) -> tuple[list[Backend], list[str]]:
    """``numpy,cupy,torch:cuda`` -> backends, plus notes on those unavailable here; refused
    when none of the named backends works here.

    Default: every available backend except array_api_strict (a correctness backend)."""
    if text is None:
        names = [b for b in available_backends() if b not in SPEED_BACKENDS_EXCLUDED]
    else:
        names = [s.strip() for s in text.split(",") if s.strip()]
        if not names:
            raise _refused("--backends needs at least one name, e.g. numpy,cupy")
    backends, notes = [], []
    for item in names:
        name, _, device = item.partition(":")
        try:
            where = int(device) if device.isdigit() else device or None
            backends.append(resolve_backend(name, where))
        except BackendUnavailable as exc:
            notes.append(f"skipped backend {item}: {exc}")
        except ValueError as exc:
            raise _refused(str(exc)) from None
    if not backends:
        raise _refused("none of the requested backends can run here: " + "; ".join(notes))
    return backends, notes


def reference_runners(wanted: str) -> tuple[list[Runner], list[str]]:
    """The reference rows ``--references`` asks for (all, none or a list), and a note when the
    torch rows are missing from "all"."""
    from . import references

    if wanted == "none":
        return [], []
    found: list[Runner] = [BoundRunner(), *references.reference_runners()]
    torch = references.torch_installed()
    if wanted == "all":
        return found, [] if torch else [NO_TORCH]
    names = {s.strip() for s in wanted.split(",") if s.strip()}
    known = {r.label for r in found}
    needs_torch = sorted(n for n in names - known
                         if n.partition(":")[0] in references.TORCH_REFERENCES)
    if needs_torch and not torch:
        raise _refused(f"--references {', '.join(needs_torch)} needs torch, which is not "
                       "installed here: pip install torch")
    if names - known or not names:
        raise _refused(f"unknown references {sorted(names - known)}; here: all, none or "
                       f"{', '.join(sorted(known))}")
    return [r for r in found if r.label in names], []


def _workloads(text: str | None, quick: bool) -> list[Workload]:
    try:
        chosen = select_workloads(text.split(",") if text else None, quick)
    except ValueError as exc:
        raise _refused(str(exc)) from None
    if not chosen:
        raise _refused("--quick leaves none of these workloads (it drops batches above 32)")
    return chosen


def _dtypes(text: str) -> list[str]:
    dtypes = [d.strip() for d in text.split(",")]
    if set(dtypes) - set(DTYPES):
        raise _refused(f"--dtypes takes {', '.join(DTYPES)}, got {text}")
    return dtypes


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``dualtape bench`` (also used by ``bench/compare_devices.py``)."""
    parser.add_argument(
        "--backends", metavar="LIST",
        help="comma-separated backends, NAME or NAME:DEVICE (e.g. numpy,cupy,torch:cuda); "
             "default: every available one except array_api_strict, which is a correctness "
             "backend (it checks the array-API contract), not a speed one",
    )
    parser.add_argument("--dtypes", default=",".join(DTYPES), metavar="LIST",
                        help="comma-separated dtypes (default: float32,float64)")
    parser.add_argument("--workloads", metavar="LIST",
                        help="groups (lstm, update, train), names or group/name; default: all")
    parser.add_argument("--references", default="all", metavar="LIST",
                        help="reference rows: all (default), none, or a list of "
                             "structural-bound, naive, torch-autograd, torch.nn.LSTM "
                             "(the torch ones need torch)")
    parser.add_argument("--quick", action="store_true",
                        help="fewer, shorter samples and no run above batch 32 (under a minute)")
    parser.add_argument("--threads", type=int, metavar="N",
                        help="limit BLAS/OpenMP and torch threads to N (threadpoolctl); "
                             "default: not limited; the project's targets are measured with "
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
        description="Time Grenade's LSTM workloads (groups lstm, update, train) on each "
        "backend, interleaved round-robin; print the median ms per call, min–max and how many "
        "times faster than dualtape on numpy each row is. Reference rows (ref:naive, "
        "ref:torch-autograd, ref:torch.nn.LSTM, ref:structural-bound) compare dualtape with "
        "other implementations of the same maths.",
    )
    add_arguments(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Run ``dualtape bench`` with parsed ``args``; 1 when a row failed, else 0."""
    results, _ = execute(args)
    return 1 if any(r.error for r in results) else 0


def execute(args: argparse.Namespace,
            command: str | None = None) -> tuple[list[Result], dict[str, Any]]:
    """Check, measure, print and write what ``args`` asks for; return the results and the
    machine details. ``command`` is the command line recorded for re-running."""
    from . import report

    if args.plot:
        report.require_matplotlib()
    dtypes = _dtypes(args.dtypes)
    workloads = _workloads(args.workloads, args.quick)
    backends, notes = parse_backends(args.backends)
    references, reference_notes = reference_runners(args.references)
    for note in notes + reference_notes:
        print(f"note: {note}")
    runners: list[Runner] = [*(BackendRunner(b) for b in backends), *references]
    timing = QUICK if args.quick else FULL
    results: list[Result] = []
    with limited_threads(args.threads):
        meta = report.system_info(args.threads, [r.label for r in runners])
        print(report.header_text(meta), flush=True)
        started = time.perf_counter()
        for workload in workloads:
            print(f"... {workload.key}", file=sys.stderr, flush=True)
            results += measure_workload(workload, runners, dtypes, timing)
    meta["seconds"] = round(time.perf_counter() - started, 1)
    meta["command"] = command or "dualtape bench " + " ".join(sys.argv[2:])
    sections = [("Times", report.table(results)),
                (f"References, {report.FASTER}", report.ratios(results)),
                ("Distance from the structural bound", report.bound_distance(results))]
    print("\n\n".join(f"{title}:\n{body}" for title, body in sections if body))
    print(report.how_to_read(results))
    if args.json:
        report.write_json(args.json, results, meta)
    if args.markdown:
        report.write_markdown(args.markdown, results, meta)
    if args.plot:
        report.plot(args.plot, results)
    return results, meta
