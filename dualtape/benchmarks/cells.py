"""The new cells at the main job's sizes: one sequence forwards and back through one layer.

``cells/standard-lstm-80x80-batch-32`` and ``cells/gru-80x80-batch-32``: a ``StandardLSTM``
or ``GRU`` of 80 inputs and 80 units over 50 steps at batch 32 from a zero state, forwards
then back from a fixed output gradient, computing every parameter's gradient and the inputs'.
The reference row is the torch module with the same weights (``torch.nn.LSTM``,
``torch.nn.GRU``): ``module(xs)``, then ``ys.backward(dys)`` with the gradients cleared first,
as a training loop would.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..backend import Backend, from_host, use_backend
from ..layers import GRU, StandardLSTM

KINDS = {"StandardLSTM": StandardLSTM, "GRU": GRU}
TORCH_MODULES = {"StandardLSTM": "LSTM", "GRU": "GRU"}


def host_data(workload: Any, dtype: str, seed: int) -> dict[str, Any]:
    """The layer's seeded parameters (``params``: a list of one dict), inputs ``xs`` (T, B,
    n_in) and output gradient ``dys`` (T, B, size), host arrays in ``dtype``."""
    rng = np.random.default_rng(seed)
    with use_backend("numpy"):
        layer = KINDS[workload.cell](workload.n_in, workload.size, seed=seed, dtype=dtype)
    shape = (workload.steps, workload.batch)
    return {"params": [dict(layer.params)],
            "xs": rng.uniform(-1, 1, (*shape, workload.n_in)).astype(dtype),
            "dys": rng.uniform(-1, 1, (*shape, workload.size)).astype(dtype)}


def prepare(backend: Backend, data: dict[str, Any], cell: str) -> Callable[[], Any]:
    """dualtape: ``forward_sequence`` then ``backward_sequence`` of the layer, per call;
    returns the gradients and the inputs' gradient."""
    params = data["params"][0]
    n_in = params["W_ih"].shape[1]
    kind = KINDS[cell]
    layer = kind(n_in, params["W_hh"].shape[1], dtype=str(params["W_ih"].dtype))
    layer.params = {k: from_host(np.array(v), backend) for k, v in params.items()}
    xs, dys = from_host(data["xs"], backend), from_host(data["dys"], backend)

    def run() -> Any:
        tape, _, _ = layer.forward_sequence(None, xs)
        grads, _, dxs = layer.backward_sequence(tape, None, dys)
        return grads, dxs

    return run


def torch_step(data: dict[str, Any], cell: str, device: str = "cpu") -> Callable[[], Any]:
    """The torch module's forwards and back on the same weights and data, per call."""
    import torch

    params = data["params"][0]
    n_in = params["W_ih"].shape[1]
    module = getattr(torch.nn, TORCH_MODULES[cell])(n_in, params["W_hh"].shape[1])
    names = {"W_ih": "weight_ih_l0", "W_hh": "weight_hh_l0", "b_ih": "bias_ih_l0",
             "b_hh": "bias_hh_l0"}
    dtype = getattr(torch, str(params["W_ih"].dtype))
    module = module.to(device=device, dtype=dtype)
    module.load_state_dict({names[k]: torch.from_numpy(np.array(v)) for k, v in params.items()})
    xs = torch.tensor(data["xs"], device=device, requires_grad=True)
    dys = torch.tensor(data["dys"], device=device)

    def run() -> Any:
        module.zero_grad(set_to_none=True)
        xs.grad = None
        ys, _ = module(xs)
        ys.backward(dys)
        return [p.grad for p in module.parameters()], xs.grad

    return run
