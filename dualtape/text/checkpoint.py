"""A train-text checkpoint read back: from a regular file only, every field of its training
state checked against the network and its configuration (``load_checkpoint``), and the trainer
it resumes (``Checkpoint.trainer``). What a checkpoint holds is what ``TextTrainer.save``
writes, under the names ``trainer.py`` gives (``TEXT_FORMAT``, ``GENERATORS``, ``DROPOUT``,
``STREAM_STATE``)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..backend import Backend, resolve_backend, to_numpy
from ..io import load_with_extra
from .config import TrainConfig, _is_int, _is_real, config_problem, make_optimizer
from .memory import check_memory
from .model import TextError, Vocabulary, check_text_network, dropout_layers
from .schedule_option import parse_schedule
from .trainer import DROPOUT, GENERATORS, STREAM_STATE, TEXT_FORMAT, TextTrainer, _generator

OPTIONAL_FIELDS = ("corpus_sha256", "cell", "dropout", "stateful", "valid", "schedule")
"""Fields a checkpoint's configuration may lack (format 1 before the fingerprint, the cell,
dropout, stateful windows, the held-out split and the schedule were added: those are
Grenade's LSTM without dropout, on random windows over the whole corpus, at a constant rate);
any other missing field is damage."""


@dataclass
class Checkpoint:
    """What ``load_checkpoint`` read: the network (on the asked backend) and its training
    state."""

    net: Any
    vocab: Vocabulary
    config: TrainConfig
    step: int
    optimizer_state: dict[str, np.ndarray]
    rngs: dict[str, Any]
    streams: tuple[dict[str, int], list[np.ndarray]] | None = None
    """A stateful run's position and carried states (``TextTrainer.stream_extra``)."""
    held_out: dict[str, list] | None = None
    """The held-out losses seen (``TextTrainer.held_out``)."""

    def trainer(self, ids: np.ndarray, config: TrainConfig | None = None,
                reseed: bool = False) -> TextTrainer:
        """A trainer continuing from here (``config`` may change rates, windows, seed). The
        optimizer state must fit the network, cover every parameter or none, and have taken
        as many steps as the checkpoint records; else ``TextError``."""
        config = config or self.config
        check_memory(config, len(self.vocab), self.net.backend)
        optimizer = make_optimizer(config)
        try:
            optimizer.load_state_dict(self.optimizer_state, self.net.params)
        except ValueError as exc:
            raise TextError(f"the checkpoint's optimizer state does not fit: {exc}") from None
        optimizer.schedule = parse_schedule(config.schedule)  # --schedule may change on resume
        count = sum(len(group) for group in self.net.params)
        if optimizer.state and len(optimizer.state) != count:
            raise TextError(f"the checkpoint's optimizer state covers {len(optimizer.state)} of "
                            f"the {count} parameters; the file was edited or damaged")
        if optimizer.steps != self.step:
            raise TextError(f"the checkpoint's optimizer has taken {optimizer.steps} steps but "
                            f"the checkpoint is at step {self.step}; the file was edited or "
                            "damaged")
        return TextTrainer(self.net, self.vocab, config, optimizer, ids, step=self.step,
                           rngs=None if reseed else self.rngs, streams=self.streams,
                           held_out=self.held_out)


def load_checkpoint(path: str | Path, backend: str | Backend = "numpy") -> Checkpoint:
    """A train-text checkpoint read onto ``backend``; any problem raises ``TextError``."""
    where = backend if isinstance(backend, Backend) else resolve_backend(backend)
    try:
        net, extra = load_with_extra(path, backend=where.name, device=where.device)
    except OSError as exc:
        raise TextError(f"cannot read checkpoint {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise TextError(str(exc)) from None
    except MemoryError:
        raise TextError(f"{path}: the network it describes does not fit in memory") from None
    version = extra.get("text_format")
    if version is None:
        raise TextError(f"{path} holds a dualtape network but is not a train-text checkpoint "
                        "(it has no vocabulary)")
    if not _is_int(version) or version < 1:
        raise TextError(f"{path}: the checkpoint's text_format must be a format number from 1, "
                        f"got {version!r}; the file was edited or damaged")
    if version > TEXT_FORMAT:
        raise TextError(f"{path} is a train-text checkpoint of format {version!r}, newer than "
                        f"this dualtape reads ({TEXT_FORMAT}); upgrade dualtape")
    try:
        vocab, config, step, rngs = _training_state(extra)
        streams, held_out = _stream_state(extra), _held_out(extra)
    except (KeyError, TypeError, ValueError, OverflowError) as exc:
        raise TextError(f"{path}: the checkpoint's training state is damaged ({exc})") from None
    problem = config_problem(config)
    if problem is None and not (_is_int(step) and step >= 0):
        problem = "step", "an integer, 0 or more", step
    if problem is not None:
        name, need, value = problem
        raise TextError(f"{path}: the checkpoint's {name} must be {need}, got {value!r}; "
                        "the file was edited or damaged")
    if not all(np.all(np.isfinite(to_numpy(p))) for group in net.params for p in group.values()):
        raise TextError(f"{path}: the network's weights hold NaN or infinity; the checkpoint "
                        "was saved from a diverged run or damaged, and cannot be used")
    try:
        layout = check_text_network(net, len(vocab))
    except TextError as exc:
        raise TextError(f"{path}: {exc}") from None
    state = {k[len("optimizer/"):]: v for k, v in extra.items() if k.startswith("optimizer/")}
    mismatch = _mismatch(config, net, vocab, layout, state)
    if mismatch is None and len(rngs.get(DROPOUT, [])) != len(dropout_layers(net)):
        mismatch = (f"its rng holds {len(rngs.get(DROPOUT, []))} dropout generator states but "
                    f"the network has {len(dropout_layers(net))} Dropout layers")
    if mismatch is not None:
        raise TextError(f"{path}: {mismatch}; the file was edited or damaged")
    return Checkpoint(net, vocab, config, int(step), state, rngs, streams, held_out)


def _held_out(extra: dict[str, Any]) -> dict[str, list] | None:
    """The held-out losses a checkpoint recorded; ``ValueError`` when malformed."""
    record = extra.get("held_out")
    if record is None:
        return None
    if not isinstance(record, dict) or not set(record) <= {"last", "best"} or not all(
            isinstance(v, list) and len(v) == 2 and _is_int(v[0]) and v[0] >= 0
            and _is_real(v[1]) and v[1] >= 0 for v in record.values()):
        raise ValueError(f"held_out is {record!r}, not [step, loss] pairs last and best")
    return record


def _stream_state(extra: dict[str, Any]) -> tuple[dict[str, int], list[np.ndarray]] | None:
    """A stateful run's stored position and carried states, None when it stored none;
    ``TypeError`` or ``ValueError`` naming what is malformed."""
    where = extra.get("streams")
    count = sum(name.startswith(STREAM_STATE) for name in extra)
    names = [f"{STREAM_STATE}{k}" for k in range(count)]
    if not all(name in extra for name in names):
        raise ValueError(f"its carried states are not numbered {STREAM_STATE}0 on")
    states = [np.asarray(extra[name]) for name in names]
    if where is None:
        if states:
            raise ValueError("it holds carried states but no stream position")
        return None
    fields = {"epoch": 0, "window": 0, "count": 1, "seq_len": 1}
    if not isinstance(where, dict) or sorted(where) != sorted(fields) or not all(
            _is_int(where[name]) and where[name] >= least for name, least in fields.items()):
        raise ValueError(f"streams is {where!r}, not whole numbers epoch, window >= 0 and "
                         "count, seq_len >= 1")
    return {name: int(where[name]) for name in fields}, states


def _training_state(extra: dict[str, Any]) -> tuple[Vocabulary, TrainConfig, Any, dict]:
    """The vocabulary, configuration, step and generator states a checkpoint's ``extra``
    holds; ``KeyError``, ``TypeError``, ``ValueError`` or ``OverflowError`` naming what is
    missing or malformed."""
    vocab = Vocabulary.from_json(extra.get("vocabulary"))
    stored = extra["config"]
    if not isinstance(stored, dict):
        raise TypeError(f"config is a {type(stored).__name__}, not a mapping")
    missing = [f.name for f in dataclasses.fields(TrainConfig)
               if f.name not in stored and f.name not in OPTIONAL_FIELDS]
    if missing:
        raise KeyError(f"config lacks {', '.join(missing)}")
    config = TrainConfig(**stored)
    rngs = extra["rng"]
    if not isinstance(rngs, dict) or sorted(set(rngs) - {DROPOUT}) != sorted(GENERATORS):
        raise ValueError(f"rng holds {sorted(rngs) if isinstance(rngs, dict) else rngs!r}, "
                         f"not the states of {' and '.join(GENERATORS)}")
    dropout = rngs.get(DROPOUT, [])
    if not isinstance(dropout, list):
        raise TypeError(f"rng's {DROPOUT} is a {type(dropout).__name__}, not a list of states")
    for state in [rngs[name] for name in GENERATORS] + dropout:
        _generator(state)
    return vocab, config, extra["step"], dict(rngs)


def _mismatch(config: TrainConfig, net: Any, vocab: Vocabulary, layout: Any,
              state: dict[str, np.ndarray]) -> str | None:
    """How a checkpoint's configuration contradicts its network (``layout``:
    ``check_text_network``'s), vocabulary or optimizer state; None when they agree."""
    if layout.hidden != list(config.hidden):
        return (f"the network's hidden sizes {layout.hidden} differ from its recorded "
                f"configuration {config.hidden}")
    if layout.cell != config.cell:
        return (f"the network's cell {layout.cell} differs from its recorded configuration's "
                f"{config.cell}")
    if layout.dropout != config.dropout:
        return (f"the network's dropout {layout.dropout:g} differs from its recorded "
                f"configuration's {config.dropout:g}")
    if net.dtype != config.dtype:
        return f"the network is {net.dtype} but its configuration says {config.dtype}"
    if vocab.annotate_capitals != config.annotate_capitals:
        return (f"the vocabulary's capital annotation ({vocab.annotate_capitals}) differs from "
                f"its configuration's ({config.annotate_capitals})")
    if vocab.characters > config.vocab:
        return (f"the vocabulary keeps {vocab.characters} characters, more than its "
                f"configuration's --vocab {config.vocab}")
    if not all(np.isfinite(v).all() for v in state.values() if np.asarray(v).dtype.kind == "f"):
        return "the optimizer state holds NaN or infinity"
    return None
