"""The cookbook's forecaster against the same model and loop in torch, from the same weights:
held-out error and seconds per epoch on one thread.

dualtape's side is the recipe itself: ``docs/cookbook.md``'s first python block (the series)
and the definitions of its second (``fit``) are read from the page and run, so the page and
the bench cannot drift apart. Torch's side is that loop written in torch, from ``fit``'s
initial weights (``to_torch(net, like=model)``): ``nn.LSTM(1, 32)`` and ``nn.Linear(32, 1)``
on the last step, the same windows and the same shuffled batches (``dt.batches``, the same
seeds), ``mse_loss``, ``clip_grad_norm_(1.0)``, ``torch.optim.Adam(lr=0.01)`` with
``SequentialLR(LinearLR, CosineAnnealingLR)`` stepped after each step, the held-out error after
each epoch and the best one kept. Both run every epoch asked for (``patience`` above it).

First a check, untimed (and the compilers' warm-up): one epoch of each, whose held-out errors
must agree to 1e-4 relative (float32 rounding leaves about 1e-7; a constant that drifted from
the recipe, a rate, a seed, the clip, the warm-up, moves it further). Then ``--rounds`` runs of
``--epochs`` epochs of each in turn (dualtape, torch, torch, dualtape, ...), under one BLAS
thread (threadpoolctl) and ``torch.set_num_threads(1)``, timed by the process's CPU seconds
(``--clock wall`` for elapsed ones, as ``forecaster.py``): each one's best held-out error, the
median seconds an epoch, and the median of the rounds' ratios.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OPENBLAS_NUM_THREADS=1 \\
        python bench/cookbook_forecaster.py

Needs torch (the CPU wheel is enough) and threadpoolctl; neither is a dependency of dualtape.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import copy
import io
import math
import statistics
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.forecaster import CLOCKS, need  # noqa: E402
from tests.test_readme import snippets  # noqa: E402

PAGE = ROOT / "docs" / "cookbook.md"
HIDDEN, WINDOW, BATCH, RATE, MAX_NORM = 32, 24, 32, 0.01, 1.0
"""The recipe's sizes and settings, which torch's side repeats (the check holds them to it)."""


def recipe() -> dict[str, Any]:
    """The forecaster recipe's namespace: the page's first python block run whole (``series``,
    ``cut``...), then the imports and functions of its second (``fit``) without the call."""
    first, second = (code for code, _ in snippets(PAGE.read_text())[:2])
    namespace: dict[str, Any] = {}
    with contextlib.redirect_stdout(io.StringIO()):  # what the page shows it printing
        exec(compile(first, f"{PAGE.name} python block 1", "exec"), namespace)
    tree = ast.parse(second)
    tree.body = [node for node in tree.body
                 if isinstance(node, ast.Import | ast.ImportFrom | ast.FunctionDef)]
    exec(compile(tree, f"{PAGE.name} python block 2", "exec"), namespace)
    return namespace


def torch_fit(torch: Any, series: np.ndarray, epochs: int, seed: int = 0
              ) -> tuple[float, dict[str, Any]]:
    """The recipe's ``fit`` written in torch, every epoch run: the best held-out error and the
    weights that gave it."""
    import dualtape as dt

    split = int(0.8 * series.shape[0])
    train_x, train_y = dt.windows(series[:split], WINDOW)
    test_x, test_y = (torch.from_numpy(np.array(a)) for a in
                      dt.windows(series[split - WINDOW:], WINDOW))
    ours = dt.RecurrentNetwork([dt.StandardLSTM(1, HIDDEN, seed=seed),
                                dt.FullyConnected(HIDDEN, 1, seed=seed + 1)])
    model = torch.nn.ModuleDict({"lstm": torch.nn.LSTM(1, HIDDEN),
                                 "head": torch.nn.Linear(HIDDEN, 1)})
    model.load_state_dict({k: torch.from_numpy(np.array(v))
                           for k, v in dt.to_torch(ours, like=model).items()})

    def forecast(x: Any) -> Any:
        return model["head"](model["lstm"](x)[0][-1])

    per_epoch = math.ceil(train_x.shape[1] / BATCH)
    optimizer = torch.optim.Adam(model.parameters(), lr=RATE)
    schedules = torch.optim.lr_scheduler
    scheduler = schedules.SequentialLR(optimizer, [
        schedules.LinearLR(optimizer, start_factor=0.1, total_iters=per_epoch),
        schedules.CosineAnnealingLR(optimizer, T_max=epochs * per_epoch)],
        milestones=[per_epoch])
    best, kept = math.inf, {}
    for epoch in range(1, epochs + 1):
        for x, y in dt.batches(train_x, train_y, batch_size=BATCH, axes=(1, 0), seed=epoch):
            loss = torch.nn.functional.mse_loss(forecast(torch.from_numpy(x)),
                                                torch.from_numpy(y))
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_NORM)
            optimizer.step()
            scheduler.step()
        with torch.no_grad():
            error = float(((forecast(test_x) - test_y) ** 2).mean())
        if error < best:
            best, kept = error, copy.deepcopy(model.state_dict())
    return best, kept


def check(torch: Any, found: dict[str, Any]) -> str:
    """One epoch of each from the same weights: their held-out errors agree, or exit."""
    _, ours, _ = found["fit"](found["series"], epochs=1, patience=1)
    theirs, _ = torch_fit(torch, found["series"], epochs=1)
    if not abs(ours - theirs) <= 1e-4 * abs(theirs):
        sys.exit(f"cookbook_forecaster: after one epoch dualtape's held-out error {ours!r} and "
                 f"torch's {theirs!r} differ beyond float32 rounding: the loops differ")
    return f"one epoch: held-out MSE {ours:.7f} vs torch {theirs:.7f}"


def run(epochs: int, rounds: int, clock: str) -> dict[str, Any]:
    """The check, then ``rounds`` timed runs of ``epochs`` epochs of each; the figures."""
    torch = need("torch", "the torch side")
    threadpoolctl = need("threadpoolctl", "one BLAS thread")
    torch.set_num_threads(1)
    found = recipe()
    fit, series, tick = found["fit"], found["series"], CLOCKS[clock]
    sides = {"dualtape": lambda: fit(series, epochs=epochs, patience=epochs)[1],
             "torch": lambda: torch_fit(torch, series, epochs)[0]}
    seconds: dict[str, list[float]] = {name: [] for name in sides}
    errors: dict[str, float] = {}
    with threadpoolctl.threadpool_limits(1):
        figures: dict[str, Any] = {"check": check(torch, found)}
        for k in range(rounds):
            for name in (list(sides) if k % 2 == 0 else list(sides)[::-1]):
                began = tick()
                errors[name] = sides[name]()
                seconds[name].append((tick() - began) / epochs)
    for name in sides:
        figures[name] = {"error": errors[name], "epoch_s": statistics.median(seconds[name]),
                         "fastest_s": min(seconds[name])}
    figures["ratio"] = statistics.median(
        d / t for d, t in zip(seconds["dualtape"], seconds["torch"], strict=True))
    return figures


def main(argv: list[str]) -> None:
    """Run the bench and print its figures."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--epochs", type=int, default=30, help="epochs a run (default 30, fit's)")
    p.add_argument("--rounds", type=int, default=4, help="timed runs of each (default 4)")
    p.add_argument("--clock", choices=tuple(CLOCKS), default="cpu")
    args = p.parse_args(argv)
    if args.epochs < 1 or args.rounds < 1:
        p.error(f"--epochs and --rounds must be at least 1, got {args.epochs}, {args.rounds}")
    found = run(args.epochs, args.rounds, args.clock)
    print(f"StandardLSTM 1->{HIDDEN}, FullyConnected {HIDDEN}->1, windows of {WINDOW}, batch "
          f"{BATCH}, {args.epochs} epochs, one thread, {args.clock} seconds")
    print(found["check"])
    for name in ("dualtape", "torch"):
        f = found[name]
        print(f"{name:>8}: best held-out MSE {f['error']:.6f}, {f['epoch_s']:.4f} s an epoch "
              f"(median of {args.rounds}; fastest {f['fastest_s']:.4f})")
    print(f"dualtape/torch held-out MSE: {found['dualtape']['error'] / found['torch']['error']:.7f}"
          f"; time per epoch: {found['ratio']:.3f} (median of the rounds' ratios)")


if __name__ == "__main__":
    main(sys.argv[1:])
