"""The ``train-text`` and ``sample`` commands: arguments, checks and console output.

Only ``argparse`` is imported here; the model code (``text``, ``text_train``) and tqdm are
imported when a command runs, so ``dualtape info`` stays quick. Bad input is reported as one
line on stderr with exit status 1; Ctrl-C stops training after the current step, saves (with
``--save``) and exits with 130.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import secrets
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

BACKEND_CHOICES = ("auto", "numpy", "cupy", "torch", "array_api_strict")
ARCHITECTURE = ("hidden", "vocab", "annotate_capitals", "dtype", "optimizer")
TUNABLE = ("seq_len", "batch", "rate", "momentum", "l2", "clip", "encoding")
PLAIN_INTERVAL = 2.0  # seconds between plain progress lines
INTERRUPTED = 130


def register(commands: Any) -> None:
    """Add ``train-text`` and ``sample`` to the ``dualtape`` subcommands."""
    _train_parser(commands).set_defaults(run=train_text)
    _sample_parser(commands).set_defaults(run=sample_text)


def _train_parser(commands: Any) -> argparse.ArgumentParser:
    p = commands.add_parser(
        "train-text",
        help="train a character-level LSTM on a text file",
        description="Train a character-level LSTM language model on FILE (default: a small "
        "corpus shipped with dualtape) and print samples as it learns. The loss is the mean "
        "cross entropy per character, in nats.",
    )
    p.add_argument("file", nargs="?", metavar="FILE",
                   help="text to learn (default: the built-in corpus, or the checkpoint's)")
    p.add_argument("--encoding", help="text encoding of FILE (default utf-8)")
    model = p.add_argument_group("model (fixed by a checkpoint when resuming)")
    model.add_argument("--vocab", type=int, metavar="N",
                       help="keep the N most frequent characters, the rest map to one unknown "
                       "symbol (default 100)")
    model.add_argument("--annotate-capitals", action="store_true", default=None,
                       help="learn an uppercase letter as a capital marker + its lowercase letter")
    model.add_argument("--hidden", metavar="SIZES",
                       help="LSTM layer sizes, comma-separated (default 80,80)")
    model.add_argument("--dtype", choices=("float32", "float64"), help="default float32")
    model.add_argument("--optimizer", choices=("sgd", "adam"),
                       help="SGD with momentum (default) or Adam")
    train = p.add_argument_group("training")
    train.add_argument("--rate", type=float, help="learning rate (default 0.5 SGD, 0.01 Adam)")
    train.add_argument("--momentum", type=float, help="SGD momentum (default 0.95)")
    train.add_argument("--l2", type=float, help="SGD L2 regulariser (default 1e-6)")
    train.add_argument("--clip", type=float,
                       help="clip the gradient's global norm to this, 0 = off (default 1.0)")
    train.add_argument("--seq-len", type=int, metavar="T",
                       help="characters per training window (default 50)")
    train.add_argument("--batch", type=int, metavar="B", help="windows per step (default 32)")
    train.add_argument("--seed", type=int, help="seed for weights, windows and samples "
                       "(default: a random one, printed)")
    run = p.add_argument_group("running")
    run.add_argument("--backend", choices=BACKEND_CHOICES, default="auto",
                     help="where to compute (default auto: cupy with a GPU, else numpy)")
    run.add_argument("--threads", type=int, metavar="N",
                     help="CPU threads for BLAS and OpenMP (numpy, torch; needs threadpoolctl); "
                     "1 is as fast for the default size and steadier on a busy machine "
                     "(default: the libraries' own)")
    run.add_argument("--steps", type=int, metavar="N", help="stop after N steps in this run")
    run.add_argument("--time-limit", type=float, metavar="SECONDS",
                     help="stop after this many seconds of training")
    run.add_argument("--log-every", type=int, default=10, metavar="N",
                     help="read the loss back from the device every N steps (default 10)")
    run.add_argument("--sample-every", type=int, default=200, metavar="N",
                     help="print a sample every N steps and at the end, 0 = only at "
                     "the end (default 200)")
    run.add_argument("--sample-chars", type=int, default=200, metavar="N",
                     help="characters per sample, 0 = no samples (default 200)")
    run.add_argument("--temperature", type=float, default=0.8,
                     help="sampling temperature, > 0 (default 0.8)")
    run.add_argument("--save", metavar="PATH",
                     help="write a checkpoint here at the end (and on Ctrl-C)")
    run.add_argument("--save-every", type=int, default=0, metavar="N",
                     help="also save every N steps (default: only at the end)")
    run.add_argument("--resume", metavar="PATH", help="continue from a checkpoint")
    run.add_argument("--distributed", action="store_true",
                     help="train data-parallel with every process of an MPI launch: mpiexec -n "
                     "N dualtape train-text --distributed ...; --batch is per process, rank 0 "
                     "prints and saves (needs mpi4py: pip install 'dualtape[mpi]')")
    return p


def _sample_parser(commands: Any) -> argparse.ArgumentParser:
    p = commands.add_parser(
        "sample",
        help="write text from a train-text checkpoint",
        description="Write text from a checkpoint saved by `dualtape train-text --save`.",
    )
    p.add_argument("checkpoint", metavar="CHECKPOINT")
    p.add_argument("--chars", type=int, default=500, help="characters to write (default 500)")
    p.add_argument("--temperature", type=float, default=0.8,
                   help="> 0; lower is more conservative (default 0.8)")
    p.add_argument("--prime", default="", metavar="TEXT", help="text to start from")
    p.add_argument("--seed", type=int, help="seed for reproducible text")
    p.add_argument("--backend", choices=BACKEND_CHOICES, default="numpy",
                   help="where to compute (default numpy: one character at a time is fastest "
                   "on the host)")
    return p


def _fail(command: str, message: str) -> int:
    print(f"dualtape {command}: error: {message}", file=sys.stderr)
    return 1


def _emit(text: str, end: str = "\n") -> None:
    """Print even where the console's encoding lacks some characters."""
    try:
        sys.stdout.write(text + end)
    except UnicodeEncodeError:
        encoding = sys.stdout.encoding or "ascii"
        sys.stdout.write((text + end).encode(encoding, "replace").decode(encoding))
    sys.stdout.flush()


def _check(args: argparse.Namespace, rules: dict[str, tuple[str, Callable]]) -> None:
    from .text import TextError

    for name, (need, ok) in rules.items():
        value = getattr(args, name)
        if value is not None and not ok(value):
            flag = "--" + name.replace("_", "-")
            raise TextError(f"{flag} must be {need}, got {value}")


def _positive(x: Any) -> bool:
    return x > 0


def _non_negative(x: Any) -> bool:
    return x >= 0


def _check_train_args(args: argparse.Namespace) -> None:
    p, nn = ("positive", _positive), ("0 or more", _non_negative)
    _check(args, {
        "vocab": p, "seq_len": p, "batch": p, "rate": p, "log_every": p, "time_limit": p,
        "temperature": p, "threads": p, "steps": nn, "sample_every": nn, "sample_chars": nn,
        "save_every": nn, "l2": nn, "clip": nn, "momentum": ("in [0, 1)", lambda m: 0 <= m < 1),
    })


def _resolve(name: str) -> Any:
    from .backend import BackendUnavailable, resolve_backend
    from .text import TextError

    try:
        return resolve_backend(name)
    except BackendUnavailable as exc:
        raise TextError(str(exc)) from None


def _new_config(args: argparse.Namespace) -> Any:
    from .text import parse_hidden
    from .text_train import DEFAULT_RATES, TrainConfig

    config = TrainConfig()
    for name in ARCHITECTURE + TUNABLE:
        value = getattr(args, name)
        if value is not None:
            setattr(config, name, parse_hidden(value) if name == "hidden" else value)
    if args.rate is None:
        config.rate = DEFAULT_RATES[config.optimizer]
    config.seed = args.seed if args.seed is not None else secrets.randbelow(2**31)
    return config


def _resumed_config(args: argparse.Namespace, stored: Any) -> Any:
    import dataclasses

    from .text import TextError, parse_hidden

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


def _prepare(args: argparse.Namespace) -> Any:
    """The trainer the arguments describe (new or resumed), and a header to print."""
    from .text import TextError
    from .text_train import TextTrainer, load_checkpoint, make_optimizer

    _check_train_args(args)
    if args.threads is not None:
        try:
            import threadpoolctl  # noqa: F401
        except ImportError:
            raise TextError("--threads needs threadpoolctl: pip install threadpoolctl") from None
    if args.save and not Path(args.save).resolve().parent.is_dir():
        raise TextError(f"cannot write checkpoint {args.save}: its folder does not exist")
    backend = _resolve(args.backend)
    if args.resume:
        checkpoint = load_checkpoint(args.resume, backend)
        config = _resumed_config(args, checkpoint.config)
        make_optimizer(config)  # check the values before reading the corpus
        config.corpus = _corpus_path(args, config)
        text = _read(config, from_checkpoint=args.file is None)
        trainer = checkpoint.trainer(checkpoint.vocab.encode(text), config,
                                     reseed=args.seed is not None)
        return trainer, text, f"resumed {args.resume} at step {checkpoint.step}"
    config = _new_config(args)
    make_optimizer(config)
    config.corpus = _corpus_path(args, config)
    text = _read(config)
    return TextTrainer.new(text, config, backend), text, None


def _read(config: Any, from_checkpoint: bool = False) -> str:
    from .text import TextError, read_corpus

    if from_checkpoint and config.corpus is not None and not Path(config.corpus).exists():
        raise TextError(f"the checkpoint's corpus {config.corpus} is gone; give the text as FILE")
    return read_corpus(config.corpus, config.encoding)


def _header(trainer: Any, text: str, resumed: str | None) -> list[str]:
    cfg, vocab, net = trainer.config, trainer.vocab, trainer.net
    corpus = cfg.corpus or "the built-in corpus"
    extras = "unknown" + (" and capital marker" if vocab.annotate_capitals else "")
    count = sum(math.prod(p.shape) for group in net.params for p in group.values())
    lines = [
        f"corpus: {corpus} ({len(text):,} characters); vocabulary: {len(vocab)} symbols "
        f"({vocab.characters} characters + {extras})",
        f"network: {' -> '.join(map(repr, net.layers))}; {count:,} parameters, {cfg.dtype} on "
        f"{trainer.backend.name}",
    ]
    opt = (f"SGD rate {cfg.rate:g}, momentum {cfg.momentum:g}, l2 {cfg.l2:g}"
           if cfg.optimizer == "sgd" else f"Adam rate {cfg.rate:g}")
    lines.append(f"training: {opt}, clip {cfg.clip:g}; windows of {cfg.seq_len} x batch "
                 f"{cfg.batch}; seed {cfg.seed}")
    if resumed:
        lines.append(resumed)
    return lines


class PlainReporter:
    """Progress as a line every ``PLAIN_INTERVAL`` seconds (for logs and pipes)."""

    def __init__(self) -> None:
        self.last_line = -float("inf")
        self.loss: float | None = None
        self.speed = 0.0

    def advance(self) -> None:
        """Nothing to do per step."""

    def progress(self, step: int, loss: float, chars_per_second: float) -> None:
        """Remember the reading; print it if the last line is old enough."""
        self.loss, self.speed = loss, chars_per_second
        now = time.monotonic()
        if now - self.last_line >= PLAIN_INTERVAL:
            self.last_line = now
            _emit(f"step {step:>6}  loss {loss:.3f}  {chars_per_second:,.0f} chars/s")

    def text(self, message: str) -> None:
        """Print a message."""
        _emit(message)

    def close(self) -> None:
        """Nothing to close."""


class BarReporter(PlainReporter):
    """A tqdm progress bar with the loss and speed; messages are written above it."""

    def __init__(self, tqdm: Any, total: int | None) -> None:
        super().__init__()
        self.tqdm = tqdm
        self.bar = tqdm(total=total, unit="step", file=sys.stdout, dynamic_ncols=True)

    def advance(self) -> None:
        """Move the bar one step."""
        self.bar.update(1)

    def progress(self, step: int, loss: float, chars_per_second: float) -> None:
        """Show the reading on the bar."""
        self.loss, self.speed = loss, chars_per_second
        self.bar.set_postfix_str(f"loss {loss:.3f}, {chars_per_second:,.0f} chars/s",
                                 refresh=False)

    def text(self, message: str) -> None:
        """Print above the bar."""
        try:
            self.tqdm.write(message, file=sys.stdout)
        except UnicodeEncodeError:
            self.bar.clear()
            _emit(message)

    def close(self) -> None:
        """Leave the bar on screen."""
        self.bar.close()


def _reporter(total: int | None) -> PlainReporter:
    if not sys.stdout.isatty():
        return PlainReporter()
    try:
        from tqdm import tqdm
    except ImportError:
        return PlainReporter()
    return BarReporter(tqdm, total)


def _blas_threads(threads: int | None) -> contextlib.AbstractContextManager:
    """A limit on BLAS and OpenMP threads while training (``--threads``), via threadpoolctl."""
    if threads is None:
        return contextlib.nullcontext()
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=threads)


@contextlib.contextmanager
def _stop_on_interrupt() -> Iterator[Callable[[], bool]]:
    """The first Ctrl-C asks the loop to stop after its step; a second one aborts."""
    requested = [False]
    if threading.current_thread() is not threading.main_thread():
        yield lambda: requested[0]
        return

    def handler(signum: int, frame: Any) -> None:
        if requested[0]:
            raise KeyboardInterrupt
        requested[0] = True

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield lambda: requested[0]
    finally:
        signal.signal(signal.SIGINT, previous)


def train_text(args: argparse.Namespace) -> int:
    """``dualtape train-text``: train (or resume), report, sample and save."""
    from .text import TextError
    from .text_train import RunLimits, run_training

    run = run_training
    try:
        if args.distributed:
            from .text_distributed import prepare_distributed

            trainer, text, resumed, run = prepare_distributed(args, _prepare)
        else:
            trainer, text, resumed = _prepare(args)
    except TextError as exc:
        return _fail("train-text", str(exc))
    except KeyboardInterrupt:
        return INTERRUPTED
    for line in _header(trainer, text, resumed):
        _emit(line)
    limits = RunLimits(args.steps, args.time_limit, args.log_every, args.sample_every,
                       args.sample_chars, args.temperature, args.save, args.save_every)
    reporter = _reporter(args.steps)
    try:
        with _blas_threads(args.threads), _stop_on_interrupt() as stop:
            result = run(trainer, limits, reporter, stop)
    except FloatingPointError as exc:
        reporter.close()
        return _fail("train-text", f"{exc}; nothing was saved")
    except TextError as exc:
        reporter.close()
        return _fail("train-text", str(exc))
    except KeyboardInterrupt:
        reporter.close()
        _emit(f"aborted at step {trainer.step_count}; nothing was saved")
        return INTERRUPTED
    reporter.close()
    why = {"steps": "step limit", "time": "time limit", "interrupted": "interrupted"}
    loss = "" if reporter.loss is None else f", loss {reporter.loss:.3f}"
    _emit(f"stopped ({why[result.reason]}) at step {trainer.step_count}: {result.steps} steps "
          f"in {result.seconds:.1f} s{loss}, {result.chars_per_second:,.0f} chars/s")
    return INTERRUPTED if result.reason == "interrupted" else 0


def sample_text(args: argparse.Namespace) -> int:
    """``dualtape sample``: write text from a checkpoint."""
    import numpy as np

    from .text import TextError, sample
    from .text_train import load_checkpoint

    try:
        _check(args, {"chars": ("0 or more", _non_negative), "temperature": ("positive",
                                                                            _positive)})
        checkpoint = load_checkpoint(args.checkpoint, _resolve(args.backend))
        text = sample(checkpoint.net, checkpoint.vocab, args.chars,
                      temperature=args.temperature, rng=np.random.default_rng(args.seed),
                      prime=args.prime)
    except TextError as exc:
        return _fail("sample", str(exc))
    except KeyboardInterrupt:
        return INTERRUPTED
    _emit(args.prime + text)
    return 0
