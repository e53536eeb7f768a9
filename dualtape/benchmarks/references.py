"""The reference rows of ``dualtape bench``, as runners for ``measure``.

Each runner has ``label``, ``reference = True``, ``prepare(workload, dtype)`` (a callable, or
``None`` for a workload it does not cover) and ``synchronize()``, like
``runners.BackendRunner``. They start from the same parameters and inputs as dualtape
(``workload.host_data``), so every row does the same work.

- ``naive``: ``naive_lstm.py``, Grenade's per-step structure in plain numpy; batch 1 only (as
  Grenade), lstm and train groups.
- ``torch-autograd``: the same maths in torch autograd (``torch_lstm.py``; the text group's
  character model in ``torch_text.py``); lstm, train, text and memory (the full graph, or
  ``torch.utils.checkpoint`` every ``⌈√T⌉`` steps for the checkpointed tape).
- ``torch.nn.LSTM``: what users pick instead; train and text groups (a different cell).
- ``torch.nn``: the cells group's torch module (``torch.nn.LSTM`` / ``torch.nn.GRU``, the
  same cell and weights as dualtape's ``StandardLSTM`` / ``GRU``; ``cells.py``), and the conv
  group's ``torch.nn.Conv2d`` (``convolution.py``).
- ``jax``: the text group's character model under one ``jax.jit`` (``jax_text.py``), on JAX's
  CPU device.

The library each needs is imported only when a row is prepared; ``reference_runners`` leaves
out the rows whose library is missing (``dualtape bench`` says so in a note).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from . import naive_lstm
from .workloads import TRAIN_RATE, Workload


class NaiveRunner:
    """Grenade's structure in plain numpy (``naive_lstm.py``)."""

    label = "naive"
    reference = True

    def prepare(self, workload: Workload, dtype: str) -> Callable[[], Any] | None:
        """forwards/backwards one step, or train at batch 1; ``None`` otherwise."""
        if workload.batch != 1 or workload.op not in ("forwards", "backwards", "train"):
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
        """forwards (recording the graph), backwards (from a recorded graph), train, text and
        memory."""
        from ..checkpointing import segment_length
        from . import torch_lstm as tl

        if workload.op in ("sgd", "cell", "conv", "digits"):
            return None
        data = workload.host_data(dtype)
        if workload.op == "text":
            from .torch_text import GrenadeCharModel

            return GrenadeCharModel(data, self.device).step
        if workload.op in ("train", "memory"):
            net = tl.GrenadeTorchNetwork(data["params"], TRAIN_RATE, self.device)
            xs = tl.tensor(data["xs"], self.device)
            if workload.op == "memory":
                return tl.SeededTorchCall(net, xs, segment_length(workload.tape, workload.steps))
            return lambda: net.train_step(xs, xs)
        layer = tl.GrenadeTorchLSTM(data["params"][0], self.device)
        x, c, dc, dh = (tl.tensor(data[k], self.device) for k in ("x", "c", "dc", "dh"))
        if workload.op == "forwards":
            return lambda: layer.step(c, x)
        return tl.step_backward(layer, c, x, dc, dh)


class NNLSTMRunner(_TorchRunner):
    """``torch.nn.LSTM(40, 512)`` then ``torch.nn.LSTM(512, 40)`` with ``torch.optim.SGD``; in
    the text group, ``torch_text.NNCharModel``."""

    name = "torch.nn.LSTM"

    def prepare(self, workload: Workload, dtype: str) -> Callable[[], Any] | None:
        """The train and text groups."""
        if workload.op not in ("train", "text"):
            return None
        import torch

        from . import torch_lstm as tl

        data = workload.host_data(dtype)
        if workload.op == "text":
            from .torch_text import NNCharModel

            return NNCharModel(data, device=self.device).step
        net = tl.NNLSTMNetwork(data["xs"].shape[-1], workload.size, getattr(torch, dtype),
                               TRAIN_RATE, self.device)
        xs = tl.tensor(data["xs"], self.device)
        return lambda: net.train_step(xs, xs)


class NNCellRunner(_TorchRunner):
    """The cells group's torch module with dualtape's weights (``cells.torch_step``), and the
    conv group's ``torch.nn.Conv2d`` (``convolution.torch_step``) and digits network
    (``digits.torch_epoch``)."""

    name = "torch.nn"

    def prepare(self, workload: Workload, dtype: str) -> Callable[[], Any] | None:
        """The cells and conv groups only."""
        if workload.op == "conv":
            from . import convolution

            return convolution.torch_step(workload.host_data(dtype), self.device)
        if workload.op == "digits":
            from . import digits

            return digits.torch_epoch(workload.host_data(dtype), workload.batch, self.device)
        if workload.op != "cell":
            return None
        from .cells import torch_step

        return torch_step(workload.host_data(dtype), workload.cell, self.device)


class JaxRunner:
    """dualtape's maths in JAX, one ``jax.jit`` per call: the character model's step
    (``jax_text.py``) and the train group's ``train_recurrent`` (``jax_train.py``). ``threads``
    is the benchmark's thread limit (``jax_threads`` applies it)."""

    label = "jax"
    reference = True

    def __init__(self, threads: int | None = None) -> None:
        self.note = jax_threads(threads)
        self.models: list[Any] = []

    def prepare(self, workload: Workload, dtype: str) -> Callable[[], Any] | None:
        """The text and train groups; the step is compiled here, before timing."""
        if workload.op == "text":
            from .jax_text import JaxCharModel

            model = JaxCharModel(workload.host_data(dtype))
            self.models.append(model)
            return model.step
        if workload.op != "train":
            return None
        import jax

        from .jax_train import JaxGrenadeNetwork

        data = workload.host_data(dtype)
        net = JaxGrenadeNetwork(data["params"], data["xs"], TRAIN_RATE)
        self.models.append(net)
        xs = jax.device_put(data["xs"], net.device)
        return lambda: net.train_step(xs, xs)

    def synchronize(self) -> None:
        """Wait for every model's last step (JAX dispatches asynchronously)."""
        for model in self.models:
            model.block()


JAX_SINGLE_THREAD = "--xla_cpu_multi_thread_eigen=false"


def jax_threads(threads: int | None) -> str:
    """Apply a thread limit to JAX, as far as XLA allows, and say what JAX's threads are.

    XLA reads ``XLA_FLAGS`` once, when JAX starts its first backend, and has one setting
    for the CPU: Eigen's threads in products on or off. So ``threads`` = 1 adds
    ``--xla_cpu_multi_thread_eigen=false`` to ``XLA_FLAGS`` unless JAX has already started;
    a larger limit cannot be applied."""
    if threads is None:
        return "jax: XLA's own threads (not limited)"
    if threads > 1:
        return (f"jax: XLA's own threads: XLA has no thread count, so --threads {threads} "
                "does not reach it")
    started = sys.modules.get("jax._src.xla_bridge")
    if started is not None and started.backends_are_initialized():
        return "jax: XLA's own threads: JAX started before --threads 1 could reach it"
    flags = os.environ.get("XLA_FLAGS", "")
    if JAX_SINGLE_THREAD not in flags.split():
        os.environ["XLA_FLAGS"] = f"{flags} {JAX_SINGLE_THREAD}".strip()
    return f"jax: one thread in products (XLA_FLAGS {JAX_SINGLE_THREAD})"


TORCH_REFERENCES = (TorchAutogradRunner.name, NNLSTMRunner.name, NNCellRunner.name)
JAX_REFERENCES = (JaxRunner.label,)
NAMES = (NaiveRunner.label, *TORCH_REFERENCES, *JAX_REFERENCES)


def torch_installed() -> bool:
    """Whether ``import torch`` works, which the torch references need."""
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


def reference_runners(threads: int | None = None) -> list[Any]:
    """naive always; the torch references on the CPU when torch is installed, and on CUDA too
    when torch sees a GPU; the JAX reference when JAX is installed (found without importing
    it, so that a thread limit can still reach it)."""
    runners: list[Any] = [NaiveRunner()]
    if torch_installed():
        import torch

        devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
        for device in devices:
            runners += [TorchAutogradRunner(device), NNLSTMRunner(device), NNCellRunner(device)]
    if jax_installed():
        runners.append(JaxRunner(threads))
    return runners


def jax_installed() -> bool:
    """Whether JAX is installed, found without importing it (an import takes a second)."""
    return importlib.util.find_spec("jax") is not None


LIBRARIES = {"torch": (TORCH_REFERENCES, torch_installed), "jax": (JAX_REFERENCES, jax_installed)}
"""Each library of reference rows: the rows' names and whether it is installed."""


def missing_libraries() -> list[str]:
    """The libraries of ``LIBRARIES`` not installed here."""
    return [name for name, (_, installed) in LIBRARIES.items() if not installed()]
