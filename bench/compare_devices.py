"""Compare devices: ``dualtape bench`` with its reference rows, and optionally the
"where the time goes" profile and a re-run without the OpenBLAS tuning variables.

Run from the repository root, e.g. the full CPU run behind ``bench/results/``::

    python bench/compare_devices.py --threads 1 --profile --rerun-without-openblas-env \\
        --markdown 'bench/results/{date}-cpu.md' --json 'bench/results/{date}-cpu.json' \\
        --plot 'bench/results/{date}-cpu.png'

``{date}`` in a path becomes today's date. Every ``dualtape bench`` option works here; it runs
the same code (``dualtape.benchmarks.cli.execute``), reference rows included.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Sequence
from datetime import date
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from dualtape.benchmarks import cli as bench_cli  # noqa: E402
from dualtape.benchmarks.measure import Result  # noqa: E402

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
               "--references", "none", "--workloads", "train", "--dtypes", args.dtypes]
    if args.threads:
        command += ["--threads", str(args.threads)]
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
    """Issue 4's targets, numpy float64 batch 1 train fifty-time-steps: at least 4× faster than
    naive, faster than torch autograd; and the torch.nn.LSTM ratio for context."""
    rows = {r.runner: r for r in results if r.workload.key == "train/fifty-time-steps"
            and r.dtype == "float64" and r.samples}
    title = "## Targets (numpy, float64, batch 1, train fifty-time-steps)"
    if "numpy" not in rows:
        return f"{title}\n\nNot measured in this run."
    threads = meta["threads"]["requested"]
    lines = [title, "", f"dualtape on numpy: {rows['numpy'].median_ms:.1f} ms, "
             f"{f'--threads {threads}' if threads else 'threads as configured'}.", "",
             "| reference | its median | dualtape is … faster | target | met |",
             "| --- | ---: | ---: | --- | --- |"]
    goals = {"naive": 4.0, "torch-autograd": 1.0, "torch.nn.LSTM": None}
    for name, goal in goals.items():
        if name in rows:
            ratio = rows[name].median_ms / rows["numpy"].median_ms
            wanted = "–" if goal is None else f"≥ {goal:g}×" if goal > 1 else "> 1×"
            met = "–" if goal is None else ("yes" if ratio >= goal else "no")
            lines.append(f"| {name} | {rows[name].median_ms:.1f} ms | {ratio:.2f}× | {wanted} "
                         f"| {met} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the comparison; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    today = date.today().isoformat()
    for name in ("json", "markdown", "plot"):
        if getattr(args, name):
            setattr(args, name, getattr(args, name).replace("{date}", today))
    quoted = " ".join(f"'{a}'" if "{" in a else a for a in argv)
    results, meta = bench_cli.execute(args, command=f"python bench/compare_devices.py {quoted}")
    extra = [targets(results, meta)]
    if args.rerun_without_openblas_env:
        extra.append(openblas_rerun(args))
    if args.profile:
        from bench.profile_train import section

        extra.append(section(args.threads or 1))
    for text in extra:
        print(text)
        if args.markdown:
            with open(args.markdown, "a") as f:
                f.write("\n" + text + "\n")
    return 1 if any(r.error for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
