"""A training run's configuration (``TrainConfig``, stored in checkpoints), the rules each of
its fields must follow, and the optimizer it names."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..backend import FLOAT_DTYPES
from ..optim import SGD, Adam, Optimizer
from .cells import CELL_NAMES, cell_name
from .model import TextError
from .schedule_option import GRAMMAR, is_schedule, parse_schedule

DEFAULT_RATES = {"sgd": 0.5, "adam": 0.01}
OPTIMIZERS = tuple(DEFAULT_RATES)


@dataclass
class TrainConfig:
    """Everything that defines a training run (stored in checkpoints)."""

    hidden: list[int] = field(default_factory=lambda: [80, 80])
    cell: str = "LSTM"
    dropout: float = 0.0
    vocab: int = 100
    annotate_capitals: bool = False
    seq_len: int = 50
    batch: int = 32
    optimizer: str = "sgd"
    rate: float = DEFAULT_RATES["sgd"]
    schedule: str = "constant"
    momentum: float = 0.95
    l2: float = 1e-6
    clip: float = 1.0
    dtype: str = "float32"
    seed: int = 0
    stateful: bool = False
    valid: float = 0.0
    corpus: str | None = None
    encoding: str = "utf-8"
    corpus_sha256: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.cell, str):  # a former name (older checkpoints): the class name
            self.cell = cell_name(self.cell)


def _is_int(x: Any) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def _is_real(x: Any) -> bool:
    return (_is_int(x) or isinstance(x, (float, np.floating))) and math.isfinite(x)


POSITIVE_INT = ("a positive integer", lambda x: _is_int(x) and x > 0)
CONFIG_RULES: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "hidden": ("a list of positive layer sizes",
               lambda h: isinstance(h, list) and bool(h) and all(POSITIVE_INT[1](n) for n in h)),
    "cell": (f"one of {', '.join(CELL_NAMES)}", lambda c: isinstance(c, str) and c in CELL_NAMES),
    "dropout": ("a number in [0, 1)", lambda p: _is_real(p) and 0 <= p < 1),
    "vocab": POSITIVE_INT,
    "annotate_capitals": ("true or false", lambda b: isinstance(b, bool)),
    "seq_len": POSITIVE_INT,
    "batch": POSITIVE_INT,
    "optimizer": (f"one of {', '.join(OPTIMIZERS)}", lambda o: o in OPTIMIZERS),
    "rate": ("a positive finite number", lambda r: _is_real(r) and r > 0),
    "schedule": (GRAMMAR, is_schedule),
    "momentum": ("in [0, 1)", lambda m: _is_real(m) and 0 <= m < 1),
    "l2": ("a finite number, 0 or more", lambda x: _is_real(x) and x >= 0),
    "clip": ("a finite number, 0 (off) or more", lambda x: _is_real(x) and x >= 0),
    "dtype": (" or ".join(FLOAT_DTYPES), lambda d: d in FLOAT_DTYPES),
    "seed": ("an integer from 0 to 2**63 - 1", lambda x: _is_int(x) and 0 <= x < 2**63),
    "stateful": ("true or false", lambda b: isinstance(b, bool)),
    "valid": ("a fraction in [0, 0.5]", lambda f: _is_real(f) and 0 <= f <= 0.5),
    "corpus": ("a file path or null", lambda c: c is None or isinstance(c, str)),
    "encoding": ("the name of a text encoding", lambda e: isinstance(e, str)),
    "corpus_sha256": ("a SHA-256 hex digest or null", lambda h: h is None or (
        isinstance(h, str) and len(h) == 64 and all(c in "0123456789abcdef" for c in h))),
}
"""What each ``TrainConfig`` field must be: ``(requirement, test)``. The command line and
``load_checkpoint`` both check a run's configuration against these rules."""


def config_problem(config: TrainConfig) -> tuple[str, str, Any] | None:
    """The first field of ``config`` that breaks ``CONFIG_RULES``, as ``(field, requirement,
    value)``; None when every field is valid."""
    for name, (need, ok) in CONFIG_RULES.items():
        value = getattr(config, name)
        if not ok(value):
            return name, need, value
    return None


def make_optimizer(config: TrainConfig) -> Optimizer:
    """SGD with momentum and L2 (Grenade's rule) or Adam, under ``config``'s schedule."""
    try:
        schedule = parse_schedule(config.schedule)
        if config.optimizer == "sgd":
            return SGD(config.rate, config.momentum, config.l2, schedule=schedule)
        if config.optimizer == "adam":
            return Adam(config.rate, schedule=schedule)
    except ValueError as exc:
        raise TextError(str(exc).replace("regulariser", "l2")) from None
    raise TextError(f"unknown optimizer {config.optimizer!r}; choose one of {OPTIMIZERS}")
