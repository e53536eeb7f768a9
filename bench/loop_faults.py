"""Page faults and CPU seconds of a user's own training loop, per cell, for before/after.

The forecaster's loop (``bench/forecaster.py``: one cell of 32 units on one input feature,
``FullyConnected(32, 1)``, T = 52, B = 64, float32, ``backpropagate_sequence`` with the loss
at the last step through a mask, ``clip_gradients``, ``Adam().step``, ``float(loss)``) on 28
random batches an epoch, in a process that never calls ``keep_freed_memory`` (as a user's
does not) unless ``--keep-freed-memory``; one BLAS thread. Prints, per cell, the median CPU
seconds of ``--epochs`` epochs after one untimed, the minor page faults per call
(``getrusage``) and the route. ``--pairs BEFORE`` runs this checkout and the one at BEFORE in
alternating processes, ``--rounds`` times, and prints each side's median and the ratio:

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/loop_faults.py --pairs /tmp/before
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

CELLS = ("LSTM", "StandardLSTM", "GRU")


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cells", default=",".join(CELLS), help="comma-separated (default: all)")
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--root", default=".", help="the dualtape checkout to run (default: here)")
    p.add_argument("--keep-freed-memory", action="store_true")
    p.add_argument("--pairs", metavar="BEFORE", default=None)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--json", action="store_true", help="one JSON line per cell")
    args = p.parse_args(argv)
    bad = set(args.cells.split(",")) - set(CELLS)
    if bad or args.epochs < 1 or args.rounds < 1:
        p.error(f"--cells among {CELLS}, --epochs and --rounds at least 1 (got {sorted(bad)})")
    return args


def measure(cell: str, epochs: int, keep: bool) -> dict:
    """One cell's loop in this process."""
    import numpy as np
    from threadpoolctl import threadpool_limits

    import dualtape as dt

    threadpool_limits(1)
    if keep:
        dt.keep_freed_memory()
    net = dt.RecurrentNetwork([getattr(dt, cell)(1, 32, seed=0),
                               dt.FullyConnected(32, 1, seed=1)])
    rng = np.random.default_rng(0)
    optimizer, mask = dt.Adam(), np.zeros(52, bool)
    mask[-1] = True
    data = [rng.standard_normal((53, 64)).astype("float32") for _ in range(28)]

    def epoch() -> None:
        for cut in data:
            result = dt.backpropagate_sequence(net, cut[:-1, :, None], cut[1:, :, None],
                                               mask=mask)
            grads, _ = dt.clip_gradients(result.grads, 0.5)
            optimizer.step(net.params, grads)
            float(result.loss)

    epoch()
    times, faults = [], resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(epochs):
        began = time.process_time()
        epoch()
        times.append(time.process_time() - began)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
    route = dt.last_route(net, "backpropagate_sequence")
    return {"cell": cell, "seconds": statistics.median(times),
            "faults": faults / (epochs * len(data)), "route": f"{route[1]}, {route[2]}"}


def child(root: str, cell: str, args: argparse.Namespace) -> dict:
    command = [sys.executable, __file__, "--root", root, "--cells", cell, "--epochs",
               str(args.epochs), "--json"]
    env = {**os.environ, "PYTHONPATH": root}
    out = subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout
    return json.loads(out.splitlines()[-1])


def main(argv: list[str]) -> None:
    args = parse(argv)
    cells = args.cells.split(",")
    if args.pairs is None:
        sys.path.insert(0, args.root)
        for cell in cells:
            got = measure(cell, args.epochs, args.keep_freed_memory)
            print(json.dumps(got) if args.json else
                  f"{cell:>12}: {got['seconds']:.4f} s an epoch, {got['faults']:.0f} faults a "
                  f"call, route {got['route']}")
        return
    for cell in cells:
        ratios, sides = [], {"after": [], "before": []}
        for k in range(args.rounds):
            order = [("after", "."), ("before", args.pairs)]
            for side, root in order if k % 2 == 0 else order[::-1]:
                sides[side].append(child(root, cell, args))
            ratios.append(sides["after"][-1]["seconds"] / sides["before"][-1]["seconds"])
        after, before = ([statistics.median(r["seconds"] for r in sides[s])
                          for s in ("after", "before")])
        print(f"{cell:>12}: after {after:.4f} s ({sides['after'][-1]['faults']:.0f} faults a "
              f"call), before {before:.4f} s ({sides['before'][-1]['faults']:.0f}); after/before "
              f"{statistics.median(ratios):.3f} (range {min(ratios):.3f}-{max(ratios):.3f}, "
              f"{args.rounds} pairs)")


if __name__ == "__main__":
    main(sys.argv[1:])
