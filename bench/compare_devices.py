"""Compare devices: ``dualtape bench`` with its reference rows, and optionally the
"where the time goes" profile and a re-run without the OpenBLAS tuning variables.

Run from the repository root, e.g. the full CPU run behind ``bench/results/``::

    python bench/compare_devices.py --threads 1 --profile --rerun-without-openblas-env \\
        --markdown 'bench/results/{date}-cpu.md' --json 'bench/results/{date}-cpu.json' \\
        --plot 'bench/results/{date}-cpu.png'

``{date}`` in a path becomes today's date. Every ``dualtape bench`` option works here, with the
same checks before anything is timed; it runs the same code (``dualtape.benchmarks.cli.execute``),
reference rows included, and its own sections go into the ``--markdown`` page, written
atomically with the rest.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from datetime import date
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from dualtape.benchmarks import cli as bench_cli  # noqa: E402
from dualtape.benchmarks.measure import Result  # noqa: E402
from dualtape.benchmarks.report import FASTER  # noqa: E402

OPENBLAS_TUNING = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")


def build_parser() -> argparse.ArgumentParser:
    """``dualtape bench``'s options plus ``--profile`` and ``--rerun-without-openblas-env``."""
    parser = argparse.ArgumentParser(prog="python bench/compare_devices.py",
                                     description=__doc__.split("\n\n")[0])
    bench_cli.add_arguments(parser)
    parser.add_argument("--profile", action="store_true",
                        help="append where the time of numpy float64 batch-1 training goes")
    parser.add_argument("--rerun-without-openblas-env", action="store_true",
                        help="if OPENBLAS_CORETYPE/OPENBLAS_L2_SIZE are set, time the numpy "
                             "train rows again in a child process without them")
    return parser


def openblas_rerun(args: argparse.Namespace) -> str:
    """A markdown section: the numpy train rows again with the OpenBLAS tuning unset."""
    found = {k: os.environ[k] for k in OPENBLAS_TUNING if k in os.environ}
    title = "## OpenBLAS tuning variables"
    if not found:
        return (f"{title}\n\nNeither {' nor '.join(OPENBLAS_TUNING)} is set in this "
                "environment, so there is nothing to re-run: the rows above are the "
                "unset case.")
    env = {k: v for k, v in os.environ.items() if k not in OPENBLAS_TUNING}
    command = [sys.executable, str(Path(__file__).resolve()), "--backends", "numpy",
               "--references", "none", "--workloads", "train", "--threads", args.threads]
    if args.dtypes is not None:
        command += ["--dtypes", args.dtypes]
    if args.quick:
        command.append("--quick")
    done = subprocess.run(command, env=env, capture_output=True, text=True, cwd=ROOT)
    table = done.stdout[done.stdout.find("| workload"):]
    table = table[: table.find("\n\n")] if "\n\n" in table else table
    unset = " ".join(f"-u {k}" for k in found)
    return (f"{title}\n\nThe rows above ran with "
            f"{', '.join(f'{k}={v}' for k, v in found.items())}. The numpy train rows again "
            f"with them unset (`env {unset} ...`, in that child process only):\n\n{table}")


def targets(results: Sequence[Result], meta: dict[str, Any]) -> str:
    """Issue 4's targets, numpy float64 batch 1 train fifty-time-steps, in × faster than numpy:
    naive at most 0.25× (dualtape at least 4× faster), torch autograd below 1×; and the
    torch.nn.LSTM ratio for context."""
    rows = {r.runner: r for r in results if r.workload.key == "train/fifty-time-steps"
            and r.dtype == "float64" and r.samples}
    title = "## Targets (numpy, float64, batch 1, train fifty-time-steps)"
    if "numpy" not in rows:
        return f"{title}\n\nNot measured in this run."
    threads = meta["threads"]["requested"]
    lines = [title, "", f"dualtape on numpy: {rows['numpy'].median_ms:.1f} ms, "
             f"{f'--threads {threads}' if threads else 'threads as configured'}.", "",
             f"| reference | its median | {FASTER} | target | met |",
             "| --- | ---: | ---: | --- | --- |"]
    goals: dict[str, tuple[str, Callable[[float], bool]] | None] = {
        "naive": ("≤ 0.25×", lambda ratio: ratio <= 0.25),
        "torch-autograd": ("< 1×", lambda ratio: ratio < 1),
        "torch.nn.LSTM": None,
    }
    for name, goal in goals.items():
        if name in rows:
            ratio = rows["numpy"].median_ms / rows[name].median_ms
            wanted, met = ("–", "–") if goal is None else (goal[0], "yes" if goal[1](ratio)
                                                            else "no")
            lines.append(f"| {name} | {rows[name].median_ms:.1f} ms | {ratio:.2f}× | {wanted} "
                         f"| {met} |")
    return "\n".join(lines)


def sections(args: argparse.Namespace, results: Sequence[Result], meta: dict[str, Any]
             ) -> list[str]:
    """The markdown sections this script adds after ``dualtape bench``'s report."""
    found = [targets(results, meta)]
    if args.rerun_without_openblas_env:
        found.append(openblas_rerun(args))
    if args.profile:
        from bench.profile_train import section

        found.append(section(int(args.threads) if args.threads.isdigit() else 1))
    return found


def main(argv: Sequence[str] | None = None) -> int:
    """Run the comparison; returns the exit status (``dualtape bench``'s)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    today = date.today().isoformat()
    for name in ("json", "markdown", "plot"):
        if getattr(args, name) is not None:
            setattr(args, name, getattr(args, name).replace("{date}", today))
    quoted = " ".join(f"'{a}'" if "{" in a else a for a in argv)
    done = bench_cli.execute(args, command=f"python bench/compare_devices.py {quoted}",
                             extra=lambda results, meta: sections(args, results, meta))
    return done.status
