"""The main job's loss alone, as train-text computed it before and after 3d5df11: one-hot
targets built each step and the generic softmax cross entropy, against the class labels
and the compiled path (``kernels.numba_softmax_cross_entropy``). Best of 7 x 200 calls, one
thread, freed memory kept as train-text keeps it. Run: ``python bench/loss_at_labels.py``."""

import array_api_compat.numpy as xp
import numpy as np
from best_of import best_seconds
from threadpoolctl import threadpool_limits

from dualtape.allocator import keep_freed_memory
from dualtape.losses import softmax_cross_entropy

keep_freed_memory()
rng = np.random.default_rng(0)
y = rng.standard_normal((50, 32, 57)).astype(np.float32)
lab = rng.integers(0, 57, (50, 32))


def before():
    t = xp.astype(lab[..., None] == xp.arange(57), xp.float32)
    return softmax_cross_entropy(xp, y, t)


def after():
    return softmax_cross_entropy(xp, y, lab)


with threadpool_limits(1):
    for f in (before, after, before, after):
        f()
        print(f.__name__, round(best_seconds(f, 200) * 1e6), "us")
