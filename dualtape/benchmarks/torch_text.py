"""The torch references of the main job (``char_model.py``): one training step of the character
model, as a torch user would write it.

- ``GrenadeCharModel``: exactly dualtape's maths in torch autograd: Grenade's LSTM cell
  (``torch_lstm.GrenadeTorchLSTM``, each layer's input projected for the whole window at once),
  a linear top, ``F.cross_entropy`` on the logits, one ``loss.backward()``,
  ``torch.optim.Adam``. Checked against dualtape in ``bench/test_char_model.py``.
- ``NNCharModel``: what users pick instead: ``torch.nn.LSTM`` twice and ``torch.nn.Linear``
  (the textbook cell: hidden state, four recurrent blocks, tanh on the cell) with
  ``torch.optim.Adam``. Same sizes, same windows, same loss; only its time compares with
  dualtape's, not its numbers (its own seeded initialisation).

Each step draws its windows from ``char_model.windows`` (the ones TextTrainer draws), turns
them into one-hot inputs and integer targets on the device, and returns the loss (read back:
the device has finished). Imports torch at module level: import this module only when torch
is installed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch.nn import functional

from . import char_model
from .torch_lstm import GrenadeTorchLSTM, tensor


class _CharModel:
    """What both models share: the window source, the one-hot step, the loss and Adam; a
    model adds ``logits(xs)``, ``(T, B, V)`` logits of one-hot inputs ``xs`` ``(T, B, V)``."""

    def __init__(self, data: dict[str, Any], device: str) -> None:
        self.device, self.vocab = device, len(data["vocab"])
        self.dtype = getattr(torch, data["config"].dtype)
        self.next_window: Callable[[], np.ndarray] = char_model.windows(data)

    def logits(self, xs: torch.Tensor) -> torch.Tensor:
        """``(T, B, V)`` logits of the one-hot inputs ``xs``: each model's own."""
        raise NotImplementedError

    def _start(self, parameters: list[torch.Tensor]) -> None:
        self.optimizer = torch.optim.Adam(parameters, lr=char_model.ADAM_RATE)

    def loss(self, window: np.ndarray) -> torch.Tensor:
        """Mean cross entropy per character (nats) of the logits on ``window`` (T + 1, B)."""
        ids = torch.from_numpy(np.ascontiguousarray(window)).to(self.device)
        xs = functional.one_hot(ids[:-1], self.vocab).to(self.dtype)
        logits = self.logits(xs)
        return functional.cross_entropy(logits.reshape(-1, self.vocab), ids[1:].reshape(-1))

    def step(self) -> float:
        """One training step on the next window: the loss before the update."""
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.loss(self.next_window())
        loss.backward()
        self.optimizer.step()
        return float(loss.item())


class GrenadeCharModel(_CharModel):
    """dualtape's character model (Grenade's LSTMs and a linear top) in torch autograd, from
    ``data``'s parameters."""

    def __init__(self, data: dict[str, Any], device: str = "cpu") -> None:
        super().__init__(data, device)
        *lstms, top = data["params"]
        self.layers = [GrenadeTorchLSTM(p, device) for p in lstms]
        self.W, self.b = (tensor(top[k], device, grad=True) for k in ("W", "b"))
        self._start(self.parameters())

    def parameters(self) -> list[torch.Tensor]:
        """Every parameter in dualtape's order: per LSTM ``W, U, b``, then the top's ``W, b``."""
        return [p for layer in self.layers for p in layer.parameters()] + [self.W, self.b]

    def logits(self, xs: torch.Tensor) -> torch.Tensor:
        """Each LSTM over the whole window from zero cells, then the linear top."""
        h = xs
        for layer in self.layers:
            h = layer.sequence(h)
        return h @ self.W.T + self.b


class NNCharModel(_CharModel):
    """``torch.nn.LSTM(V, n)``, ``torch.nn.LSTM(n, n)``, …, ``torch.nn.Linear(n, V)``, seeded."""

    def __init__(self, data: dict[str, Any], device: str = "cpu", seed: int = 0) -> None:
        super().__init__(data, device)
        torch.manual_seed(seed)
        sizes = [self.vocab, *data["config"].hidden]
        self.lstms = [torch.nn.LSTM(i, o).to(device=device, dtype=self.dtype)
                      for i, o in zip(sizes, sizes[1:], strict=False)]
        self.top = torch.nn.Linear(sizes[-1], self.vocab).to(device=device, dtype=self.dtype)
        self._start(self.parameters())

    def parameters(self) -> list[torch.Tensor]:
        """The LSTMs' parameters, then the top's."""
        return [p for m in (*self.lstms, self.top) for p in m.parameters()]

    def logits(self, xs: torch.Tensor) -> torch.Tensor:
        """The LSTMs from zero states, then the linear top."""
        h = xs
        for lstm in self.lstms:
            h = lstm(h)[0]
        return self.top(h)
