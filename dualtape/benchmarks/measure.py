"""Workloads, runners and timing of ``dualtape bench``.

The workloads are Grenade's criterion suite ``bench-lstm``:

- ``lstm``: forwards-60, forwards-512, backwards-60, backwards-512: one step of ``LSTM(40, n)``
  at batch 1 (backwards from a tape made before timing starts);
- ``update``: matrix-60x60, matrix-512x512: one SGD step with momentum on one parameter;
- ``train``: one-, ten- and fifty-time-steps of ``train_recurrent`` on
  ``[LSTM(40, 512), LSTM(512, 40)]``, ``SGD(rate=0.1)``, target = input, batch 1, and fifty time
  steps at batch 32 and 256;
- ``text``: the main job, one ``TextTrainer.step`` of train-text's default model with Adam
  (``char_model.py``); its rows also report characters per second;
- ``cells``: the standard LSTM and the GRU at the main job's sizes, one sequence forwards and
  back through one layer (``cells.py``), against the torch module;
- ``conv``: one ``Convolution`` layer forwards and back (``convolution.py``), against
  ``torch.nn.Conv2d``, and one training epoch of the digits example's convolutional network
  (``digits.py``), against the same network in ``torch.nn``;
- ``memory`` (run only when named): one ``train_recurrent`` call of the train group's network
  at batch 1 over 1,000, 10,000 and 100,000 steps with the full and the checkpointed
  (``tape="sqrt"``) tape; its rows also report the call's peak memory and whether the
  weights after it equal the full tape's (``memory.py``).

A *runner* turns a workload and a dtype into a callable without arguments, or ``None`` when it
does not cover that workload, and can wait for its device (``synchronize``). ``BackendRunner``
runs dualtape on one backend; the reference runners (a naive per-step numpy LSTM, the same
maths in torch autograd, ``torch.nn.LSTM``) live in ``references.py`` beside this module and
have the same two methods. Each workload is timed on every runner and
dtype in turn, round-robin, so drift in the machine's speed hits all of them alike.

Heavy imports (torch, JAX, matplotlib, threadpoolctl) happen inside functions, so
``dualtape --help`` stays fast. ``limited_threads`` (``text/threads.py``, shared with train-text)
limits the BLAS, OpenMP and torch threads of a run.
"""

from __future__ import annotations

import importlib
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import numpy as np

from ..backend import Backend, from_host, resolve_backend
from ..backend import use_backend as _use_backend
from ..layers.lstm import LSTM
from ..optim import SGD
from ..recurrent import RecurrentNetwork
from ..text.threads import threadpoolctl_installed
from ..training import train_recurrent
from . import cells, char_model, convolution, digits, memory

N_IN = 40
DTYPES = ("float32", "float64")
SPEED_BACKENDS_EXCLUDED = ("array_api_strict",)
SEED = 20240601


@dataclass(frozen=True)
class Workload:
    """One timed operation: ``op`` is forwards, backwards, sgd, train, text, cell, conv, digits
    or memory; ``size`` is the LSTM width (lstm group, the hidden layer in train, each of the
    ``layers`` LSTMs in text, the ``cell`` layer's units), the matrix side (update group) or
    the output channels (conv); ``n_in`` the width of the input and, in train, of the output
    (in text, the vocabulary; in conv, the input channels); ``steps`` the time steps (in text,
    the window length); ``cell`` the layer kind of the cells group; ``tape`` the tape policy
    of the memory group."""

    group: str
    name: str
    op: str
    size: int = 512
    batch: int = 1
    steps: int = 1
    n_in: int = N_IN
    layers: int = 1
    cell: str = ""
    tape: str = ""

    @property
    def chars_per_call(self) -> int | None:
        """Characters a call trains on (``steps · batch``) for the text group, else None."""
        return self.steps * self.batch if self.op == "text" else None

    @property
    def key(self) -> str:
        """``group/name``, e.g. ``train/fifty-time-steps``."""
        return f"{self.group}/{self.name}"

    def smoke(self) -> Workload:
        """The same code path, cheap enough for a test run: batched variants run 2 steps."""
        return replace(self, steps=min(self.steps, 2)) if self.batch > 1 else self

    def host_data(self, dtype: str) -> dict[str, Any]:
        """The workload's inputs as numpy arrays, the same for every runner.

        ``params`` is a list of LSTM parameter dicts (dualtape's layout); batch-1 inputs keep
        their batch axis: ``x`` (1, 40), ``c``/``dc``/``dh`` (1, n), ``xs`` (T, batch, 40).
        The text group's data is ``char_model.host_data``'s (corpus ids and the network's
        parameters).
        """
        rng = np.random.default_rng(SEED)

        def uniform(*shape: int) -> np.ndarray:
            return rng.uniform(-1.0, 1.0, size=shape).astype(dtype)

        n, n_in = self.size, self.n_in
        if self.op == "text":
            return char_model.host_data(self, dtype, SEED)
        if self.op == "cell":
            return cells.host_data(self, dtype, SEED)
        if self.op == "conv":
            return convolution.host_data(self, dtype, SEED)
        if self.op == "digits":
            return digits.host_data(self, dtype, SEED)
        if self.op == "memory":
            return replace(self, op="train").host_data(dtype)
        if self.op == "sgd":
            return {"w": uniform(n, n), "g": uniform(n, n)}
        if self.op in ("forwards", "backwards"):
            return {
                "params": [lstm_host_params(n_in, n, 1, dtype)],
                "x": uniform(1, n_in), "c": uniform(1, n), "dc": uniform(1, n), "dh": uniform(1, n),
            }
        return {
            "params": [lstm_host_params(n_in, n, 1, dtype), lstm_host_params(n, n_in, 2, dtype)],
            "xs": uniform(self.steps, self.batch, n_in),
        }


WORKLOADS: tuple[Workload, ...] = (
    Workload("lstm", "forwards-60", "forwards", 60),
    Workload("lstm", "forwards-512", "forwards", 512),
    Workload("lstm", "backwards-60", "backwards", 60),
    Workload("lstm", "backwards-512", "backwards", 512),
    Workload("update", "matrix-60x60", "sgd", 60),
    Workload("update", "matrix-512x512", "sgd", 512),
    Workload("train", "one-time-step", "train", 512, 1, 1),
    Workload("train", "ten-time-steps", "train", 512, 1, 10),
    Workload("train", "fifty-time-steps", "train", 512, 1, 50),
    Workload("train", "fifty-time-steps-batch-32", "train", 512, 32, 50),
    Workload("train", "fifty-time-steps-batch-64", "train", 512, 64, 50),
    Workload("train", "tiny-4-8-4-fifty-time-steps", "train", 8, 1, 50, n_in=4),
    Workload("train", "fifty-time-steps-batch-256", "train", 512, 256, 50),
    Workload("text", "char-model-80x80-batch-32", "text", 80, 32, 50, n_in=57, layers=2),
    Workload("cells", "standard-lstm-80x80-batch-32", "cell", 80, 32, 50, n_in=80,
             cell="StandardLSTM"),
    Workload("cells", "gru-80x80-batch-32", "cell", 80, 32, 50, n_in=80, cell="GRU"),
    Workload("conv", "convolution-8to16-3x3-28x28-batch-32", "conv", 16, 32, n_in=8),
    Workload("conv", "digits-epoch-1347-images-batch-32", "digits", 16, 32, n_in=1),
    *(Workload("memory", f"{tape}-tape-{steps}-steps", "memory", 512, 1, steps, tape=tape)
      for steps in memory.STEPS for tape in memory.TAPES),
)
ON_REQUEST = ("memory",)
"""Groups that run only when ``--workloads`` names them (minutes, and GBs of memory)."""
TRAIN_RATE = 0.1
UPDATE_RATE, UPDATE_MOMENTUM = 0.1, 0.9


def lstm_host_params(n_in: int, n_out: int, seed: int, dtype: str) -> dict[str, np.ndarray]:
    """Grenade-initialised LSTM parameters on the host, drawn as ``LSTM(..., seed=seed)``."""
    with _use_backend("numpy"):
        return dict(LSTM(n_in, n_out, seed=seed, dtype=dtype).params)


def select_workloads(names: Sequence[str] | None = None, quick: bool = False) -> list[Workload]:
    """Workloads whose group, name or key is in ``names`` (when empty, all but the groups of
    ``ON_REQUEST``); ``quick`` drops the variants above batch 32 and the memory rows above
    ``memory.QUICK_STEPS`` steps."""
    chosen = [w for w in WORKLOADS if {w.group, w.name, w.key} & set(names or ())
              or not names and w.group not in ON_REQUEST]
    unknown = set(names or ()) - {s for w in WORKLOADS for s in (w.group, w.name, w.key)}
    if unknown:
        raise ValueError(f"unknown workloads {sorted(unknown)}; known: "
                         f"{', '.join(w.key for w in WORKLOADS)} or a group")
    return [w for w in chosen if not (quick and (w.batch > 32 or w.op == "memory"
                                                 and w.steps > memory.QUICK_STEPS))]


# --- runners -------------------------------------------------------------------------------


class Runner(Protocol):
    """Something that can run workloads: dualtape on a backend, or a reference."""

    label: str
    reference: bool

    def prepare(self, workload: Workload, dtype: str) -> Callable[[], Any] | None:
        """A callable running ``workload`` once, or ``None`` if this runner does not cover it."""
        ...

    def synchronize(self) -> None:
        """Wait until the device has finished all queued work."""
        ...


def synchronize(backend: Backend) -> None:
    """Wait for ``backend``'s device to finish queued work (a no-op on CPU backends)."""
    if backend.name == "cupy":
        backend.device.synchronize()
    elif backend.name == "torch" and backend.device.type == "cuda":
        importlib.import_module("torch").cuda.synchronize(backend.device)


def backend_label(backend: Backend) -> str:
    """``numpy``, ``torch``, ``cupy``; with ``:device`` when not the default device."""
    default = resolve_backend(backend.name).device
    return backend.name if backend.device == default else f"{backend.name}:{backend.device}"


class BackendRunner:
    """dualtape itself on one backend and device."""

    reference = False

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.label = backend_label(backend)

    def prepare(self, workload: Workload, dtype: str) -> Callable[[], Any]:
        """Build the layers and inputs of ``workload`` on this backend."""
        return self.prepare_data(workload, workload.host_data(dtype))

    def prepare_data(self, workload: Workload, data: dict[str, Any]) -> Callable[[], Any]:
        """Build ``workload`` on this backend from host ``data`` shaped as ``host_data``
        gives it, in the dtype of its arrays (tests give their own data)."""
        with _use_backend(self.backend.name, self.backend.device):
            if workload.op == "cell":
                return cells.prepare(self.backend, data, workload.cell)
            if workload.op == "conv":
                return convolution.prepare(self.backend, data)
            if workload.op == "digits":
                return digits.prepare(self.backend, data, workload.batch)
            if workload.op == "memory":
                return memory.TrainingCall(_network(self.backend, data),
                                           from_host(data["xs"], self.backend), workload.tape,
                                           TRAIN_RATE, self.backend)
            return _PREPARE[workload.op](self.backend, data)

    def synchronize(self) -> None:
        """Wait for this backend's device."""
        synchronize(self.backend)


def _lstm(host: dict[str, np.ndarray], backend: Backend) -> LSTM:
    n_out, n_in = host["W"].shape[0] // 4, host["W"].shape[1]
    layer = LSTM(n_in, n_out, dtype=str(host["W"].dtype))
    layer.params = {k: from_host(v.copy(), backend) for k, v in host.items()}
    return layer


def _prepare_forwards(backend: Backend, data: dict[str, Any]) -> Callable[[], Any]:
    layer = _lstm(data["params"][0], backend)
    x, c = from_host(data["x"], backend), from_host(data["c"], backend)
    return lambda: layer.forward(c, x)


def _prepare_backwards(backend: Backend, data: dict[str, Any]) -> Callable[[], Any]:
    layer = _lstm(data["params"][0], backend)
    x, c, dc, dh = (from_host(data[k], backend) for k in ("x", "c", "dc", "dh"))
    tape, _, _ = layer.forward(c, x)
    return lambda: layer.backward(tape, dc, dh)


def _prepare_sgd(backend: Backend, data: dict[str, Any]) -> Callable[[], Any]:
    optimizer = SGD(rate=UPDATE_RATE, momentum=UPDATE_MOMENTUM)
    params = [{"w": from_host(data["w"], backend)}]
    grads = [{"w": from_host(data["g"], backend)}]
    return lambda: optimizer.step(params, grads)


def _network(backend: Backend, data: dict[str, Any]) -> RecurrentNetwork:
    return RecurrentNetwork([_lstm(p, backend) for p in data["params"]])


def _prepare_train(backend: Backend, data: dict[str, Any]) -> Callable[[], Any]:
    net = _network(backend, data)
    xs = from_host(data["xs"], backend)
    optimizer = SGD(rate=TRAIN_RATE)
    return lambda: train_recurrent(net, xs, xs, optimizer)


_PREPARE = {
    "forwards": _prepare_forwards,
    "backwards": _prepare_backwards,
    "sgd": _prepare_sgd,
    "train": _prepare_train,
    "text": char_model.prepare,
}


# --- timing --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Timing:
    """How long to measure each (workload, runner, dtype) case: ``warmup`` calls first (the
    last one also estimates the time of a call), then samples of ``number`` calls lasting at
    least ``min_sample`` s, about ``budget`` s of them, but no fewer than ``min_rounds`` and no
    more than ``max_rounds``."""

    budget: float = 1.5
    min_rounds: int = 5
    max_rounds: int = 200
    min_sample: float = 0.01
    warmup: int = 2


FULL = Timing()
QUICK = Timing(budget=0.25, min_rounds=3, max_rounds=30, min_sample=0.004, warmup=1)


@dataclass
class Result:
    """The samples (seconds per call) of one workload on one runner in one dtype."""

    workload: Workload
    runner: str
    reference: bool
    dtype: str
    samples: list[float] = field(default_factory=list)
    number: int = 1
    error: str | None = None
    memory: memory.Memory | None = None

    @property
    def median_ms(self) -> float:
        """Median time per call in milliseconds (NaN without samples)."""
        return 1e3 * float(np.median(self.samples)) if self.samples else math.nan

    @property
    def min_ms(self) -> float:
        """Fastest sample, ms per call."""
        return 1e3 * min(self.samples) if self.samples else math.nan

    @property
    def max_ms(self) -> float:
        """Slowest sample, ms per call."""
        return 1e3 * max(self.samples) if self.samples else math.nan

    @property
    def chars_per_second(self) -> float | None:
        """Characters trained on per second at the median (text workloads; else None)."""
        chars = self.workload.chars_per_call
        return None if chars is None else 1e3 * chars / self.median_ms

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready record."""
        w = self.workload
        return {
            "workload": w.key, "group": w.group, "size": w.size, "batch": w.batch,
            "steps": w.steps, "runner": self.runner, "reference": self.reference,
            "dtype": self.dtype, "median_ms": self.median_ms, "min_ms": self.min_ms,
            "max_ms": self.max_ms, "chars_per_call": w.chars_per_call,
            "chars_per_s": self.chars_per_second, "calls_per_sample": self.number,
            "samples_ms": [1e3 * s for s in self.samples], "error": self.error,
            **({"tape": w.tape, "memory": self.memory.as_dict()} if self.memory else {}),
        }


def _timer(run: Callable[[], Any], sync: Callable[[], None]) -> Callable[[int], float]:
    def timed(number: int) -> float:
        sync()
        start = time.perf_counter()
        for _ in range(number):
            run()
        sync()
        return (time.perf_counter() - start) / number

    return timed


def measure_workload(
    workload: Workload,
    runners: Sequence[Runner],
    dtypes: Sequence[str] = DTYPES,
    timing: Timing = FULL,
    threads: int | None = None,
) -> list[Result]:
    """Time ``workload`` on every runner and dtype, round-robin; failures become error rows.
    A memory workload is timed in at most ``memory.ROUNDS`` calls after one warm-up call,
    then each row's memory is measured in a fresh process under ``threads``
    (``memory.measure``)."""
    if workload.op == "memory":
        timing = replace(timing, warmup=1, min_rounds=min(timing.min_rounds, memory.ROUNDS),
                         max_rounds=min(timing.max_rounds, memory.ROUNDS))
    results: list[Result] = []
    cases: list[tuple[Result, Callable[[int], float]]] = []
    runner_of: dict[int, Runner] = {}
    per_round = 0.0
    for runner in runners:
        for dtype in dtypes:
            result = Result(workload, runner.label, runner.reference, dtype)
            try:
                run = runner.prepare(workload, dtype)
                if run is None:
                    continue
                timed = _timer(run, runner.synchronize)
                for _ in range(timing.warmup - 1):
                    timed(1)
                once = max(timed(1), 1e-9)
                result.number = max(1, math.ceil(timing.min_sample / once))
                per_round += once * result.number
            except Exception as exc:  # a broken backend must not stop the others
                result.error = f"{type(exc).__name__}: {exc}"
            results.append(result)
            if result.error is None:
                cases.append((result, timed))
                runner_of[id(result)] = runner
    if not cases:
        return results
    rounds = int(timing.budget * len(cases) / max(per_round, 1e-9))
    rounds = min(max(rounds, timing.min_rounds), timing.max_rounds)
    for k in range(rounds):
        shift = k % len(cases)
        for result, timed in cases[shift:] + cases[:shift]:
            if result.error is None:
                try:
                    result.samples.append(timed(result.number))
                except Exception as exc:
                    result.error = f"{type(exc).__name__}: {exc}"
    if workload.op == "memory":
        for result, _ in cases:
            if result.error is None:
                try:
                    result.memory = memory.measure(runner_of[id(result)], workload,
                                                   result.dtype, threads)
                except Exception as exc:
                    result.error = f"{type(exc).__name__}: {exc}"
    return results


def require_threadpoolctl() -> None:
    """Refuse (``SystemExit`` with the fix) a thread limit without threadpoolctl."""
    if not threadpoolctl_installed():
        raise SystemExit("dualtape bench: --threads needs threadpoolctl: "
                         "pip install 'dualtape[bench]'")
