"""train-text's run assembly: the options checked, the trainer built or resumed, the corpus
read and its checkpoint destination checked, for ``cli.py`` and ``distributed.py`` alike.

Only the standard library and ``threads`` are imported here; the model code is imported when
a run is prepared. A bad option or file is a one-line ``TextError``.
"""

from __future__ import annotations

import argparse
import math
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from . import threads

ARCHITECTURE = ("hidden", "cell", "dropout", "vocab", "annotate_capitals", "dtype", "optimizer",
                "valid")
"""Options a checkpoint fixes (the held-out split too: moved, it would hold out trained text)."""
DEFAULT_VALID = 0.1
"""``--valid`` of a new run: the corpus's last tenth held out."""
TUNABLE = ("seq_len", "batch", "stateful", "rate", "schedule", "momentum", "l2", "clip",
           "encoding")
MAX_SAMPLE_CHARS = 100_000
"""The longest sample train-text draws while training (sampling does not stop for Ctrl-C;
``dualtape sample`` writes longer texts as they come)."""


def check_options(args: argparse.Namespace, rules: dict[str, tuple[str, Callable]]) -> None:
    """``TextError`` naming the flag for the first option given (not None) that fails its rule
    (``name: (what it must be, predicate)``)."""
    from .model import TextError

    for name, (need, ok) in rules.items():
        value = getattr(args, name)
        if value is not None and not ok(value):
            flag = "--" + name.replace("_", "-")
            raise TextError(f"{flag} must be {need}, got {value}")


def _positive(x: Any) -> bool:
    return x > 0


def non_negative(x: Any) -> bool:
    """Whether ``x >= 0``."""
    return x >= 0


def positive_finite(x: Any) -> bool:
    """Whether ``0 < x < inf``."""
    return 0 < x < math.inf


def _thread_option(text: str) -> bool:
    try:
        threads.parse_threads(text)
    except ValueError:
        return False
    return True


def _check_run_args(args: argparse.Namespace) -> None:
    """The options that do not go into a checkpoint (those are ``_check_config``'s)."""
    p, nn = ("positive", _positive), ("0 or more", non_negative)
    finite = ("positive and finite", positive_finite)
    check_options(args, {
        "log_every": p, "threads": (threads.REQUIREMENT, _thread_option), "steps": nn,
        "sample_every": nn, "save_every": nn, "valid_every": nn,
        "time_limit": ("positive and finite (leave it out for no limit)", positive_finite),
        "sample_chars": (f"from 0 to {MAX_SAMPLE_CHARS:,}", lambda n: 0 <= n <= MAX_SAMPLE_CHARS),
        "temperature": finite, "max_corpus_mb": finite,
        "save": ("a path", bool), "resume": ("a path", bool), "log": ("a path", bool),
    })


def _check_config(config: Any) -> None:
    """The run's configuration against the rules a checkpoint's must pass too, named by flag."""
    from .config import config_problem
    from .model import TextError

    problem = config_problem(config)
    if problem is not None:
        name, need, value = problem
        raise TextError(f"--{name.replace('_', '-')} must be {need}, got {value}")
    if config.stateful and config.cell == "LSTM":
        raise TextError("--stateful needs a cell whose state stays bounded, and Grenade's LSTM "
                        "has no tanh on its cell: carried from window to window its outputs "
                        "grow without limit (measured: loss 1,023 nats/char at step 100); use "
                        "--cell lstm or gru, or random windows")
    if config.dropout and len(config.hidden) < 2:
        raise TextError(f"--dropout {config.dropout:g} needs two recurrent layers or more (it "
                        f"goes between them) but --hidden {config.hidden[0]} has one; give "
                        "sizes such as 80,80 or leave --dropout out")


def _check_save_path(path: str, resume: str | None, overwrite: bool) -> str | None:
    """Refuse, before training, a checkpoint destination that could not be written or whose
    file would be lost: one that is not a regular dualtape file (such as the training text),
    or another run's checkpoint unless it is the one resumed or ``overwrite`` is given.
    Returns what is there now (``"PATH (step N)"``), None when nothing is."""
    from ..files import check_destination, same_file
    from ..io import read_header
    from .model import TextError

    flag = "--save" if path != resume else "--resume (which saves back to it)"
    try:
        target = check_destination(path, probe=True)
        if not target.exists():
            return None
        step = read_header(target).get("extra", {}).get("step")
        same = resume is not None and same_file(target, resume)
    except OSError as exc:
        hint = "" if path != resume else "; give --save PATH to save elsewhere"
        raise TextError(f"cannot write checkpoint {path}: {exc.strerror or exc}{hint}") from None
    except ValueError:
        raise TextError(f"{flag} {path} exists and is not a dualtape file; refusing to "
                        "overwrite it (choose another path)") from None
    there = path if step is None else f"{path} (step {step})"
    if not (same or overwrite):
        raise TextError(f"--save {there} is another run's checkpoint; refusing to replace it: "
                        f"choose another path, continue it with --resume {path}, or pass "
                        "--overwrite")
    return there


def resolve(name: str) -> Any:
    """The backend ``--backend name`` names; ``TextError`` when it cannot run here."""
    from ..backend import BackendUnavailable, resolve_backend
    from .model import TextError

    try:
        return resolve_backend(name)
    except BackendUnavailable as exc:
        raise TextError(str(exc)) from None


def _new_config(args: argparse.Namespace) -> Any:
    from .config import DEFAULT_RATES, TrainConfig
    from .model import parse_hidden

    config = TrainConfig()
    for name in ARCHITECTURE + TUNABLE:
        value = getattr(args, name)
        if value is not None:
            setattr(config, name, parse_hidden(value) if name == "hidden" else value)
    if args.rate is None:
        config.rate = DEFAULT_RATES[config.optimizer]
    if args.valid is None:
        config.valid = DEFAULT_VALID
    config.seed = args.seed if args.seed is not None else secrets.randbelow(2**31)
    return config


def _resumed_config(args: argparse.Namespace, stored: Any) -> Any:
    import dataclasses

    from .model import TextError, parse_hidden

    config = dataclasses.replace(stored)
    for name in ARCHITECTURE:
        value = getattr(args, name)
        if value is None:
            continue
        given = parse_hidden(value) if name == "hidden" else value
        if given != getattr(stored, name):
            flag = "--" + name.replace("_", "-")
            raise TextError(f"{flag} {value} does not match the checkpoint "
                            f"({getattr(stored, name)}); leave it out when resuming")
    for name in TUNABLE:
        if getattr(args, name) is not None:
            setattr(config, name, getattr(args, name))
    if args.seed is not None:
        config.seed = args.seed
    return config


def _corpus_path(args: argparse.Namespace, config: Any) -> str | None:
    if args.file is None:
        return config.corpus
    return str(Path(args.file).resolve())


class Prepared(NamedTuple):
    """A run ready to train: the trainer, its text, a header note (resumed from where; the
    ranks) and what the checkpoint destination holds before the run (None: nothing)."""

    trainer: Any
    text: str
    note: str | None
    before: str | None


def prepare(args: argparse.Namespace) -> Prepared:
    """The trainer the arguments describe (new or resumed), checked, with its header note."""
    from .checkpoint import load_checkpoint
    from .model import TextError
    from .trainer import TextTrainer

    _check_run_args(args)
    explicit = threads.parse_threads(args.threads)
    if isinstance(explicit, int) and not threads.threadpoolctl_installed():
        raise TextError("--threads needs threadpoolctl: pip install threadpoolctl")
    backend = resolve(args.backend)
    if args.resume:
        checkpoint = load_checkpoint(args.resume, backend)
        before = _check_save_path(args.save or args.resume, args.resume, args.overwrite)
        config = _resumed_config(args, checkpoint.config)
        _check_config(config)  # before reading the corpus
        config.corpus = _corpus_path(args, config)
        text = _read(config, args.max_corpus_mb, from_checkpoint=args.file is None)
        trainer = checkpoint.trainer(checkpoint.vocab.encode(text), config,
                                     reseed=args.seed is not None)
        note = f"resumed {args.resume} at step {checkpoint.step}"
        if args.save is None:
            note += "; saving back to it (--save PATH saves elsewhere)"
        return Prepared(trainer, text, note, before)
    before = None if args.save is None else _check_save_path(args.save, None, args.overwrite)
    config = _new_config(args)
    _check_config(config)
    config.corpus = _corpus_path(args, config)
    text = _read(config, args.max_corpus_mb)
    return Prepared(TextTrainer.new(text, config, backend), text, None, before)


def _read(config: Any, max_mb: float | None, from_checkpoint: bool = False) -> str:
    """The corpus ``config`` names, its fingerprint recorded in ``config``; from a checkpoint,
    only a regular file whose text still has the recorded fingerprint."""
    from .model import MAX_CORPUS_MB, TextError, fingerprint, read_corpus

    path = config.corpus
    checked = from_checkpoint and path is not None
    if checked and not Path(path).exists():
        raise TextError(f"the checkpoint's corpus {path} is gone; give the text as FILE")
    if checked and (not Path(path).is_file() or config.corpus_sha256 is None):
        raise TextError(f"the checkpoint names {path} as its corpus but records no fingerprint "
                        "of a regular file there; give the text as FILE")
    text = read_corpus(path, config.encoding, max_mb or MAX_CORPUS_MB)
    digest = None if path is None else fingerprint(text)
    if checked and digest != config.corpus_sha256:
        raise TextError(f"{path} is not the text the checkpoint was trained on (it changed, or "
                        "the checkpoint was edited); give the text as FILE")
    config.corpus_sha256 = digest
    return text
