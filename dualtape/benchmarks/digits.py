"""The conv group's digits epoch: Grenade's MNIST network sized for 8x8 digits, one epoch.

``conv/digits-epoch-1347-images-batch-32``: ``conv_net`` (the network ``examples/digits.py``
trains on scikit-learn's digits) for one epoch, per call, over 1,347 seeded random 1x8x8
images with random labels (the size of the example's training split; random data, so the
benchmark needs no scikit-learn) in fixed minibatches of 32, ``dualtape.train`` with softmax
cross entropy and ``Adam(RATE)``. The reference row is the same network in ``torch.nn``
(``Conv2d(padding=1)``, ``MaxPool2d``, ``ReLU``, ``Flatten``, ``Linear``) on the same weights,
with ``CrossEntropyLoss`` and ``torch.optim.Adam``: what a user would otherwise write.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..backend import Backend, from_host, use_backend
from ..layers import Convolution, FullyConnected, Pad, Pooling, Relu, Reshape
from ..network import Network
from ..optim import Adam
from ..training import train

IMAGES, CLASSES, RATE = 1347, 10, 0.003


def conv_net(seed: int, dtype: str) -> Network:
    """Grenade's MNIST network sized for 8x8: a padded 3x3 Convolution of 16 filters ->
    Pooling(2) -> Relu -> Reshape -> FullyConnected(256, 10) logits (2,730 parameters)."""
    return Network([
        Pad(1, 1, 1, 1),
        Convolution(1, 16, 3, seed=seed, dtype=dtype),
        Pooling(2),
        Relu(),
        Reshape((16, 4, 4), (256,)),
        FullyConnected(256, CLASSES, seed=seed + 1, dtype=dtype),
    ])


def host_data(workload: Any, dtype: str, seed: int) -> dict[str, Any]:
    """The network's seeded parameters (``params``: one dict per layer), the images ``x``
    (IMAGES, 1, 8, 8) in [0, 1] and their labels ``y``, host arrays."""
    rng = np.random.default_rng(seed)
    with use_backend("numpy"):
        params = [dict(group) for group in conv_net(seed, dtype).params]
    x = rng.uniform(0, 1, (IMAGES, 1, 8, 8)).astype(dtype)
    return {"params": params, "x": x, "y": rng.integers(0, CLASSES, IMAGES)}


def prepare(backend: Backend, data: dict[str, Any], size: int) -> Callable[[], Any]:
    """dualtape: one epoch of ``train`` calls on minibatches of ``size`` per call; returns
    the network's parameters."""
    net = conv_net(0, str(data["x"].dtype))
    for group, values in zip(net.params, data["params"], strict=True):
        group.update({k: from_host(np.array(v), backend) for k, v in values.items()})
    optimizer = Adam(RATE)
    batches = [(from_host(data["x"][k:k + size], backend), from_host(data["y"][k:k + size],
                                                                      backend))
               for k in range(0, IMAGES, size)]

    def epoch() -> list[dict[str, Any]]:
        for x, y in batches:
            train(net, x, y, optimizer, loss="softmax_cross_entropy")
        return net.params

    return epoch


def torch_epoch(data: dict[str, Any], size: int, device: str = "cpu") -> Callable[[], Any]:
    """The same network, weights and minibatches of ``size`` in ``torch.nn`` with
    ``torch.optim.Adam``, one epoch per call; returns the module."""
    import torch

    dtype = getattr(torch, str(data["x"].dtype))
    module = torch.nn.Sequential(
        torch.nn.Conv2d(1, 16, 3, padding=1), torch.nn.MaxPool2d(2), torch.nn.ReLU(),
        torch.nn.Flatten(), torch.nn.Linear(256, CLASSES)).to(device=device, dtype=dtype)
    conv, linear = data["params"][1], data["params"][5]
    module.load_state_dict({f"{k}.{name}": torch.from_numpy(np.array(layer[key]))
                            for k, layer in ((0, conv), (4, linear))
                            for name, key in (("weight", "W"), ("bias", "b"))})
    optimizer = torch.optim.Adam(module.parameters(), lr=RATE)
    loss = torch.nn.CrossEntropyLoss()
    batches = [(torch.tensor(data["x"][k:k + size], device=device),
                torch.tensor(data["y"][k:k + size], device=device))
               for k in range(0, IMAGES, size)]

    def epoch() -> Any:
        for x, y in batches:
            optimizer.zero_grad(set_to_none=True)
            loss(module(x), y).backward()
            optimizer.step()
        return module

    return epoch
