"""A train-text run rehearsed in a child process, so that numba compiles what the run calls
into its disk cache while the run's first steps go on the ufunc loops
(``kernels.compile_ahead``; issue 53 item 5).

``command(trainer, threads, overlap)`` is the child's command line: ``python -m
dualtape.text.rehearse SPEC``, SPEC a JSON description of the run (its config, vocabulary,
the sizes of its training and held-out text, its threads). The child warms the cell's loops
up as train-text does before its first step (``warm_up``), builds the same network and
optimizer on random symbols, takes two steps (the optimizer keeps its plan from the second),
reads the loss, the held-out loss and the spread loss and draws a short sample, all on the
compiled loops, so numba compiles each function for the argument types the run will pass;
then it marks the cell's loops compiled (``compile_ahead.mark``). A failure is one line on
stderr and a non-zero status; nothing is written but numba's cache and that mark.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from typing import Any

import numpy as np

from ..backend import resolve_backend, use_backend
from ..kernels import compile_ahead
from .config import TrainConfig, make_optimizer
from .model import Vocabulary, build_text_network
from .threads import limited_threads
from .trainer import HELD_OUT_CHARS, TextTrainer

CELL_MODULES = {"LSTM": "_numba_lstm", "StandardLSTM": "_numba_standard_lstm_gru",
                "GRU": "_numba_standard_lstm_gru"}
"""The compiled module of each cell's loops, whose mark says the run's loops are cached."""
STEPS = 2
"""Steps rehearsed: the optimizer makes its kept plan at the second (``held_update``); one
step leaves four functions for the run to compile (``tests/test_compile_ahead.py``)."""


def warm_up(cell: str, dtype: str) -> float:
    """Compile (or load from numba's disk cache) ``cell``'s loops for ``dtype`` (its
    module's ``warm_up``): train-text's before its first step, and the child's; the seconds."""
    from ..kernels import numba_lstm, numba_standard_lstm_gru

    loops = numba_lstm if CELL_MODULES[cell] == "_numba_lstm" else numba_standard_lstm_gru
    return loops.warm_up(dtype)


def command(trainer: TextTrainer, threads: int | None, overlap: bool) -> list[str]:
    """The child's command line rehearsing ``trainer``'s run with that many BLAS threads
    (None: the libraries' own) and ``overlap`` (``limited_threads``)."""
    cfg = trainer.config
    training = min(len(trainer.ids), 4 * (cfg.seq_len + 1) * cfg.batch + cfg.seq_len)
    held = 0 if trainer.held_ids is None else min(len(trainer.held_ids), HELD_OUT_CHARS + 1)
    spec = {"config": dataclasses.asdict(cfg), "vocab": trainer.vocab.to_json(),
            "training": training, "held": held, "threads": threads, "overlap": overlap}
    return [sys.executable, "-m", __name__, json.dumps(spec)]


def rehearse(spec: dict[str, Any]) -> None:
    """Run what ``command`` described, on the compiled loops (see the module's docstring)."""
    config = dataclasses.replace(TrainConfig(**spec["config"]), rate=1e-6, valid=0.0, seed=0)
    warm_up(config.cell, config.dtype)
    vocab = Vocabulary.from_json(spec["vocab"])
    rng = np.random.default_rng(0)
    backend = resolve_backend("numpy")
    with use_backend(backend.name, backend.device):
        net = build_text_network(len(vocab), config.hidden, seed=0, dtype=config.dtype,
                                 cell=config.cell, dropout=config.dropout)
    trainer = TextTrainer(net, vocab, config, make_optimizer(config),
                          rng.integers(0, len(vocab), spec["training"]))
    trainer.held_ids = rng.integers(0, len(vocab), spec["held"]) if spec["held"] else None
    with limited_threads(spec["threads"], spec["overlap"]), np.errstate(all="ignore"):
        for _ in range(STEPS):
            trainer.step()
        trainer.read_loss()
        trainer.held_out_loss()
        trainer.spread_loss()
        trainer.sample(4, 0.8)
    compile_ahead.mark(CELL_MODULES[config.cell], config.dtype)


def main(argv: list[str]) -> int:
    """``python -m dualtape.text.rehearse SPEC``: 0 when rehearsed, else 1 with one line."""
    try:
        rehearse(json.loads(argv[0]))
    except Exception as exc:  # noqa: BLE001 - the parent reads this line and goes on
        print(f"rehearsal failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
