"""How much of a training call is plumbing: the library's call against the same numeric helpers
with the per-layer dispatch stripped, for issue 30's per-call rows and its main job.

    python bench/lean_call_floor.py [--workload train/tiny-4-8-4-fifty-time-steps] [--rounds 2000]
    python bench/lean_call_floor.py --workload text/char-model-80x80-batch-32 --rounds 300

A train-group workload times ``train_recurrent`` twice: with ``SGD``, which fuses its step into
the backward pass (``planned_backprop.planned_descent``), and with ``Unfused``, a subclass that
does not (the gradients, then ``optimizer.step``); the text workload times ``TextTrainer.step``
(the main job, train-text's code; the trainer's private window, loss and network are read here,
as a measurement may). The lean call runs the very numeric helpers the library runs on numpy
with the compiled loops, in the same order (each LSTM's ``project_sequence`` and
``NumbaLSTM.forward_sequence``, the top ``FullyConnected``'s ``_forward`` when there is one,
the loss, then back: ``_backward`` into its gradient buffers, ``NumbaLSTM.backward_sequence``
and ``LSTM._sequence_grads`` into the buffers; then the same optimizer step), inside one
subnormal-flushing block, and skips everything else: the argument and state checks, the path
choice per layer and pass, the tapes' version checks, the stack's dispatch. It is a
measurement, not a path to use: it checks nothing. Its weights and the unfused library call's
must stay equal bit for bit over every call (the script says so), and the times are medians of
alternating calls in one process, at one BLAS thread. LSTMs only, then at most one
FullyConnected; zero initial states.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

import dualtape as dt
from dualtape.backend import from_host, resolve_backend
from dualtape.benchmarks import char_model
from dualtape.benchmarks.runners import _network
from dualtape.benchmarks.workloads import WORKLOADS
from dualtape.kernels.flush import flushed
from dualtape.kernels.numba_lstm import NumbaLSTM
from dualtape.layers.linear_algebra import project_sequence
from dualtape.layers.lstm import LSTMSequenceTape
from dualtape.losses import squared_error
from dualtape.recurrent import gradient_buffers

RATE = 0.01


def lean_backprop(net: dt.RecurrentNetwork, xs: np.ndarray,
                  objective: Callable[[np.ndarray], tuple[Any, np.ndarray]]) -> tuple[Any, list]:
    """``(loss, grads)`` of ``net`` (LSTMs, then at most one FullyConnected; zero initial
    states) over ``xs``, ``objective(ys) -> (loss, dys)``, the gradients in the buffers."""
    cell, batch, steps = NumbaLSTM(), xs.shape[1], xs.shape[0]
    buffers, tapes = gradient_buffers(net), []
    *lstms, top = net.layers if not net.layers[-1].recurrent else (*net.layers, None)
    with flushed():
        h = xs
        for layer in lstms:
            p = layer.params
            cells, gates, hs = cell.forward_sequence(
                np, p["U"], np.zeros((batch, layer.n_out), p["U"].dtype),
                project_sequence(np, h, p["W"], p["b"]))
            tapes.append(LSTMSequenceTape(h, cells, gates, p.version))
            h = hs
        if top is not None:
            top_tape, y = top._forward(np, h.reshape(steps * batch, -1))
            h = y.reshape(steps, batch, -1)
        loss, dhs = objective(h)
        grads: list = []
        if top is not None:
            found, dh = top._backward(np, top_tape, dhs.reshape(steps * batch, -1),
                                      grads_out=buffers[-1])
            grads, dhs = [found], dh.reshape(steps, batch, -1)
        for k in reversed(range(len(lstms))):
            layer, tape = lstms[k], tapes[k]
            blocks, _ = cell.backward_sequence(
                np, layer.params["U"], tape.cells, tape.gates, dhs,
                np.zeros((batch, layer.n_out), tape.cells.dtype), False)
            found, dhs = layer._sequence_grads(np, tape, blocks, k > 0, buffers[k])
            grads.insert(0, found)
    return loss, grads


class Unfused(dt.SGD):
    """Plain SGD through ``optimizer.step``: the fused step takes ``SGD`` itself only."""


def train_calls(workload: Any) -> tuple[dict[str, Callable[[], object]], Callable[[], bool]]:
    """``train_recurrent`` fused and unfused and the lean call, each on its own copy of
    ``workload``'s network, and whether the unfused call's and the lean call's weights are
    equal bit for bit."""
    backend, data = resolve_backend("numpy"), workload.host_data("float32")
    fused_net, full_net, lean_net = (_network(backend, data) for _ in range(3))
    xs = from_host(data["xs"], backend)
    fused_sgd, full_sgd, lean_sgd = dt.SGD(rate=RATE), Unfused(rate=RATE), dt.SGD(rate=RATE)

    def lean() -> float:
        loss, grads = lean_backprop(lean_net, xs, lambda ys: squared_error(np, ys, xs))
        lean_sgd.step(lean_net.params, grads)
        return float(loss)

    return ({"train_recurrent": lambda: dt.train_recurrent(fused_net, xs, xs, fused_sgd),
             "unfused": lambda: dt.train_recurrent(full_net, xs, xs, full_sgd),
             "lean": lean}, lambda: _same(full_net, lean_net))


def text_calls(workload: Any) -> tuple[dict[str, Callable[[], object]], Callable[[], bool]]:
    """``TextTrainer.step`` and its lean step on two trainers from the same data (the same
    windows, step by step), and whether their weights are equal bit for bit."""
    backend, data = resolve_backend("numpy"), workload.host_data("float32")
    full, lean = char_model.trainer(backend, data), char_model.trainer(backend, data)

    def lean_step() -> None:
        window, _ = lean._windows()
        _, grads = lean_backprop(lean._logits, window[:-1],
                                 lambda ys: lean._window_loss(np, ys, window[1:]))
        lean.optimizer.step(lean._logits.params, grads)

    return ({"TextTrainer.step": full.step, "lean": lean_step},
            lambda: _same(full._logits, lean._logits))


def _same(a: dt.RecurrentNetwork, b: dt.RecurrentNetwork) -> bool:
    return all(np.array_equal(p[key], q[key])
               for p, q in zip(a.params, b.params, strict=True) for key in p)


def calls_per_call(call: Callable[[], object], rounds: int = 20) -> float:
    """Python-level calls (cProfile's count) per call of ``call``."""
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(rounds):
        call()
    profile.disable()
    return pstats.Stats(profile).total_calls / rounds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", default="train/tiny-4-8-4-fifty-time-steps",
                        help="a train-group key, or the text group's (the main job)")
    parser.add_argument("--rounds", type=int, default=2000)
    args = parser.parse_args()
    key = args.workload if "/" in args.workload else f"train/{args.workload}"
    workload = next((w for w in WORKLOADS if w.key == key and w.group in ("train", "text")),
                    None)
    if workload is None:
        parser.error(f"--workload: a train-group or text-group key, got {args.workload!r}")
    calls, same = (text_calls if workload.group == "text" else train_calls)(workload)
    times: dict[str, list[float]] = {name: [] for name in calls}
    with threadpool_limits(1):
        for k in range(20 + args.rounds):
            for name, call in calls.items():
                start = time.perf_counter()
                call()
                if k >= 20:
                    times[name].append(time.perf_counter() - start)
        counts = {name: calls_per_call(call) for name, call in calls.items()}
    medians = {name: float(np.median(times[name])) * 1e6 for name in calls}
    lean = medians["lean"]
    rows = ", ".join(f"{name} {us:.1f} us ({counts[name]:.0f} calls, {us / lean:.3f}x the "
                     "lean call's time)" for name, us in medians.items())
    print(f"{workload.key}, float32, one BLAS thread, {args.rounds} alternating calls: {rows}; "
          f"the lean call's weights equal bit for bit: {same()}")


if __name__ == "__main__":
    main()
