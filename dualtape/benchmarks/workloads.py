"""The workloads of ``dualtape bench``: what each row times, on the same data for every runner.

The workloads are Grenade's criterion suite ``bench-lstm``:

- ``lstm``: forwards-60, forwards-512, backwards-60, backwards-512: one step of ``LSTM(40, n)``
  at batch 1 (backwards from a tape made before timing starts);
- ``update``: matrix-60x60, matrix-512x512: one SGD step with momentum on one parameter;
- ``train``: one-, ten- and fifty-time-steps of ``train_recurrent`` on
  ``[LSTM(40, 512), LSTM(512, 40)]``, ``SGD(rate=0.1)``, target = input, batch 1, and fifty time
  steps at batch 32 and 256, and fifty steps with the weights 30 times Grenade's, so that most
  gates saturate (σ of pre-activations in the hundreds: the subnormal numbers ``kernels.flush``
  keeps out of the fast paths; Grenade's own initialisation already saturates a few);
- ``text``: the main job, one ``TextTrainer.step`` of train-text's default model with Adam
  (``char_model.py``); its rows also report characters per second;
- ``cells``: the standard LSTM and the GRU at the main job's sizes, one sequence forwards and
  back through one layer (``cells.py``), against the torch module;
- ``conv``: one ``Convolution`` layer forwards and back (``convolution.py``), against
  ``torch.nn.Conv2d``, and one training epoch of the digits example's convolutional network
  (``digits.py``), against the same network in ``torch.nn``;
- ``memory`` (run only when named): one ``train_recurrent`` call of the train group's network
  at batch 1 over 1,000, 10,000 and 100,000 steps with the full and the checkpointed
  (``tape="sqrt"``) tape; its rows also report the call's peak memory and whether the
  weights after it equal the full tape's (``memory.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ..backend import use_backend
from ..layers.lstm import LSTM
from . import cells, char_model, convolution, digits

N_IN = 40
DTYPES = ("float32", "float64")
SPEED_BACKENDS_EXCLUDED = ("array_api_strict",)
SEED = 20240601
TAPES = ("full", "sqrt")
STEPS = (1_000, 10_000, 100_000)
"""The memory group's tape policies and sequence lengths."""
QUICK_STEPS = 1_000
"""``--quick`` keeps the memory rows of this many steps or fewer."""


@dataclass(frozen=True)
class Workload:
    """One timed operation: ``op`` is forwards, backwards, sgd, train, text, cell, conv, digits
    or memory; ``size`` is the LSTM width (lstm group, the hidden layer in train, each of the
    ``layers`` LSTMs in text, the ``cell`` layer's units), the matrix side (update group) or
    the output channels (conv); ``n_in`` the width of the input and, in train, of the output
    (in text, the vocabulary; in conv, the input channels); ``steps`` the time steps (in text,
    the window length); ``cell`` the layer kind of the cells group; ``tape`` the tape policy
    of the memory group; ``gain`` the factor on the LSTMs' initial weights (train group)."""

    group: str
    name: str
    op: str
    size: int = 512
    batch: int = 1
    steps: int = 1
    n_in: int = N_IN
    layers: int = 1
    cell: str = ""
    tape: str = ""
    gain: float = 1.0

    @property
    def chars_per_call(self) -> int | None:
        """Characters a call trains on (``steps · batch``) for the text group, else None."""
        return self.steps * self.batch if self.op == "text" else None

    @property
    def key(self) -> str:
        """``group/name``, e.g. ``train/fifty-time-steps``."""
        return f"{self.group}/{self.name}"

    def time_loop(self) -> tuple[list[int], int]:
        """The widths of the LSTMs whose time loop the row runs, and the recurrent weights'
        rows per unit of its cell (``text.threads.RECURRENT_GATES``): what train-text's thread
        rule reads. No recurrent layer (update, conv): ``([], 3)``."""
        from ..text.threads import RECURRENT_GATES

        if self.op in ("forwards", "backwards"):
            return [self.size], 3
        if self.op in ("train", "memory"):
            return [self.size, self.n_in], 3
        if self.op == "text":
            return [self.size] * self.layers, 3
        if self.op == "cell":
            return [self.size], RECURRENT_GATES[self.cell]
        return [], 3

    def smoke(self) -> Workload:
        """The same code path, cheap enough for a test run: batched variants and the memory
        rows (up to 100,000 steps) run 2 steps."""
        short = self.batch > 1 or self.op == "memory"
        return replace(self, steps=min(self.steps, 2)) if short else self

    def host_data(self, dtype: str) -> dict[str, Any]:
        """The workload's inputs as numpy arrays, the same for every runner.

        ``params`` is a list of LSTM parameter dicts (dualtape's layout); batch-1 inputs keep
        their batch axis: ``x`` (1, 40), ``c``/``dc``/``dh`` (1, n), ``xs`` (T, batch, 40).
        The text group's data is ``char_model.host_data``'s (corpus ids and the network's
        parameters).
        """
        rng = np.random.default_rng(SEED)

        def uniform(*shape: int) -> np.ndarray:
            return rng.uniform(-1.0, 1.0, size=shape).astype(dtype)

        n, n_in = self.size, self.n_in
        if self.op == "text":
            return char_model.host_data(self, dtype, SEED)
        if self.op == "cell":
            return cells.host_data(self, dtype, SEED)
        if self.op == "conv":
            return convolution.host_data(self, dtype, SEED)
        if self.op == "digits":
            return digits.host_data(self, dtype, SEED)
        if self.op == "memory":
            return replace(self, op="train").host_data(dtype)
        if self.op == "sgd":
            return {"w": uniform(n, n), "g": uniform(n, n)}
        if self.op in ("forwards", "backwards"):
            return {
                "params": [lstm_host_params(n_in, n, 1, dtype)],
                "x": uniform(1, n_in), "c": uniform(1, n), "dc": uniform(1, n), "dh": uniform(1, n),
            }
        return {
            "params": [lstm_host_params(n_in, n, 1, dtype, self.gain),
                       lstm_host_params(n, n_in, 2, dtype, self.gain)],
            "xs": uniform(self.steps, self.batch, n_in),
        }


WORKLOADS: tuple[Workload, ...] = (
    Workload("lstm", "forwards-60", "forwards", 60),
    Workload("lstm", "forwards-512", "forwards", 512),
    Workload("lstm", "backwards-60", "backwards", 60),
    Workload("lstm", "backwards-512", "backwards", 512),
    Workload("update", "matrix-60x60", "sgd", 60),
    Workload("update", "matrix-512x512", "sgd", 512),
    Workload("train", "one-time-step", "train", 512, 1, 1),
    Workload("train", "ten-time-steps", "train", 512, 1, 10),
    Workload("train", "fifty-time-steps", "train", 512, 1, 50),
    Workload("train", "fifty-time-steps-saturated-gates", "train", 512, 1, 50, gain=30.0),
    Workload("train", "fifty-time-steps-batch-32", "train", 512, 32, 50),
    Workload("train", "fifty-time-steps-batch-64", "train", 512, 64, 50),
    Workload("train", "tiny-4-8-4-fifty-time-steps", "train", 8, 1, 50, n_in=4),
    Workload("train", "fifty-time-steps-batch-256", "train", 512, 256, 50),
    Workload("text", "char-model-80x80-batch-32", "text", 80, 32, 50, n_in=57, layers=2),
    Workload("cells", "standard-lstm-80x80-batch-32", "cell", 80, 32, 50, n_in=80,
             cell="StandardLSTM"),
    Workload("cells", "gru-80x80-batch-32", "cell", 80, 32, 50, n_in=80, cell="GRU"),
    Workload("conv", "convolution-8to16-3x3-28x28-batch-32", "conv", 16, 32, n_in=8),
    Workload("conv", "digits-epoch-1347-images-batch-32", "digits", 16, 32, n_in=1),
    *(Workload("memory", f"{tape}-tape-{steps}-steps", "memory", 512, 1, steps, tape=tape)
      for steps in STEPS for tape in TAPES),
)
ON_REQUEST = ("memory",)
"""Groups that run only when ``--workloads`` names them (minutes, and GBs of memory)."""
TRAIN_RATE = 0.1
UPDATE_RATE, UPDATE_MOMENTUM = 0.1, 0.9


def lstm_host_params(n_in: int, n_out: int, seed: int, dtype: str, gain: float = 1.0
                     ) -> dict[str, np.ndarray]:
    """Grenade-initialised LSTM parameters on the host, drawn as ``LSTM(..., seed=seed)``,
    times ``gain``."""
    with use_backend("numpy"):
        params = LSTM(n_in, n_out, seed=seed, dtype=dtype).params
    return {k: (v * gain).astype(dtype) if gain != 1 else v for k, v in params.items()}


def select_workloads(names: Sequence[str] | None = None, quick: bool = False) -> list[Workload]:
    """Workloads whose group, name or key is in ``names`` (when empty, all but the groups of
    ``ON_REQUEST``); ``quick`` drops the variants above batch 32 and the memory rows above
    ``QUICK_STEPS`` steps."""
    chosen = [w for w in WORKLOADS if {w.group, w.name, w.key} & set(names or ())
              or not names and w.group not in ON_REQUEST]
    unknown = set(names or ()) - {s for w in WORKLOADS for s in (w.group, w.name, w.key)}
    if unknown:
        raise ValueError(f"unknown workloads {sorted(unknown)}; known: "
                         f"{', '.join(w.key for w in WORKLOADS)} or a group")
    return [w for w in chosen if not (quick and (w.batch > 32 or w.op == "memory"
                                                 and w.steps > QUICK_STEPS))]
