"""Training calls that start from the seeded weights each time: the memory group's rows
(``memory.py``), dualtape's and torch autograd's alike."""

from __future__ import annotations

from typing import Any

import numpy as np


class SeededCall:
    """A training call that starts from the seeded weights each time: ``restore`` then
    ``train``. Subclasses say which ``allocator`` measures them (``numpy``, ``cupy`` or "")."""

    allocator = ""

    def __call__(self) -> Any:
        self.restore()
        return self.train()

    def restore(self) -> None:
        """Put the seeded weights back."""
        raise NotImplementedError

    def train(self) -> Any:
        """One training call."""
        raise NotImplementedError

    def weights(self) -> dict[str, np.ndarray]:
        """Host copies of the weights, ``{"<layer>.<name>": array}`` in dualtape's names."""
        raise NotImplementedError


class TrainingCall(SeededCall):
    """dualtape's ``train_recurrent(net, xs, xs, SGD(rate), tape=tape)`` on ``net``'s backend."""

    def __init__(self, net: Any, xs: Any, tape: str, rate: float, backend: Any) -> None:
        self.net, self.xs, self.tape, self.rate, self.xp = net, xs, tape, rate, backend.xp
        self.allocator = backend.name if backend.name in ("numpy", "cupy") else ""
        self.seeded = [{k: self.xp.asarray(p, copy=True) for k, p in layer.params.items()}
                       for layer in net.layers]

    def restore(self) -> None:
        """Fresh copies of the seeded weights (so the parameters' versions move on)."""
        for layer, seeded in zip(self.net.layers, self.seeded, strict=True):
            for k, p in seeded.items():
                layer.params[k] = self.xp.asarray(p, copy=True)

    def train(self) -> Any:
        """One ``train_recurrent`` call with a fresh SGD."""
        from ..optim import SGD
        from ..training import train_recurrent

        return train_recurrent(self.net, self.xs, self.xs, SGD(rate=self.rate), tape=self.tape)

    def weights(self) -> dict[str, np.ndarray]:
        """The network's parameters on the host."""
        from ..backend import to_numpy

        return {f"{k}.{name}": to_numpy(p) for k, layer in enumerate(self.net.layers)
                for name, p in layer.params.items()}
