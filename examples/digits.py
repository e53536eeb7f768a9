"""Grenade's MNIST example on data that ships: scikit-learn's 8x8 digits (in its wheel, no
download), a small convolutional network in Grenade's style against a dense network of about
the same number of parameters and scikit-learn's ``MLPClassifier``, on one stratified split,
for several seeds.

    pip install -e ".[examples]"
    python examples/digits.py            # 3 seeds, a markdown report on stdout

Every network trains with ``dualtape.train`` (Adam, minibatches, softmax cross entropy on
logits); the test accuracy is of the last epoch (no early stopping, nothing tuned on the
test set).
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from dataclasses import dataclass

import numpy as np

import dualtape
from dualtape.benchmarks.digits import conv_net  # the network `dualtape bench` times


@dataclass(frozen=True)
class Split:
    """The digits as float images (n, 1, 8, 8) in [0, 1], and their labels."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray


def digits_split(limit: int | None = None) -> Split:
    """scikit-learn's digits, split 75/25 stratified with ``random_state=0``; ``limit``
    keeps only the first examples (for a quick check)."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    data = load_digits()
    x, y = data.images[:limit] / 16.0, data.target[:limit]
    x_train, x_test, y_train, y_test = train_test_split(
        x[:, None], y, test_size=0.25, stratify=y, random_state=0)
    return Split(x_train, y_train, x_test, y_test)


def dense_net(seed: int, dtype: str) -> dualtape.Network:
    """64 -> 40 -> 10 with a Relu (3,010 parameters, about the convolutional net's)."""
    return dualtape.Network([
        dualtape.Reshape((1, 8, 8), (64,)),
        dualtape.FullyConnected(64, 40, seed=seed, dtype=dtype),
        dualtape.Relu(),
        dualtape.FullyConnected(40, 10, seed=seed + 1, dtype=dtype),
    ])


NETWORKS = {"convolutional": conv_net, "dense": dense_net}


def parameter_count(net: dualtape.Network) -> int:
    return sum(int(np.prod(p.shape)) for group in net.params for p in group.values())


def fit(net: dualtape.Network, split: Split, *, seed: int, epochs: int, batch: int,
        rate: float) -> tuple[float, float]:
    """Train ``net`` for ``epochs`` on shuffled minibatches; ``(test accuracy, seconds per
    epoch)``."""
    rng = np.random.default_rng(seed)
    optimizer = dualtape.Adam(rate)
    dtype = net.dtype
    x_train = dualtape.asarray(split.x_train.astype(dtype))
    labels = dualtape.asarray(split.y_train)
    seconds = []
    for _ in range(epochs):
        began = time.perf_counter()
        order = dualtape.asarray(rng.permutation(len(split.y_train)))
        xp = dualtape.get_backend().xp
        for start in range(0, len(split.y_train), batch):
            rows = order[start:start + batch]
            dualtape.train(net, xp.take(x_train, rows, axis=0), xp.take(labels, rows, axis=0),
                           optimizer, loss="softmax_cross_entropy")
        seconds.append(time.perf_counter() - began)
    net.set_training(False)
    scores = dualtape.to_numpy(net.predict(dualtape.asarray(split.x_test.astype(dtype))))
    return float(np.mean(scores.argmax(axis=1) == split.y_test)), statistics.mean(seconds)


def fit_sklearn(split: Split, *, seed: int, epochs: int, batch: int, rate: float
                ) -> tuple[float, float, int]:
    """scikit-learn's ``MLPClassifier`` of the dense net's shape (64 -> 40 -> 10, Relu,
    Adam at ``rate``, minibatches of ``batch``) for at most ``epochs`` (its own stopping
    rule may end it sooner); ``(test accuracy, seconds per epoch, epochs run)``."""
    import warnings

    from sklearn.exceptions import ConvergenceWarning
    from sklearn.neural_network import MLPClassifier

    model = MLPClassifier(hidden_layer_sizes=(40,), batch_size=batch, learning_rate_init=rate,
                          max_iter=epochs, random_state=seed)
    began = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model.fit(split.x_train.reshape(len(split.x_train), -1), split.y_train)
    seconds = (time.perf_counter() - began) / model.n_iter_
    accuracy = model.score(split.x_test.reshape(len(split.x_test), -1), split.y_test)
    return float(accuracy), seconds, int(model.n_iter_)


def spread(values: list[float]) -> str:
    """``mean ± standard deviation (min–max)`` as percentages."""
    pct = [100 * v for v in values]
    sd = statistics.stdev(pct) if len(pct) > 1 else 0.0
    return f"{statistics.mean(pct):.2f} ± {sd:.2f} ({min(pct):.2f}–{max(pct):.2f})"


def run(args: argparse.Namespace) -> str:
    """Every model for every seed; the markdown report."""
    split = digits_split(args.limit)
    rows = []
    for name, make in NETWORKS.items():
        results = []
        for seed in args.seeds:
            net = make(seed * 100, args.dtype)
            results.append(fit(net, split, seed=seed, epochs=args.epochs, batch=args.batch,
                               rate=args.rate))
        rows.append((f"dualtape {name}", parameter_count(net), [a for a, _ in results],
                     str(args.epochs), statistics.mean(s for _, s in results)))
    sk = [fit_sklearn(split, seed=seed, epochs=args.epochs, batch=args.batch, rate=args.rate)
          for seed in args.seeds]
    epochs_run = sorted({e for _, _, e in sk})
    rows.append(("scikit-learn MLPClassifier (64-40-10)", 64 * 40 + 40 + 40 * 10 + 10,
                 [a for a, _, _ in sk], "–".join(map(str, epochs_run)),
                 statistics.mean(s for _, s, _ in sk)))
    lines = [
        f"Digits: {len(split.y_train)} training and {len(split.y_test)} test images (8x8, "
        "stratified, random_state=0); seeds " + ", ".join(map(str, args.seeds)) + "; Adam "
        f"{args.rate}, minibatches of {args.batch}, {args.dtype}, numpy backend.",
        "",
        "| model | parameters | test accuracy % (mean ± sd, min–max) | epochs | s / epoch |",
        "| --- | ---: | --- | ---: | ---: |",
    ]
    lines += [f"| {name} | {count:,} | {spread(acc)} | {epochs} | {sec:.3f} |"
              for name, count, acc, epochs, sec in rows]
    return "\n".join(lines)


def versions() -> str:
    import sklearn

    return (f"Python {platform.python_version()}, numpy {np.__version__}, dualtape "
            f"{dualtape.__version__}, scikit-learn {sklearn.__version__}, {platform.machine()}")


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--epochs", type=int, default=40)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--rate", type=float, default=0.003, help="Adam's learning rate")
    parser.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    parser.add_argument("--limit", type=int, default=None,
                        help="use only the first LIMIT images (a quick check)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    dualtape.set_backend("numpy")
    print(run(args))
    print(f"\n{versions()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
