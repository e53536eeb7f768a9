"""The ``torch`` references: Grenade's LSTM written with torch autograd, and ``torch.nn.LSTM``.

``GrenadeTorchLSTM`` is the same maths as ``dualtape.LSTM`` (state = the cell alone, no tanh on
it), written the way a torch user would: a hand-written cell, a Python loop over time, one
``loss.backward()``, ``torch.optim.SGD``. It is checked against dualtape in
``test_references.py``. ``grenade_loss`` runs it with its full autograd graph or, given
``every``, through ``torch.utils.checkpoint`` (a segment of ``every`` steps recomputed in
backward); ``SeededTorchCall`` is the memory group's call.

``nn_lstm_network`` builds ``torch.nn.LSTM(40, 512)`` then ``torch.nn.LSTM(512, 40)``, "what users
pick instead": a different cell (textbook LSTM, hidden state, four recurrent blocks, tanh on the
cell), so only its time is comparable, not its numbers.

Imports torch at module level: import this module only when torch is installed.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch.utils.checkpoint import checkpoint

from .calls import SeededCall


def tensor(a: np.ndarray, device: str = "cpu", grad: bool = False) -> torch.Tensor:
    """A torch copy of a numpy array (same dtype) on ``device``."""
    return torch.tensor(np.asarray(a), device=device, requires_grad=grad)


class GrenadeTorchLSTM:
    """Grenade's LSTM cell on torch tensors, parameters in dualtape's layout (W, U, b)."""

    def __init__(self, params: dict[str, np.ndarray], device: str = "cpu") -> None:
        self.W, self.U, self.b = (tensor(params[k], device, grad=True) for k in ("W", "U", "b"))
        self.n = self.U.shape[1]

    def parameters(self) -> list[torch.Tensor]:
        """``[W, U, b]``, leaf tensors that collect gradients."""
        return [self.W, self.U, self.b]

    def step(self, c: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One step for ``c`` (B, o) and ``x`` (B, i): ``(c_next, h)``."""
        return self._cell(x @ self.W.T + self.b, c)

    def _cell(self, a: torch.Tensor, c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The step after the input projection ``a = x Wᵀ + b`` (B, 4o): ``(c_next, h)``."""
        n = self.n
        f, i, o = torch.sigmoid(a[:, : 3 * n] + c @ self.U.T).split(n, dim=1)
        c_next = f * c + i * torch.tanh(a[:, 3 * n :])
        return c_next, o * c_next

    def sequence(self, xs: torch.Tensor) -> torch.Tensor:
        """The outputs ``(T, B, o)`` over ``xs`` ``(T, B, i)`` from zero cells, the input
        projected for all steps in one product before the loop (as dualtape does)."""
        c = xs.new_zeros(xs.shape[1], self.n)
        outputs = []
        for a in xs @ self.W.T + self.b:
            c, h = self._cell(a, c)
            outputs.append(h)
        return torch.stack(outputs)


def grenade_loss(layers: list[GrenadeTorchLSTM], xs: torch.Tensor,
                 targets: torch.Tensor, every: int | None = None) -> torch.Tensor:
    """½Σ(y − t)² over ``xs`` (T, B, i) from zero cells, averaged over the batch (dualtape's
    ``squared_error``), stepping the whole stack once per time step as Grenade does; with
    ``every``, each segment of ``every`` steps under ``torch.utils.checkpoint``."""
    steps, batch = xs.shape[:2]
    cells = [xs.new_zeros(batch, layer.n) for layer in layers]

    def segment(*args: torch.Tensor) -> tuple[torch.Tensor, ...]:
        *cells, inputs = args
        outputs = []
        for x in inputs:
            h = x
            for k, layer in enumerate(layers):
                cells[k], h = layer.step(cells[k], h)
            outputs.append(h)
        return (*cells, torch.stack(outputs))

    if every is None:
        ys = segment(*cells, xs)[-1]
    else:
        pieces = []
        for start in range(0, steps, every):
            *cells, ys = checkpoint(segment, *cells, xs[start : start + every],
                                    use_reentrant=False)
            pieces.append(ys)
        ys = torch.cat(pieces)
    diff = ys - targets
    return 0.5 * (diff * diff).sum() / batch


class GrenadeTorchNetwork:
    """A stack of ``GrenadeTorchLSTM`` trained with ``torch.optim.SGD``."""

    def __init__(self, params: list[dict[str, np.ndarray]], rate: float,
                 device: str = "cpu") -> None:
        self.layers = [GrenadeTorchLSTM(p, device) for p in params]
        self.optimizer = torch.optim.SGD(
            [p for layer in self.layers for p in layer.parameters()], lr=rate
        )

    def train_step(self, xs: torch.Tensor, targets: torch.Tensor,
                   every: int | None = None) -> float:
        """Forward, ``loss.backward()``, one SGD step; the loss as a float (syncs the device).
        ``every``: checkpoint segments of that many steps (``grenade_loss``)."""
        self.optimizer.zero_grad(set_to_none=True)
        loss = grenade_loss(self.layers, xs, targets, every)
        loss.backward()
        self.optimizer.step()
        return float(loss.item())


class SeededTorchCall(SeededCall):
    """The memory group's call on ``GrenadeTorchNetwork``: ``train_step(xs, xs, every)`` from
    the seeded weights each time."""

    def __init__(self, net: GrenadeTorchNetwork, xs: torch.Tensor, every: int | None) -> None:
        self.net, self.xs, self.every = net, xs, every
        self.params = [p for layer in net.layers for p in layer.parameters()]
        self.seeded = [p.detach().clone() for p in self.params]

    def restore(self) -> None:
        """Copy the seeded weights back in place."""
        with torch.no_grad():
            for p, seeded in zip(self.params, self.seeded, strict=True):
                p.copy_(seeded)

    def train(self) -> float:
        """One training call."""
        return self.net.train_step(self.xs, self.xs, self.every)

    def weights(self) -> dict[str, np.ndarray]:
        """The weights on the host in dualtape's names (``0.W``, ``0.U``, ``0.b``, ...)."""
        return {f"{k}.{name}": p.detach().cpu().numpy().copy() for k, layer in
                enumerate(self.net.layers) for name, p in zip("WUb", layer.parameters(),
                                                               strict=True)}


class NNLSTMNetwork:
    """``torch.nn.LSTM(n_in, hidden)`` then ``torch.nn.LSTM(hidden, n_in)``, seeded, with SGD."""

    def __init__(self, n_in: int, hidden: int, dtype: torch.dtype, rate: float,
                 device: str = "cpu", seed: int = 0) -> None:
        torch.manual_seed(seed)
        self.first = torch.nn.LSTM(n_in, hidden).to(device=device, dtype=dtype)
        self.second = torch.nn.LSTM(hidden, n_in).to(device=device, dtype=dtype)
        params = [*self.first.parameters(), *self.second.parameters()]
        self.optimizer = torch.optim.SGD(params, lr=rate)

    def train_step(self, xs: torch.Tensor, targets: torch.Tensor) -> float:
        """One training call on ``xs`` (T, B, n_in): squared error averaged over the batch."""
        self.optimizer.zero_grad(set_to_none=True)
        ys, _ = self.second(self.first(xs)[0])
        diff = ys - targets
        loss = 0.5 * (diff * diff).sum() / xs.shape[1]
        loss.backward()
        self.optimizer.step()
        return float(loss.item())


def step_backward(layer: GrenadeTorchLSTM, c: torch.Tensor, x: torch.Tensor,
                  dc: torch.Tensor, dh: torch.Tensor) -> Any:
    """A callable that backpropagates one recorded step (graph built once, kept)."""
    c = c.detach().requires_grad_(True)
    x = x.detach().requires_grad_(True)
    c_next, h = layer.step(c, x)
    inputs = [*layer.parameters(), c, x]

    def backward() -> Any:
        return torch.autograd.grad((c_next, h), inputs, (dc, dh), retain_graph=True)

    return backward
