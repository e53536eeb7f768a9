"""The reference rows of ``dualtape bench``, as runners for ``measure``.

Each runner has ``label``, ``reference = True``, ``prepare(workload, dtype)`` (a callable, or
``None`` for a workload it does not cover) and ``synchronize()``, like
``measure.BackendRunner``. They start from the same parameters and inputs as dualtape
(``workload.host_data``), so every row does the same work.

- ``naive``: ``naive_lstm.py``, Grenade's per-step structure in plain numpy; batch 1 only (as
  Grenade), lstm and train groups.
- ``torch-autograd``: the same maths in torch autograd (``torch_lstm.py``); lstm and train.
- ``torch.nn.LSTM``: what users pick instead; train group only (a different cell).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from . import naive_lstm
from .measure import TRAIN_RATE, Workload


class NaiveRunner:
    """Grenade's structure in plain numpy (``naive_lstm.py``)."""

    label = "naive"
    reference = True

    def prepare(self, workload: Workload, dtype: str) -> Callable[[], Any] | None:
        """forwards/backwards one step, or train at batch 1; ``None`` otherwise."""
        if workload.batch != 1 or workload.op == "sgd":
            return None
        data = workload.host_data(dtype)
        layers = [naive_lstm.NaiveLSTM(p) for p in data["params"]]
        if workload.op == "train":
            xs = np.ascontiguousarray(data["xs"][:, 0, :])
            return lambda: naive_lstm.train_step(layers, xs, xs, TRAIN_RATE)
        x, c = data["x"][0], data["c"][0]
        if workload.op == "forwards":
            return lambda: layers[0].forward(c, x)
        tape, _, _ = layers[0].forward(c, x)
        dc, dh = data["dc"][0], data["dh"][0]
        return lambda: layers[0].backward(tape, dc, dh)

    def synchronize(self) -> None:
        """Nothing to wait for on the CPU."""


class _TorchRunner:
    reference = True
    name = ""

    def __init__(self, device: str = "cpu") -> None:
        self.device = device
        self.label = self.name if device == "cpu" else f"{self.name}:{device}"

    def synchronize(self) -> None:
        """Wait for the CUDA device (nothing to do on the CPU)."""
        if self.device != "cpu":
            import torch

            torch.cuda.synchronize(self.device)


class TorchAutogradRunner(_TorchRunner):
    """Grenade's LSTM maths in torch autograd: hand-written cell, loop, backward, SGD."""

    name = "torch-autograd"

    def prepare(self, workload: Workload, dtype: str) -> Callable[[], Any] | None:
        """forwards (recording the graph), backwards (from a recorded graph) and train."""
        from . import torch_lstm as tl

        if workload.op == "sgd":
            return None
        data = workload.host_data(dtype)
        if workload.op == "train":
            net = tl.GrenadeTorchNetwork(data["params"], TRAIN_RATE, self.device)
            xs = tl.tensor(data["xs"], self.device)
            return lambda: net.train_step(xs, xs)
        layer = tl.GrenadeTorchLSTM(data["params"][0], self.device)
        x, c, dc, dh = (tl.tensor(data[k], self.device) for k in ("x", "c", "dc", "dh"))
        if workload.op == "forwards":
            return lambda: layer.step(c, x)
        return tl.step_backward(layer, c, x, dc, dh)


class NNLSTMRunner(_TorchRunner):
    """``torch.nn.LSTM(40, 512)`` then ``torch.nn.LSTM(512, 40)`` with ``torch.optim.SGD``."""

    name = "torch.nn.LSTM"

    def prepare(self, workload: Workload, dtype: str) -> Callable[[], Any] | None:
        """The train group only."""
        if workload.op != "train":
            return None
        import torch

        from . import torch_lstm as tl

        data = workload.host_data(dtype)
        net = tl.NNLSTMNetwork(data["xs"].shape[-1], workload.size, getattr(torch, dtype),
                               TRAIN_RATE, self.device)
        xs = tl.tensor(data["xs"], self.device)
        return lambda: net.train_step(xs, xs)


TORCH_REFERENCES = (TorchAutogradRunner.name, NNLSTMRunner.name)
NAMES = (NaiveRunner.label, *TORCH_REFERENCES)


def torch_installed() -> bool:
    """Whether ``import torch`` works, which the torch references need."""
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


def reference_runners() -> list[Any]:
    """naive always; the torch references on the CPU when torch is installed, and on CUDA too
    when torch sees a GPU."""
    runners: list[Any] = [NaiveRunner()]
    if not torch_installed():
        return runners
    import torch

    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    for device in devices:
        runners += [TorchAutogradRunner(device), NNLSTMRunner(device)]
    return runners
