"""The conv group: one convolution layer forwards and back, against ``torch.nn.Conv2d``.

``conv/convolution-8to16-3x3-28x28-batch-32``: a ``Convolution(8, 16, (3, 3))`` over a batch
of 32 images of 8 channels, 28x28, forwards then back from a fixed output gradient, computing
both parameters' gradients and the input's. The reference row is ``torch.nn.Conv2d`` with the
same weights: ``module(x)``, then ``y.backward(dy)`` with the gradients cleared first, as a
training loop would. Run it on one thread, as the issue asks: ``dualtape bench --workloads conv
--threads 1``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..backend import Backend, from_host, use_backend
from ..layers import Convolution

KERNEL, IMAGE = (3, 3), (28, 28)


def host_data(workload: Any, dtype: str, seed: int) -> dict[str, Any]:
    """The layer's seeded parameters (``params``: a list of one dict), the images ``x``
    (batch, n_in, 28, 28) and the output gradient ``dy``, host arrays in ``dtype``."""
    rng = np.random.default_rng(seed)
    with use_backend("numpy"):
        layer = Convolution(workload.n_in, workload.size, KERNEL, seed=seed, dtype=dtype)
    x = rng.uniform(-1, 1, (workload.batch, workload.n_in, *IMAGE)).astype(dtype)
    rows, cols = (IMAGE[0] - KERNEL[0] + 1, IMAGE[1] - KERNEL[1] + 1)
    dy = rng.uniform(-1, 1, (workload.batch, workload.size, rows, cols)).astype(dtype)
    return {"params": [dict(layer.params)], "x": x, "dy": dy}


def prepare(backend: Backend, data: dict[str, Any]) -> Callable[[], Any]:
    """dualtape: ``forward`` then ``backward`` of the layer, per call; returns the gradients
    and the input's gradient."""
    W = data["params"][0]["W"]
    layer = Convolution(W.shape[1], W.shape[0], W.shape[2:], dtype=str(W.dtype))
    layer.params = {k: from_host(np.array(v), backend) for k, v in data["params"][0].items()}
    x, dy = from_host(data["x"], backend), from_host(data["dy"], backend)

    def run() -> Any:
        tape, _ = layer.forward(x)
        return layer.backward(tape, dy)

    return run


def torch_step(data: dict[str, Any], device: str = "cpu") -> Callable[[], Any]:
    """``torch.nn.Conv2d``'s forwards and back on the same weights and data, per call;
    returns the gradients of ``weight`` and ``bias`` and the input's."""
    import torch

    params = data["params"][0]
    out_channels, in_channels, *kernel = params["W"].shape
    module = torch.nn.Conv2d(in_channels, out_channels, tuple(kernel))
    module = module.to(device=device, dtype=getattr(torch, str(params["W"].dtype)))
    bias = module.bias
    assert bias is not None  # Conv2d's default bias=True
    module.load_state_dict({"weight": torch.from_numpy(np.array(params["W"])),
                            "bias": torch.from_numpy(np.array(params["b"]))})
    x = torch.tensor(data["x"], device=device, requires_grad=True)
    dy = torch.tensor(data["dy"], device=device)

    def run() -> Any:
        module.zero_grad(set_to_none=True)
        x.grad = None
        module(x).backward(dy)
        return {"W": module.weight.grad, "b": bias.grad}, x.grad

    return run
