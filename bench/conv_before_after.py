"""The conv group before and after a change, interleaved, each against torch.nn in its run.

    git worktree add /tmp/dualtape-before <commit>
    python bench/conv_before_after.py /tmp/dualtape-before . --rounds 5

Each round runs ``dualtape bench --workloads conv --backends numpy --references torch.nn
--threads 1`` once per checkout (alternating which goes first), with that checkout first on
``PYTHONPATH``; the report gives, per workload, each side's median over rounds of dualtape's
median, of dualtape / torch.nn in the same run, and of after / before in the same round.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path


def run_bench(checkout: Path, dtype: str) -> dict[str, tuple[float, float]]:
    """``{workload: (dualtape ms, torch.nn ms)}`` from one bench run of ``checkout``."""
    env = {**os.environ, "PYTHONPATH": str(checkout.resolve())}
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        subprocess.run([sys.executable, "-m", "dualtape.cli", "bench", "--workloads", "conv",
                        "--backends", "numpy", "--references", "torch.nn", "--threads", "1",
                        "--dtypes", dtype, "--json", out.name], env=env, cwd=checkout,
                       check=True, capture_output=True)
        results = json.loads(Path(out.name).read_text())["results"]
    times: dict[str, dict[bool, float]] = {}
    for row in results:
        times.setdefault(row["workload"], {})[row["reference"]] = row["median_ms"]
    return {name: (t[False], t[True]) for name, t in times.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--dtype", default="float32")
    args = parser.parse_args()
    rounds = []
    for k in range(args.rounds):
        order = [("before", args.before), ("after", args.after)]
        done = {side: run_bench(path, args.dtype) for side, path in order[::1 - 2 * (k % 2)]}
        rounds.append(done)
        print(f"round {k + 1}: " + json.dumps(done), file=sys.stderr, flush=True)
    print("| workload | before ms | after ms | after / before | before / torch.nn "
          "| after / torch.nn |\n| --- | ---: | ---: | ---: | ---: | ---: |")
    for name in rounds[0]["before"]:
        pairs = [(r["before"][name], r["after"][name]) for r in rounds]
        cells = [statistics.median(f(b, a) for b, a in pairs) for f in (
            lambda b, a: b[0], lambda b, a: a[0], lambda b, a: a[0] / b[0],
            lambda b, a: b[0] / b[1], lambda b, a: a[0] / a[1])]
        print(f"| {name} | {cells[0]:.2f} | {cells[1]:.2f} | {cells[2]:.2f}x | {cells[3]:.2f}x "
              f"| {cells[4]:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
