"""backpropagate_sequence with a last-step mask or given initial states, timed with the
public API of the dualtape found first on the path (a checkout given as the first argument),
so that two checkouts run in turn give a before/after:

    for v in /tmp/dualtape-before .; do python bench/planned_masked.py $v; done

Prints one JSON object: each case's median milliseconds per call over 9 batches of calls,
float32, one BLAS thread.
"""

from __future__ import annotations

import json
import sys
import time

CASES = [("tiny 4-8-4 T=50 B=1", [4, 8, 4], 50, 1), ("seed T=50 B=16", [40, 512, 40], 50, 16),
         ("tiny 4-8-4 T=10 B=8", [4, 8, 4], 10, 8)]


def median_ms(call, *args, **kwargs) -> float:
    """The median milliseconds of ``call(*args, **kwargs)`` over 9 batches of calls of about
    50 ms each, after 5 calls to warm up."""
    import numpy as np

    def run():
        call(*args, **kwargs)

    for _ in range(5):
        run()
    began = time.perf_counter()
    run()
    number = max(1, int(0.05 / max(1e-6, time.perf_counter() - began)))
    samples = []
    for _ in range(9):
        began = time.perf_counter()
        for _ in range(number):
            run()
        samples.append((time.perf_counter() - began) / number * 1e3)
    return float(np.median(samples))


def main() -> None:
    sys.path.insert(0, sys.argv[1] if len(sys.argv) > 1 else ".")
    import numpy as np
    from threadpoolctl import threadpool_limits

    import dualtape as dt

    out = {}
    with threadpool_limits(1):
        for label, sizes, steps, batch in CASES:
            pairs = zip(sizes[:-1], sizes[1:], strict=True)
            net = dt.RecurrentNetwork([dt.LSTM(a, b, seed=k + 1, dtype="float32")
                                       for k, (a, b) in enumerate(pairs)])
            rng = np.random.default_rng(0)
            xs = rng.uniform(-1, 1, (steps, batch, sizes[0])).astype("float32")
            targets = rng.uniform(-1, 1, (steps, batch, sizes[-1])).astype("float32")
            mask = np.arange(steps)[:, None] == np.full((1, batch), steps - 1)
            state = [rng.uniform(-1, 1, (batch, n)).astype("float32") for n in sizes[1:]]
            for kind, options in (("mask", {"mask": mask}), ("state", {"state": state})):
                out[f"{label} {kind}"] = median_ms(dt.backpropagate_sequence, net, xs,
                                                   targets, **options)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
