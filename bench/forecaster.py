"""A user's forecaster loop, dualtape against torch, seconds per epoch on one thread.

The model and loop a new user writes for weekly Mauna Loa CO2 (statsmodels' ``co2``, resampled
weekly, gaps filled forward: 2,284 weeks, standardised by the training part): a cell of 32
units (``StandardLSTM`` or ``GRU``) on one input, ``FullyConnected(32, 1)`` on top, windows of
52 weeks cut from the first 80 % of the series and shuffled each epoch, batches of 64, the
next week's value as the target at the last step (a mask; the loss ``squared_error``, ½·MSE
there), ``backpropagate_sequence``, ``clip_gradients(max_norm=0.5)`` (it acts on about half
of the first epoch's batches, whose norms are 0.35-0.58: the check below sees it),
``Adam().step``. Torch runs the same model (``nn.LSTM`` / ``nn.GRU`` + ``nn.Linear``,
dualtape's weights through ``to_torch``), the same windows in the same order,
``clip_grad_norm_``, ``torch.optim.Adam`` and ``0.5 * mse_loss`` of the last step's output.

First a check, untimed, in float64: one epoch (28 Adam steps) from the same weights in each,
whose mean losses must agree to 1e-7 relative and whose parameters to 1e-7. Rounding alone
leaves 1e-16 to 1e-14; torch's ``clip_grad_norm_`` divides by the norm plus 1e-6 (dualtape's
by the norm), which changes a clipped step's gradients by about 2e-6 of themselves and, Adam
being nearly scale-free, the weights by up to 1.3e-8 after an epoch. A clip limit 0.1 % off
moves them by 2e-6, the mask one step longer by 1.5e-3, a loss scaled by 1 + 2e-7 its value
by 2e-7 (each planted once: the check refused it). Then ``--epochs`` timed epochs of each in
float32, in turn (dualtape, torch, torch, dualtape, ...), each under one BLAS
thread (threadpoolctl) and ``torch.set_num_threads(1)``, timed by the process's CPU seconds
(``--clock wall`` for elapsed ones): the median seconds of each and the median of the pairs'
ratios. ``--cell GRU`` for the GRU; ``--root PATH`` runs the dualtape checkout at PATH;
``--only dualtape`` (or ``torch``) times one alone in its process (no check; dualtape alone
needs no torch), as a before/after of two checkouts takes it; ``--keep-freed-memory`` keeps
freed blocks for reuse (``dualtape.keep_freed_memory``) in the whole process, torch's too:

    python bench/forecaster.py --pairs /tmp/dt-before  # runs both checkouts in turn

Needs ``pip install statsmodels torch`` (the CPU wheel is enough); neither is a dependency.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from typing import Any

import numpy as np

HIDDEN, WINDOW, BATCH, MAX_NORM = 32, 52, 64, 0.5
CLOCKS = {"cpu": time.process_time, "wall": time.perf_counter}
"""``--clock``: the process's CPU seconds (what a loaded, shared machine disturbs least: time
spent waiting for a core is not counted) or wall seconds."""


def parse(argv: list[str]) -> argparse.Namespace:
    """The command line (see the module's docstring)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cell", choices=("StandardLSTM", "GRU"), default="StandardLSTM")
    p.add_argument("--epochs", type=int, default=8, help="timed epochs of each (default 8)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--root", default=None, help="the dualtape checkout to run (default: here)")
    p.add_argument("--only", choices=("dualtape", "torch"), default=None,
                   help="time one of them alone in this process (no check)")
    p.add_argument("--pairs", metavar="BEFORE", default=None,
                   help="time this checkout against BEFORE in alternating processes")
    p.add_argument("--clock", choices=tuple(CLOCKS), default="cpu",
                   help="cpu: the process's CPU seconds (default), wall: elapsed seconds")
    p.add_argument("--keep-freed-memory", action="store_true",
                   help="dualtape.keep_freed_memory() first (the whole process: torch too)")
    p.add_argument("--json", action="store_true", help="print one JSON line of the results")
    args = p.parse_args(argv)
    if args.epochs < 1:
        p.error(f"--epochs must be at least 1, got {args.epochs}")
    return args


def need(module: str, what: str) -> Any:
    """``import module``, or exit naming the package to install."""
    try:
        return __import__(module)
    except ImportError:
        sys.exit(f"forecaster: {what} needs {module}: pip install {module} (not a dependency "
                 "of dualtape; the bench only)")


def series() -> np.ndarray:
    """Weekly CO2 (ppm) at Mauna Loa, 1958-2001, gaps filled forward, float64."""
    need("statsmodels", "the CO2 series")
    from statsmodels.datasets import co2  # type: ignore[import-untyped]

    weekly = co2.load_pandas().data["co2"].resample("W").mean().ffill()
    return weekly.to_numpy(dtype=np.float64)


def windows(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(train, test)`` windows of ``WINDOW + 1`` weeks (52 inputs, the next week's target
    after each), the first 80 % of the series for training, standardised by its mean and
    deviation."""
    cut = int(0.8 * len(values))
    scaled = (values - values[:cut].mean()) / values[:cut].std()
    starts = np.arange(len(scaled) - WINDOW)
    cuts = np.lib.stride_tricks.sliding_window_view(scaled, WINDOW + 1)[starts]
    last_step = starts + WINDOW
    return cuts[last_step < cut], cuts[last_step >= cut]


def batches(order: np.ndarray) -> list[np.ndarray]:
    """The index batches of one epoch's ``order``."""
    return [order[k:k + BATCH] for k in range(0, len(order), BATCH)]


class DualtapeLoop:
    """The user's model and loop in dualtape."""

    def __init__(self, cell: str, dtype: str, seed: int) -> None:
        import dualtape as dt

        self.dt = dt
        layer = getattr(dt, cell)(1, HIDDEN, seed=seed, dtype=dtype)
        self.net = dt.RecurrentNetwork([layer, dt.FullyConnected(HIDDEN, 1, seed=seed + 1,
                                                                 dtype=dtype)])
        self.optimizer, self.dtype = dt.Adam(), dtype
        self.mask = np.zeros(WINDOW, dtype=bool)
        self.mask[-1] = True

    def epoch(self, data: np.ndarray, order: np.ndarray) -> float:
        """One epoch over ``data``'s windows in ``order``; the mean of the batches' losses."""
        dt, total, parts = self.dt, 0.0, batches(order)
        for idx in parts:
            cut = data[idx].T.astype(self.dtype)  # (53, B): inputs, then targets one later
            xs, targets = cut[:-1, :, None], cut[1:, :, None]
            result = dt.backpropagate_sequence(self.net, xs, targets, mask=self.mask)
            grads, _ = dt.clip_gradients(result.grads, MAX_NORM)
            self.optimizer.step(self.net.params, grads)
            total += float(result.loss)
        return total / len(parts)

    def test_loss(self, data: np.ndarray) -> float:
        """½·MSE of the next week's forecast over ``data``'s windows."""
        cut = data.T.astype(self.dtype)
        _, last = self.net.predict_sequence(None, cut[:-1, :, None], outputs="last")
        return float(0.5 * np.mean((np.asarray(last)[:, 0] - cut[-1]) ** 2))

    def torch_state(self) -> dict[str, np.ndarray]:
        """The weights as torch's modules name them (``rnn.*``, ``fc.*``)."""
        state = {f"rnn.{k}": v for k, v in self.dt.to_torch(self.net.layers[:1]).items()}
        top = self.net.layers[1].params
        state["fc.weight"], state["fc.bias"] = np.asarray(top["W"]), np.asarray(top["b"])
        return state


class TorchLoop:
    """The same model and loop in torch, from ``state`` (``DualtapeLoop.torch_state``)."""

    def __init__(self, cell: str, dtype: str, state: dict[str, np.ndarray]) -> None:
        torch = need("torch", "the torch side")
        self.torch, self.dtype = torch, getattr(torch, dtype)
        kind = torch.nn.LSTM if cell == "StandardLSTM" else torch.nn.GRU
        self.model = torch.nn.ModuleDict({"rnn": kind(1, HIDDEN), "fc": torch.nn.Linear(HIDDEN, 1)})
        self.model.to(self.dtype)
        self.model.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in state.items()})
        self.optimizer = torch.optim.Adam(self.model.parameters())

    def _forecast(self, cut: Any) -> Any:
        out, _ = self.model["rnn"](cut[:-1, :, None])
        return self.model["fc"](out[-1])[:, 0]

    def epoch(self, data: np.ndarray, order: np.ndarray) -> float:
        """One epoch, as ``DualtapeLoop.epoch``."""
        torch, total, parts = self.torch, 0.0, batches(order)
        for idx in parts:
            cut = torch.from_numpy(data[idx].T).to(self.dtype)
            loss = 0.5 * torch.nn.functional.mse_loss(self._forecast(cut), cut[-1])
            self.optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), MAX_NORM)
            self.optimizer.step()
            total += loss.item()
        return total / len(parts)

    def test_loss(self, data: np.ndarray) -> float:
        """As ``DualtapeLoop.test_loss``."""
        with self.torch.no_grad():
            cut = self.torch.from_numpy(data.T).to(self.dtype)
            return float(0.5 * torch_mean_square(self._forecast(cut) - cut[-1]))

    def state(self) -> dict[str, np.ndarray]:
        """The weights as numpy arrays."""
        return {k: v.detach().numpy() for k, v in self.model.state_dict().items()}


def torch_mean_square(d: Any) -> Any:
    """The mean of ``d²``."""
    return (d * d).mean()


def check(cell: str, seed: int, train: np.ndarray) -> str:
    """One float64 epoch in each from the same weights and order: their losses and weights
    must agree to float rounding; the verdict, or exit naming what differs."""
    ours = DualtapeLoop(cell, "float64", seed)
    theirs = TorchLoop(cell, "float64", ours.torch_state())
    order = np.random.default_rng(seed).permutation(len(train))
    a, b = ours.epoch(train, order), theirs.epoch(train, order)
    ws = ours.torch_state()
    worst = max(float(np.max(np.abs(ws[k] - v))) for k, v in theirs.state().items())
    if not (abs(a - b) <= 1e-7 * abs(b) and worst <= 1e-7):
        sys.exit(f"forecaster: after one float64 epoch dualtape's loss {a!r} and torch's {b!r} "
                 f"(weights apart by up to {worst:.3g}) differ beyond float rounding")
    return f"float64 epoch: loss {a:.10f} vs torch {b:.10f}, weights within {worst:.1e}"


def timed(loop: Any, train: np.ndarray, order: np.ndarray, clock: Any) -> float:
    """Seconds of one epoch of ``loop`` by ``clock``."""
    began = clock()
    loop.epoch(train, order)
    return clock() - began


def run(args: argparse.Namespace) -> dict[str, Any]:
    """The check and the timed epochs; the figures."""
    threadpoolctl = need("threadpoolctl", "one BLAS thread")
    if args.root:
        sys.path.insert(0, os.path.abspath(args.root))
    train, test = windows(series())
    found: dict[str, Any] = {"cell": args.cell, "windows": [len(train), len(test)]}
    if args.keep_freed_memory:
        from dualtape import keep_freed_memory

        found["memory"] = keep_freed_memory() or "freed memory kept"
    ours = DualtapeLoop(args.cell, "float32", args.seed)
    loops: dict[str, Any] = {"dualtape": ours} if args.only != "torch" else {}
    if args.only is None:
        found["check"] = check(args.cell, args.seed, train)
    if args.only != "dualtape":
        loops["torch"] = TorchLoop(args.cell, "float32", ours.torch_state())
        loops["torch"].torch.set_num_threads(1)
    rng = np.random.default_rng(args.seed + 1)
    times: dict[str, list[float]] = {name: [] for name in loops}
    with threadpoolctl.threadpool_limits(1):
        for loop in loops.values():  # the first epoch compiles and warms: not timed
            loop.epoch(train, rng.permutation(len(train)))
        for k in range(args.epochs):
            order = rng.permutation(len(train))
            names = list(loops) if k % 2 == 0 else list(loops)[::-1]
            for name in names:
                times[name].append(timed(loops[name], train, order, CLOCKS[args.clock]))
    for name, loop in loops.items():
        found[name] = {"epoch_s": statistics.median(times[name]), "fastest_s": min(times[name]),
                       "test_loss": loop.test_loss(test)}
    if args.only is None:
        found["ratio"] = statistics.median(
            d / t for d, t in zip(times["dualtape"], times["torch"], strict=True))
    return found


def pairs(args: argparse.Namespace) -> None:
    """This checkout against ``args.pairs`` in alternating processes, dualtape alone: each
    process's fastest of 5 epochs (on a loaded machine the least disturbed one), the median of
    the pairs' ratios."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ratios: list[float] = []
    seconds: dict[str, list[float]] = {"after": [], "before": []}
    for k in range(args.epochs):
        got = {}
        for side in (("after", "before") if k % 2 == 0 else ("before", "after")):
            root = here if side == "after" else args.pairs
            out = subprocess.run(
                [sys.executable, __file__, "--root", root, "--only", "dualtape", "--json",
                 "--epochs", "5", "--cell", args.cell, "--clock", args.clock,
                 *(["--keep-freed-memory"] if args.keep_freed_memory else [])],
                capture_output=True, text=True, check=True).stdout
            got[side] = json.loads(out.splitlines()[-1])["dualtape"]["fastest_s"]
            seconds[side].append(got[side])
        ratios.append(got["after"] / got["before"])
    print(f"{args.cell}: after {statistics.median(seconds['after']):.4f} s, before "
          f"{statistics.median(seconds['before']):.4f} s an epoch (fastest of 5, median of the "
          f"processes); after/before median "
          f"{statistics.median(ratios):.3f} (range {min(ratios):.3f}-{max(ratios):.3f}, "
          f"{len(ratios)} process pairs)")


def main(argv: list[str]) -> None:
    """Run the bench the command line asks for and print its figures."""
    args = parse(argv)
    if args.pairs:
        pairs(args)
        return
    found = run(args)
    if args.json:
        print(json.dumps(found))
        return
    print(f"{found['cell']} 1->{HIDDEN}, FC {HIDDEN}->1, windows {found['windows']} "
          f"(train, test), batch {BATCH}, one thread")
    for line in ("memory", "check"):
        if line in found:
            print(found[line])
    for name in ("dualtape", "torch"):
        if name in found:
            f = found[name]
            print(f"{name:>8}: {f['epoch_s']:.4f} s an epoch (median of {args.epochs}; fastest "
                  f"{f['fastest_s']:.4f}), test loss {f['test_loss']:.5f}")
    if "ratio" in found:
        fastest = found["dualtape"]["fastest_s"] / found["torch"]["fastest_s"]
        print(f"dualtape/torch time per epoch: {found['ratio']:.3f} (median of the pairs; "
              f"{'faster' if found['ratio'] < 1 else 'slower'} than torch), {fastest:.3f} of the "
              "fastest epochs")
    assert all(math.isfinite(found[name]["epoch_s"]) for name in ("dualtape", "torch")
               if name in found)


if __name__ == "__main__":
    main(sys.argv[1:])
