"""How much of a small training call is plumbing: ``train_recurrent`` against the same call with
the per-layer dispatch stripped, for issue 30's per-call rows.

    python bench/lean_call_floor.py [--workload tiny-4-8-4-fifty-time-steps] [--rounds 2000]

The lean call runs the very numeric helpers ``train_recurrent`` runs on numpy with the compiled
loops, in the same order (each LSTM's ``project_sequence``, ``NumbaLSTM.forward_sequence``, the
squared error, ``NumbaLSTM.backward_sequence``, ``LSTM._sequence_grads`` into the gradient
buffers, then the same ``SGD.step``), inside one subnormal-flushing block, and skips
everything else: the argument and state checks, the path choice per layer and pass, the tapes'
version checks, the stack's dispatch. It is a measurement, not a path to use: it checks
nothing. The weights of both networks must stay equal bit for bit over every call (the script
says so), and the times are medians of alternating calls in one process. A network of LSTMs
only, batch as the workload's.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time
from collections.abc import Callable

import numpy as np

import dualtape as dt
from dualtape.backend import from_host, resolve_backend
from dualtape.benchmarks.runners import _network
from dualtape.benchmarks.workloads import WORKLOADS
from dualtape.kernels.flush import flushed
from dualtape.kernels.numba_lstm import NumbaLSTM
from dualtape.layers.linear_algebra import project_sequence
from dualtape.layers.lstm import LSTMSequenceTape
from dualtape.recurrent import gradient_buffers

RATE = 0.01


def lean_call(net: dt.RecurrentNetwork, xs: np.ndarray, optimizer: dt.SGD) -> float:
    """One training call of ``net`` (LSTMs, zero initial states) towards ``xs`` itself."""
    cell, batch = NumbaLSTM(), xs.shape[1]
    buffers, tapes, grads = gradient_buffers(net), [], []
    with flushed():
        h = xs
        for layer in net.layers:
            p = layer.params
            projected = project_sequence(np, h, p["W"], p["b"])
            cells, gates, hs = cell.forward_sequence(
                np, p["U"], np.zeros((batch, layer.n_out), xs.dtype), projected)
            tapes.append(LSTMSequenceTape(h, cells, gates, p.version))
            h = hs
        diff = h - xs
        loss = float(np.sum(0.5 * np.sum(diff * diff, axis=-1)) / batch)
        dhs = diff / batch
        for k in reversed(range(len(net.layers))):
            layer, tape = net.layers[k], tapes[k]
            blocks, _ = cell.backward_sequence(
                np, layer.params["U"], tape.cells, tape.gates, dhs,
                np.zeros((batch, layer.n_out), xs.dtype), False)
            found, dhs = layer._sequence_grads(np, tape, blocks, k > 0, buffers[k])
            grads.insert(0, found)
    optimizer.step(net.params, grads)
    return loss


def calls_per_call(call: Callable[[], object], rounds: int = 100) -> float:
    """Python-level calls (cProfile's count) per call of ``call``."""
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(rounds):
        call()
    profile.disable()
    return pstats.Stats(profile).total_calls / rounds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", default="tiny-4-8-4-fifty-time-steps")
    parser.add_argument("--rounds", type=int, default=2000)
    args = parser.parse_args()
    workload = next(w for w in WORKLOADS if w.key == f"train/{args.workload}")
    backend, data = resolve_backend("numpy"), workload.host_data("float32")
    full_net, lean_net = _network(backend, data), _network(backend, data)
    xs = from_host(data["xs"], backend)
    full_sgd, lean_sgd = dt.SGD(rate=RATE), dt.SGD(rate=RATE)
    calls = {"train_recurrent": lambda: dt.train_recurrent(full_net, xs, xs, full_sgd),
             "lean": lambda: lean_call(lean_net, xs, lean_sgd)}
    times: dict[str, list[float]] = {name: [] for name in calls}
    for k in range(50 + args.rounds):
        for name, call in calls.items():
            start = time.perf_counter()
            call()
            if k >= 50:
                times[name].append(time.perf_counter() - start)
    same = all(np.array_equal(a[key], b[key])
               for a, b in zip(full_net.params, lean_net.params, strict=True) for key in a)
    full, lean = (float(np.median(times[name])) * 1e6 for name in calls)
    print(f"{workload.key}, float32, {args.rounds} alternating calls: train_recurrent "
          f"{full:.1f} us ({calls_per_call(calls['train_recurrent']):.0f} calls), lean "
          f"{lean:.1f} us ({calls_per_call(calls['lean']):.0f} calls): {full / lean:.2f}x; "
          f"weights equal bit for bit: {same}")


if __name__ == "__main__":
    main()
