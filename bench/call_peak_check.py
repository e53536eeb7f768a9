"""``tape_report``'s measured training-call peak against a real call's, beyond the tests' sizes.

    python bench/call_peak_check.py [--steps 1000,3000] [--networks seed-8,main-1,...]

For each network and T, the report's ``call_peak_bytes`` and ``checkpoint_call_peak_bytes``
(probed at 16 to 48 steps, or 3 to 5 segments, and scaled) are divided by the peak tracemalloc
sees in one ``backpropagate_sequence`` at T on random data (after a first call, as the report
measures): 1.000 is exact. ``seed-1`` at ``--steps 100000`` takes about 2.5 GB and a minute.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import numpy as np

import dualtape as dt
from dualtape.meters import traced_peak
from dualtape.text.model import build_text_network


def _seed() -> dt.RecurrentNetwork:
    return dt.RecurrentNetwork([dt.LSTM(40, 512, seed=1), dt.LSTM(512, 40, seed=2)])


def _main_job() -> dt.RecurrentNetwork:
    return build_text_network(57, [80, 80], seed=1)


def _stack() -> dt.RecurrentNetwork:
    return dt.RecurrentNetwork([dt.Embedding(30, 16, seed=1), dt.GRU(16, 64, seed=2),
                                dt.StandardLSTM(64, 32, seed=3), dt.FullyConnected(32, 30, seed=4),
                                dt.Softmax()])


def _tiny() -> dt.RecurrentNetwork:
    return dt.RecurrentNetwork([dt.LSTM(4, 8, seed=1), dt.LSTM(8, 4, seed=2)])


NETWORKS: dict[str, tuple[Callable[[], dt.RecurrentNetwork], int]] = {
    "seed-1": (_seed, 1), "seed-8": (_seed, 8), "main-1": (_main_job, 1),
    "main-32": (_main_job, 32), "stack-16": (_stack, 16), "tiny-1": (_tiny, 1)}
"""Name: (the network, its batch)."""


def real_peak(net: dt.RecurrentNetwork, steps: int, batch: int, loss: str, tape: str) -> int:
    """tracemalloc's peak of one ``backpropagate_sequence`` on random data, after a first."""
    rng = np.random.default_rng(0)
    first = net.layers[0]
    if first.takes_ids:
        xs = dt.asarray(rng.integers(0, first.vocab, (steps, batch)))
    else:
        xs = dt.asarray(rng.uniform(-1, 1, (steps, batch, net.n_in)).astype(net.dtype))
    if loss == "cross_entropy":
        targets = dt.asarray(rng.integers(0, net.n_out, (steps, batch)))
    else:
        targets = dt.asarray(rng.uniform(-1, 1, (steps, batch, net.n_out)).astype(net.dtype))
    def call() -> None:
        dt.backpropagate_sequence(net, xs, targets, loss=loss, tape=tape)
    call()
    return traced_peak(call)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", default="1000,3000", help="comma-separated T")
    parser.add_argument("--networks", default="seed-8,main-1,main-32,stack-16,tiny-1",
                        help=f"comma-separated, of {', '.join(NETWORKS)}")
    args = parser.parse_args()
    print("| network, batch | T | full: report / real | sqrt: report / real |")
    print("| --- | ---: | ---: | ---: |")
    for name in args.networks.split(","):
        make, batch = NETWORKS[name]
        for steps in (int(s) for s in args.steps.split(",")):
            with np.errstate(all="ignore"):
                report = dt.tape_report(make(), seq_len=steps, batch=batch)
                full = real_peak(make(), steps, batch, report.loss, "full")
                sqrt = real_peak(make(), steps, batch, report.loss, "sqrt")
            assert report.call_peak_bytes and report.checkpoint_call_peak_bytes
            print(f"| {name} | {steps:,} | {report.call_peak_bytes / full:.3f} "
                  f"({full / 2**20:,.1f} MiB) | {report.checkpoint_call_peak_bytes / sqrt:.3f} "
                  f"({sqrt / 2**20:,.1f} MiB) |", flush=True)


if __name__ == "__main__":
    main()
