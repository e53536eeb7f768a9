"""The peak memory of ``dualtape.load`` as a multiple of the model it returns.

    python bench/load_peak.py [--mb 100] [--layers 1]

Saves a float32 ``Network`` of ``--layers`` square ``FullyConnected`` layers holding about
``--mb`` MB of parameters, then loads it in two fresh processes (``--child``), each having
loaded a tiny model first (the modules a first ``load`` imports, some 8 MB that stay, are not
counted), and prints two peaks of the ``load``, each divided by the model's bytes:

- ``traced``: the peak of the bytes allocated during ``load`` and alive at once
  (``dualtape.meters.traced_peak``: tracemalloc, which numpy reports its arrays to), what the
  model and every copy made on the way occupy;
- ``rss``: how far the peak resident memory rose during ``load`` (``memory.resident_increase``:
  Linux ``VmHWM``), in a process without tracemalloc (whose bookkeeping costs memory too).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

import dualtape
from dualtape.benchmarks.memory import resident_increase
from dualtape.meters import traced_peak


def child(path: str, warm: str, how: str) -> dict[str, int | None]:
    """The peak (bytes) of one ``load(path)`` in this process after one of ``warm``, measured
    ``how``, beside the model's bytes."""
    dualtape.load(warm, backend="numpy")
    loaded = []
    call = lambda: loaded.append(dualtape.load(path, backend="numpy"))  # noqa: E731
    peak = traced_peak(call) if how == "traced" else resident_increase(call)[0]
    model = sum(p.nbytes for group in loaded[0].params for p in group.values())
    return {"model": model, "peak": peak}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=100.0, help="model size in MB (1e6 bytes)")
    parser.add_argument("--layers", type=int, default=1)
    parser.add_argument("--child", nargs=3, metavar=("PATH", "WARM", "HOW"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(*args.child)))
        return
    n = math.isqrt(int(args.mb * 1e6 / 4 / args.layers))
    net = dualtape.Network([dualtape.FullyConnected(n, n, seed=k) for k in range(args.layers)])
    with tempfile.TemporaryDirectory() as folder:
        path, warm = os.path.join(folder, "model.npz"), os.path.join(folder, "warm.npz")
        dualtape.save(net, path)
        dualtape.save(dualtape.Network([dualtape.FullyConnected(2, 2)]), warm)
        del net
        for how in ("traced", "rss"):
            out = subprocess.run([sys.executable, __file__, "--child", path, warm, how],
                                 check=True, capture_output=True, text=True).stdout
            found = json.loads(out)
            if found["peak"] is None:
                print(f"{how}: not measured here")
                continue
            print(f"{how}: peak {found['peak'] / 1e6:.1f} MB for a {found['model'] / 1e6:.1f} "
                  f"MB model: {found['peak'] / found['model']:.2f}x")


if __name__ == "__main__":
    main()
