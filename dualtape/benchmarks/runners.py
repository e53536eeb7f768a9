"""The runners of ``dualtape bench``: dualtape itself on one backend (``BackendRunner``).

A *runner* turns a workload and a dtype into a callable without arguments, or ``None`` when it
does not cover that workload, and can wait for its device (``synchronize``). The reference
runners (a naive per-step numpy LSTM, the same maths in torch autograd, ``torch.nn.LSTM``, JAX)
live in ``references.py`` and the lower bound in ``bound.py``, with the same two methods.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from ..backend import Backend, from_host, resolve_backend
from ..backend import use_backend as _use_backend
from ..layers.lstm import LSTM
from ..optim import SGD
from ..recurrent import RecurrentNetwork
from ..training import train_recurrent
from . import cells, char_model, convolution, digits
from .calls import TrainingCall
from .workloads import TRAIN_RATE, UPDATE_MOMENTUM, UPDATE_RATE, Workload


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


def backend_from_label(item: str) -> Backend:
    """The backend a label such as ``numpy``, ``cupy:1`` or ``torch:cuda`` names (the inverse
    of ``backend_label``); ``BackendUnavailable`` or ``ValueError`` as ``resolve_backend``'s."""
    name, _, device = item.partition(":")
    return resolve_backend(name, int(device) if device.isdigit() else device or None)


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
                return TrainingCall(_network(self.backend, data),
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


