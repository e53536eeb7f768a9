"""Before/after timings of two checkouts of dualtape, interleaved in one run.

    git worktree add /tmp/dualtape-before <commit>
    python bench/before_after.py /tmp/dualtape-before . --rounds 7 --markdown out.md

Each round runs one child process per checkout (alternating which goes first); a child times
every case with the public API only (``RecurrentNetwork``, ``LSTM`` or ``--cell``
``StandardLSTM`` or ``GRU``, ``SGD`` or ``Adam`` (``--optimizer``), ``train_recurrent``, from
zero states or given ones: ``--state``), so any version of dualtape can be measured, on one
BLAS thread. ``--form`` gives the input as a user
may hold it: ``batched`` ``(T, B, i)`` in C order; ``single``, the first sequence alone,
``(T, i)``; ``list``, nested lists; ``batch-first``, a ``(T, B, i)`` view of a C-order
``(B, T, i)`` array, as ``xs.transpose(1, 0, 2)`` of batch-first data gives. The
report gives each side's median over rounds of the per-round medians (``--statistic min``: the
least over rounds of each round's least, the sample least disturbed on a loaded machine), and
after/before ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

# (label, layer sizes [n_in, hidden..., n_out], steps, batch, dtype)
CASES = [
    ("seed T=50 B=1 float64", [40, 512, 40], 50, 1, "float64"),
    ("seed T=50 B=1 float32", [40, 512, 40], 50, 1, "float32"),
    ("seed T=1 B=1 float64", [40, 512, 40], 1, 1, "float64"),
    ("seed T=1 B=1 float32", [40, 512, 40], 1, 1, "float32"),
    ("tiny 4-8-4 T=50 B=1 float64", [4, 8, 4], 50, 1, "float64"),
    ("tiny 4-8-4 T=50 B=1 float32", [4, 8, 4], 50, 1, "float32"),
    ("seed T=50 B=64 float32", [40, 512, 40], 50, 64, "float32"),
    ("seed T=50 B=256 float32", [40, 512, 40], 50, 256, "float32"),
    ("series 1-32-1 T=24 B=32 float32", [1, 32, 1], 24, 32, "float32"),
    ("series 1-32-1 T=52 B=64 float32", [1, 32, 1], 52, 64, "float32"),
]

CHILD = r"""
import json, sys, time
import numpy as np
import dualtape as dt
from threadpoolctl import threadpool_limits

def typical_ms(run, budget, statistic):
    run(); run()
    start = time.perf_counter(); run(); once = time.perf_counter() - start
    number = max(1, int(0.02 / max(once, 1e-9)))
    samples = []
    deadline = time.perf_counter() + budget
    while len(samples) < 5 or (time.perf_counter() < deadline and len(samples) < 200):
        start = time.perf_counter()
        for _ in range(number):
            run()
        samples.append((time.perf_counter() - start) / number * 1e3)
    return float(min(samples) if statistic == "min" else np.median(samples))

out = {}
with threadpool_limits(1), dt.use_backend("numpy"):
    for label, sizes, steps, batch, dtype in json.loads(sys.argv[1]):
        layers = [getattr(dt, sys.argv[7])(a, b, seed=k + 1, dtype=dtype) for k, (a, b) in
                  enumerate(zip(sizes, sizes[1:]))]
        net = dt.RecurrentNetwork(layers)
        xs = np.random.default_rng(0).uniform(-1, 1, (steps, batch, sizes[0])).astype(dtype)
        form, targets = sys.argv[6], xs
        if form == "single":
            xs = targets = xs[:, 0].copy()
        given = xs.tolist() if form == "list" else np.ascontiguousarray(
            xs.transpose(1, 0, 2)).transpose(1, 0, 2) if form == "batch-first" else xs
        opt = dt.Adam(1e-3) if sys.argv[3] == "adam" else dt.SGD(0.1)
        state = [np.zeros(xs.shape[1:-1] + (layer.state_size,), dtype) for layer in layers] \
            if sys.argv[4] == "given" else None
        out[label] = typical_ms(lambda: dt.train_recurrent(net, given, targets, opt,
                                                           state=state),
                                float(sys.argv[2]), sys.argv[5])
print(json.dumps(out))
"""


def run_child(checkout: Path, cases: list, budget: float, optimizer: str, state: str,
              statistic: str, form: str, cell: str) -> dict[str, float]:
    """One child process timing every case with ``checkout``'s dualtape first on the path."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(PYTHONPATH=str(checkout.resolve()), OMP_NUM_THREADS="1",
               OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    done = subprocess.run([sys.executable, "-c", CHILD, json.dumps(cases), str(budget),
                           optimizer, state, statistic, form, cell],
                          env=env, capture_output=True, text=True, cwd=checkout, check=True)
    return json.loads(done.stdout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--budget", type=float, default=1.0, help="seconds per case and child")
    parser.add_argument("--cases", default="", help="comma-separated substrings of case labels")
    parser.add_argument("--markdown", help="also write the table to this file")
    parser.add_argument("--optimizer", choices=("sgd", "adam"), default="sgd")
    parser.add_argument("--state", choices=("zeros", "given"), default="zeros")
    parser.add_argument("--statistic", choices=("median", "min"), default="median")
    parser.add_argument("--form", choices=("batched", "single", "list", "batch-first"),
                        default="batched")
    parser.add_argument("--cell", choices=("LSTM", "StandardLSTM", "GRU"), default="LSTM")
    args = parser.parse_args()
    wanted = [c for c in CASES if not args.cases or any(s in c[0] for s in args.cases.split(","))]
    samples: dict[str, dict[str, list[float]]] = {"before": {}, "after": {}}
    for k in range(args.rounds):
        order = [("before", args.before), ("after", args.after)]
        for side, checkout in order if k % 2 == 0 else order[::-1]:
            for label, ms in run_child(checkout, wanted, args.budget, args.optimizer,
                                       args.state, args.statistic, args.form,
                                       args.cell).items():
                samples[side].setdefault(label, []).append(ms)
        print(f"round {k + 1}/{args.rounds} done", file=sys.stderr)
    typical = min if args.statistic == "min" else statistics.median
    lines = [f"Interleaved run: {args.rounds} rounds, {args.statistic}s in ms, one BLAS thread, "
             f"{args.cell}, {args.optimizer}, {args.state} states, {args.form} input; before = "
             f"{args.before}, after = "
             f"{args.after}.", "",
             "| case | before | after | after / before |", "| --- | ---: | ---: | ---: |"]
    for label, *_ in wanted:
        before = typical(samples["before"][label])
        after = typical(samples["after"][label])
        lines.append(f"| {label} | {before:.2f} | {after:.2f} | {after / before:.2f}× |")
    text = "\n".join(lines)
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
