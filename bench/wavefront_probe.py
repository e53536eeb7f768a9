"""Would a wavefront pay? The forward pass of the main job's network (LSTM 57 -> 80 -> 80,
FullyConnected 57, batch 32, 50 steps of ids, float32, BLAS on one thread) as dualtape runs it
(``plain``), or with its two LSTMs as a wavefront (``wave``): chunks of ``K`` steps, the second
layer's projection and compiled loop of chunk i on a worker thread while the first layer runs
chunk i+1. Prints the best of 7 x 100 forward passes, in ms. Run each in turn:

    for i in 1 2 3 4 5; do python bench/wavefront_probe.py plain
        python bench/wavefront_probe.py wave; done

A probe built from the compiled loops' internals (it bypasses the layers), not a feature.
"""

import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from best_of import best_seconds
from threadpoolctl import threadpool_limits

import dualtape
from dualtape.kernels import blas, numba_lstm
from dualtape.layers.linear_algebra import project_sequence

MODE = sys.argv[1] if len(sys.argv) > 1 else "plain"
K = int(sys.argv[2]) if len(sys.argv) > 2 else 10
WORKER = ThreadPoolExecutor(1)


def loop(U, steps, batch, dtype):
    """Tape arrays for one LSTM and a function running its compiled loop over steps [s, e)."""
    n = U.shape[1]
    cells = np.zeros((steps + 1, batch, n), dtype)
    gates = np.empty((steps, batch, 4 * n), dtype)
    hs = np.empty((steps, batch, n), dtype)
    r = np.empty((batch, 2 * n), dtype)
    U = np.ascontiguousarray(U)
    U_fi_t = np.ascontiguousarray(U[: 2 * n].T)
    compiled, addresses, one = numba_lstm._compiled(), blas.addresses(U.dtype), U.dtype.type(1)

    def run(projected, s, e):
        np.tanh(projected[s:e, :, 3 * n :], out=gates[s:e, :, 3 * n :])
        compiled.forward_sequence(*addresses, U, U_fi_t, projected[s:e], r, cells[s : e + 1],
                                  gates[s:e], hs[s:e], one)

    return hs, run


def wavefront(net, ids):
    first, second, top = net.layers
    steps, batch = ids.shape
    a, b = first.params, second.params
    projected_a = project_sequence(np, ids, a["W"], a["b"])
    hs_a, run_a = loop(a["U"], steps, batch, projected_a.dtype)
    projected_b = np.empty((steps, batch, 4 * second.n_out), projected_a.dtype)
    hs_b, run_b = loop(b["U"], steps, batch, projected_a.dtype)

    def second_layer(s, e):
        rows = projected_b[s:e].reshape(-1, projected_b.shape[-1])
        np.matmul(hs_a[s:e].reshape(-1, hs_a.shape[-1]), b["W"].T, out=rows)
        rows += b["b"]
        run_b(projected_b, s, e)

    pending = []
    for s in range(0, steps, K):
        run_a(projected_a, s, min(s + K, steps))
        pending.append(WORKER.submit(second_layer, s, min(s + K, steps)))
    for done in pending:
        done.result()
    return hs_b.reshape(-1, hs_b.shape[-1]) @ top.params["W"].T + top.params["b"]


net = dualtape.RecurrentNetwork([dualtape.LSTM(57, 80, seed=1, dtype="float32"),
                                 dualtape.LSTM(80, 80, seed=2, dtype="float32"),
                                 dualtape.FullyConnected(80, 57, seed=3, dtype="float32")])
ids = np.random.default_rng(0).integers(0, 57, (50, 32))
forward = (lambda: wavefront(net, ids)) if MODE == "wave" else (
    lambda: net.forward_sequence(None, ids))
with threadpool_limits(1):
    plain = net.predict_sequence(None, ids)[1].reshape(-1, 57)
    assert np.allclose(wavefront(net, ids), plain, rtol=1e-4, atol=1e-5)  # the same outputs
    for _ in range(20):
        forward()
    best = best_seconds(forward, 100)
print(MODE, K, round(best * 1e3, 3), "ms a forward pass")
