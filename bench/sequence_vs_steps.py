"""One training call on the seed network, train_recurrent against a stepwise loop.

[LSTM(40, 512), LSTM(512, 40)], T = 50, batch 1, float64, SGD(rate=0.1), target = input. The
stepwise loop calls each layer's ``forward``/``backward`` per time step (Grenade's structure
through dualtape's public step API) and sums the gradients. Both run interleaved, one BLAS
thread; prints median and min milliseconds and the ratio.

    python bench/sequence_vs_steps.py [--repeats 30] [--threads 1]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import dualtape
from dualtape.losses import squared_error
from dualtape.text.threads import limited_threads


def stepwise_train(rnet: dualtape.RecurrentNetwork, xs: np.ndarray, opt: dualtape.SGD) -> float:
    """BPTT through the public step API: per-step forward, per-step backward, summed grads."""
    lstm1, lstm2 = rnet.layers
    c1, c2 = rnet.initial_state(xs.shape[1])
    tapes, ys = [], []
    for x in xs:
        t1, c1, h1 = lstm1.forward(c1, x)
        t2, c2, h2 = lstm2.forward(c2, h1)
        tapes.append((t1, t2))
        ys.append(h2)
    loss, dys = squared_error(np, np.stack(ys), xs)
    grads = [{k: np.zeros_like(v) for k, v in p.items()} for p in rnet.params]
    d1 = d2 = None
    for (t1, t2), dy in zip(reversed(tapes), reversed(dys), strict=True):
        g2, d2, dh1 = lstm2.backward(t2, d2, dy)
        g1, d1, _ = lstm1.backward(t1, d1, dh1)
        for total, g in zip(grads, (g1, g2), strict=True):
            for k in total:
                total[k] += g[k]
    opt.step(rnet.params, grads)
    return float(loss)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    layers = [dualtape.LSTM(40, 512, seed=1, dtype="float64"),
              dualtape.LSTM(512, 40, seed=2, dtype="float64")]
    rnet = dualtape.RecurrentNetwork(layers)
    xs = np.random.default_rng(0).uniform(-1, 1, (50, 1, 40))
    runs = {
        "train_recurrent": lambda: dualtape.train_recurrent(rnet, xs, xs, opt)[0],
        "stepwise forward/backward": lambda: stepwise_train(rnet, xs, opt),
    }
    opt = dualtape.SGD(0.1)
    times: dict[str, list[float]] = {name: [] for name in runs}
    with limited_threads(args.threads):
        for repeat in range(args.repeats + 3):
            for name, run in runs.items():
                start = time.perf_counter()
                run()
                if repeat >= 3:
                    times[name].append(time.perf_counter() - start)
    base = np.median(times["train_recurrent"])
    for name, values in times.items():
        print(f"{name:<27} median {1e3 * np.median(values):7.2f} ms  min {1e3 * min(values):7.2f}"
              f" ms  ratio {np.median(values) / base:5.2f}")


if __name__ == "__main__":
    main()
