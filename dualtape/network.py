"""Network: a checked chain of feed-forward layers, forward and backward over their tapes."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from .backend import (
    Backend,
    backend_of,
    describe,
    dtype_name,
    move,
    resolve_backend,
    to_numpy,
)
from .layers.base import Array, Layer, prepare_input, prepare_like, restore
from .losses import loss_function
from .optim import Optimizer


class Chain:
    """What every network shares: the layer list, size checks, parameters and moving them."""

    def __init__(self, layers: Iterable[Layer]) -> None:
        self.layers = list(layers)
        name = type(self).__name__
        if not self.layers:
            raise ValueError(f"{name} needs at least one layer, got an empty list")
        for k, layer in enumerate(self.layers):
            if not isinstance(layer, Layer):
                raise TypeError(f"{name}: layer {k} is a {type(layer).__name__}, not a Layer")
        self.n_in, self.n_out = check_chain(self.layers, name)
        check_same_params(self.layers, name)

    def __repr__(self) -> str:
        return f"{type(self).__name__}([{', '.join(map(repr, self.layers))}])"

    @property
    def params(self) -> list[dict[str, Array]]:
        """Each layer's parameter dict, in order (the dicts themselves, for optimizers)."""
        return [layer.params for layer in self.layers]

    @property
    def dtype(self) -> str | None:
        """The dtype of the parameters, or None when no layer has any."""
        return next((layer.dtype for layer in self.layers if layer.dtype), None)

    @property
    def backend(self) -> Backend | None:
        """Where the parameters live, or None when no layer has any."""
        reference = self._reference()
        return None if reference is None else backend_of(reference)

    def _reference(self) -> Array | None:
        return next((p for layer in self.layers for p in layer.params.values()), None)

    def to(self, backend: str | Backend, device: Any = None) -> Chain:
        """Move every parameter to ``backend`` (and ``device``); returns ``self``."""
        target = backend if isinstance(backend, Backend) else resolve_backend(backend, device)
        for layer in self.layers:
            layer.params.update({k: move(v, target) for k, v in layer.params.items()})
        return self

    def _prepare(self, x: Any, leading: tuple[str, ...] = ("batch",), what: str = "input"):
        return prepare_input(
            x,
            n_features=self.n_in,
            dtype=self.dtype,
            reference=self._reference(),
            owner=type(self).__name__,
            leading=leading,
            what=what,
        )


def check_chain(layers: list[Layer], owner: str) -> tuple[int | None, int | None]:
    """Check that sizes chain; return the network's ``(n_in, n_out)`` (None = any size)."""
    n_in = size = None
    previous = None
    for k, layer in enumerate(layers):
        if layer.n_in is not None:
            if size is not None and layer.n_in != size:
                raise ValueError(
                    f"{owner}: layer {k} {layer!r} takes {layer.n_in} features but layer "
                    f"{previous[0]} {previous[1]!r} gives {size}"
                )
            n_in = layer.n_in if n_in is None else n_in
        if layer.n_out is not None:
            size, previous = layer.n_out, (k, layer)
    return n_in, size


def check_same_params(layers: list[Layer], owner: str) -> None:
    """All parameters share one dtype, backend and device."""
    first = None
    for layer in layers:
        for key, p in layer.params.items():
            if first is None:
                first = (layer, key, p)
                continue
            if dtype_name(p.dtype) != dtype_name(first[2].dtype) or describe(p) != describe(
                first[2]
            ):
                raise ValueError(
                    f"{owner}: {layer!r}.{key} is a {p.dtype} {describe(p)} but "
                    f"{first[0]!r}.{first[1]} is a {first[2].dtype} {describe(first[2])}; "
                    "build all layers with one dtype on one backend"
                )


def read_loss(xp: Any, value: Array, x: Array, where: str, optimizer: Any = None) -> float:
    """The loss ``value`` as a float, read from the device together with whether the input
    ``x`` is finite (one transfer, one sync); NaN or inf in either raises
    ``FloatingPointError`` (the caller has applied no update yet). With an ``optimizer`` that
    spans processes (``distributed.DataParallel``) both are averaged over them first, so every
    process raises, or none."""
    finite = xp.astype(xp.all(xp.isfinite(x)), value.dtype)
    local = [float(v) for v in to_numpy(xp.stack([value, finite]))]
    loss, input_ok = mean_over_processes(optimizer, local)
    if not local[1]:
        raise FloatingPointError(f"{where}: the input holds NaN or inf; no update was applied")
    if input_ok < 1.0:
        raise FloatingPointError(f"{where}: another process's input holds NaN or inf; no "
                                 "update was applied on any process")
    if not math.isfinite(loss):
        raise FloatingPointError(
            f"{where}: the loss is {loss}; no update was applied. Check the targets for "
            "NaN/inf, or lower the learning rate"
        )
    return loss


def mean_over_processes(optimizer: Any, values: list[float]) -> list[float]:
    """``values`` averaged over the processes that train with ``optimizer``: one that spans
    processes (``distributed.DataParallel``) has a collective ``mean``; others train alone."""
    mean = getattr(optimizer, "mean", None)
    return values if mean is None else mean(values)


class Network(Chain):
    """A chain of feed-forward layers whose sizes are checked at construction."""

    def __init__(self, layers: Iterable[Layer]) -> None:
        super().__init__(layers)
        for k, layer in enumerate(self.layers):
            if layer.recurrent:
                raise TypeError(f"Network: layer {k} {layer!r} is recurrent; use RecurrentNetwork")

    def forward(self, x: Any) -> tuple[list[Any], Array]:
        """``(tapes, y)`` for ``x`` of shape ``(batch, n_in)`` or ``(n_in,)``."""
        xp, x, single = self._prepare(x)
        tapes, y = self._forward(xp, x)
        return tapes, restore(y, single)

    def backward(self, tapes: list[Any], dy: Any) -> tuple[list[dict[str, Array]], Array]:
        """``(grads, dx)``: one gradient dict per layer, and the input's gradient."""
        if len(tapes) != len(self.layers):
            raise ValueError(f"Network: expected {len(self.layers)} tapes, got {len(tapes)}")
        shape = self.layers[-1]._output_shape(tapes[-1])
        xp, dy, single = prepare_like(dy, shape, tapes[0][0], "Network", "dy")
        grads, dx = self._backward(xp, tapes, dy)
        return grads, restore(dx, single)

    def predict(self, x: Any) -> Array:
        """The output for ``x``, without keeping tapes."""
        return self.forward(x)[1]

    def _forward(self, xp: Any, x: Array) -> tuple[list[Any], Array]:
        tapes = []
        for layer in self.layers:
            tape, x = layer._forward(xp, x)
            tapes.append(tape)
        return tapes, x

    def _backward(self, xp: Any, tapes: list[Any], dy: Array) -> tuple[list[dict], Array]:
        grads: list[dict[str, Array]] = [{} for _ in self.layers]
        for k in reversed(range(len(self.layers))):
            grads[k], dy = self.layers[k]._backward(xp, tapes[k], dy)
        return grads, dy


def train(
    net: Network, x: Any, target: Any, optimizer: Optimizer, loss: str = "squared_error"
) -> float:
    """One training step: forward, loss, backward, update. Returns the loss as a float.

    The loss is averaged over the batch. A NaN or infinite input, or a non-finite loss, raises
    ``FloatingPointError`` before any parameter changes (an infinite input can give a finite
    loss through a saturating layer such as ``Tanh``, yet NaN gradients).
    """
    objective = loss_function(loss)
    xp, x, _ = net._prepare(x)
    tapes, y = net._forward(xp, x)
    value, dy = objective(xp, y, target)
    result = read_loss(xp, value, x, "train", optimizer)
    grads, _ = net._backward(xp, tapes, dy)
    optimizer.step(net.params, grads)
    return result
