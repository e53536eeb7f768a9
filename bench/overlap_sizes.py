"""A training call with ``dualtape.overlap_gradients`` on or off, best of 5, in ms:

    python bench/overlap_sizes.py on|off N BATCH   # LSTM 40 -> N -> N -> FullyConnected 40, Adam
    python bench/overlap_sizes.py on|off tiny      # LSTM 4 -> 8 -> 4, batch 1, SGD
    python bench/overlap_sizes.py on|off seed      # Grenade's seed network 40 -> 512 -> 40, SGD

float32 (the tiny network float64), T = 50, BLAS on one thread; run on and off in turn.
"""

import contextlib
import sys
import time

import numpy as np
from best_of import best_seconds
from threadpoolctl import threadpool_limits

import dualtape

mode, shape = sys.argv[1], sys.argv[2:]
rng = np.random.default_rng(0)
if shape == ["tiny"]:
    sizes, batch, dtype, optimizer = [4, 8, 4], 1, "float64", dualtape.SGD(0.01)
elif shape == ["seed"]:
    sizes, batch, dtype, optimizer = [40, 512, 40], 1, "float32", dualtape.SGD(0.01)
else:
    n, batch = int(shape[0]), int(shape[1])
    sizes, dtype, optimizer = [40, n, n], "float32", dualtape.Adam(0.001)
layers = [dualtape.LSTM(a, b, seed=k, dtype=dtype)
          for k, (a, b) in enumerate(zip(sizes[:-1], sizes[1:], strict=True))]
if len(shape) == 2:
    layers.append(dualtape.FullyConnected(sizes[-1], 40, seed=9, dtype=dtype))
net = dualtape.RecurrentNetwork(layers)
xs = rng.uniform(-1, 1, (50, batch, sizes[0])).astype(dtype)
targets = rng.uniform(-1, 1, (50, batch, 40 if len(shape) == 2 else sizes[-1])).astype(dtype)
overlap = dualtape.overlap_gradients() if mode == "on" else contextlib.nullcontext()
with threadpool_limits(1), overlap:
    for _ in range(5):
        dualtape.train_recurrent(net, xs, targets, optimizer)
    start = time.perf_counter()
    dualtape.train_recurrent(net, xs, targets, optimizer)
    reps = max(3, int(0.4 / (time.perf_counter() - start)))
    best = best_seconds(lambda: dualtape.train_recurrent(net, xs, targets, optimizer), reps, 5)
print(" ".join(shape), mode, round(best * 1e3, 3), "ms")
