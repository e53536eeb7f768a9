"""The memory a training step needs, estimated from above from its configuration, and the
check that the backend has that much free before a run begins."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..backend import Backend, free_memory
from .config import TrainConfig
from .model import TextError

OPTIMIZER_SLOTS = {"sgd": 1, "adam": 2}
"""Arrays of optimizer state per parameter (momentum; Adam's two moments)."""
CELL_PARAMS: dict[str, Callable[[int, int], int]] = {
    "LSTM": lambda i, o: 4 * o * i + 3 * o * o + 4 * o,  # W, U (no candidate), b
    "StandardLSTM": lambda i, o: 4 * o * (i + o + 2),  # W_ih, W_hh, b_ih, b_hh
    "GRU": lambda i, o: 3 * o * (i + o + 2),
}
"""Parameters of one recurrent layer of each cell, from its inputs and outputs."""


def estimate_memory(config: TrainConfig, vocab_size: int) -> int:
    """Bytes a training step needs at its peak, from above: parameters with their gradients,
    clipped gradients, update temporaries and optimizer state, plus the step's one-hot windows
    and, per layer, the sequence tape and its backward buffers (``seq_len · batch`` rows).
    On numpy it is 1.4-2.5 times the traced peak of two steps (``tests/test_text_safety.py``:
    arrays of one shape are reused from step to step, ``dualtape.spare``)."""
    itemsize = np.dtype(config.dtype).itemsize
    rows = config.seq_len * config.batch
    params = activations = 0
    n_in = vocab_size
    for k, n_out in enumerate(config.hidden):
        params += CELL_PARAMS.get(config.cell, CELL_PARAMS["StandardLSTM"])(n_in, n_out)
        activations += rows * (16 * n_out + n_in)  # gates, cells, projections, their grads
        if k and config.dropout:  # the mask and output, the host's draw (float64) and grads
            activations += rows * n_in * (3 + 24 // itemsize)
        n_in = n_out
    params += vocab_size * (n_in + 1)
    activations += rows * 4 * vocab_size  # logits, softmax, its gradient, targets
    activations += (rows + config.batch) * (vocab_size * (itemsize + 1) + 8)  # one-hot, ids
    copies = 4 + OPTIMIZER_SLOTS.get(config.optimizer, 2)
    return (copies * params + activations) * itemsize


def check_memory(config: TrainConfig, vocab_size: int, backend: Backend) -> None:
    """``TextError`` when ``estimate_memory`` is more than ``backend`` has free."""
    need, free = estimate_memory(config, vocab_size), free_memory(backend)
    if free is not None and need > free:
        raise TextError(
            f"training --hidden {','.join(map(str, config.hidden))} with windows of "
            f"{config.seq_len} x batch {config.batch} needs about {need / 2**30:,.1f} GiB but "
            f"{backend.name} has {free / 2**30:,.1f} GiB free; use a smaller --hidden, "
            "--batch or --seq-len"
        )
