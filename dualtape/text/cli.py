"""The ``train-text`` and ``sample`` commands: arguments, checks and console output.

Only ``argparse`` is imported here; the model code (``model``, ``trainer``) and tqdm are
imported when a command runs, so ``dualtape info`` stays quick. Bad input is reported as one
line on stderr with exit status 1, never a traceback.

Saving and signals: ``--save`` is checked before training (its folder must exist and be
writable; an existing file there must be a dualtape file, so the training text or any other
file is never overwritten). Ctrl-C or SIGTERM stops training after the current step, saves,
and exits with 130 or 143; a second one aborts. The final checkpoint is written before the
final sample; a failed periodic save warns and training goes on; a failed final save falls
back to ``NAME.stepN.npz`` next to it, then in the temporary folder, and says where.

What a resumed run reads: FILE when given; else the built-in corpus when the checkpoint was
trained on it; else the checkpoint's recorded corpus path, only when that is a regular file
whose text still has the SHA-256 recorded at save (a checkpoint edited to name another file,
a changed corpus, or one from before the fingerprint was recorded needs FILE). A checkpoint's
stored configuration passes the same checks (``trainer.CONFIG_RULES``) as the options.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import secrets
import shlex
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
        "cross entropy per character, in nats. Without --steps or --time-limit it trains until "
        "Ctrl-C; keep the model with --save.",
    )
    p.add_argument("file", nargs="?", metavar="FILE",
                   help="text to learn (default: the built-in corpus, or the checkpoint's if "
                   "it is unchanged)")
    p.add_argument("--encoding", help="text encoding of FILE (default utf-8)")
    p.add_argument("--max-corpus-mb", type=float, metavar="MB",
                   help="refuse a FILE larger than this (default 64; its symbols take 8 bytes "
                   "per character in memory)")
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
    run.add_argument("--steps", type=int, metavar="N",
                     help="stop after N steps in this run (default: no step limit; without "
                     "--steps or --time-limit training runs until Ctrl-C, which stops it "
                     "after the current step and saves when --save is given)")
    run.add_argument("--time-limit", type=float, metavar="SECONDS",
                     help="stop after this many seconds of training (default: no time limit); "
                     "the progress bar then shows the time used and left")
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
                     help="write a checkpoint here at the end (and on Ctrl-C or SIGTERM); "
                     "an existing file must be a dualtape file")
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
    from .model import TextError

    for name, (need, ok) in rules.items():
        value = getattr(args, name)
        if value is not None and not ok(value):
            flag = "--" + name.replace("_", "-")
            raise TextError(f"{flag} must be {need}, got {value}")


def _positive(x: Any) -> bool:
    return x > 0


def _non_negative(x: Any) -> bool:
    return x >= 0


def _positive_finite(x: Any) -> bool:
    return 0 < x < math.inf


def _check_run_args(args: argparse.Namespace) -> None:
    """The options that do not go into a checkpoint (those are ``_check_config``'s)."""
    p, nn = ("positive", _positive), ("0 or more", _non_negative)
    _check(args, {
        "log_every": p, "time_limit": p, "threads": p, "steps": nn, "sample_every": nn,
        "sample_chars": nn, "save_every": nn, "temperature": ("positive and finite",
                                                              _positive_finite),
        "max_corpus_mb": ("positive and finite", _positive_finite),
    })


def _check_config(config: Any) -> None:
    """The run's configuration against the rules a checkpoint's must pass too, named by flag."""
    from .model import TextError
    from .trainer import config_problem

    problem = config_problem(config)
    if problem is not None:
        name, need, value = problem
        raise TextError(f"--{name.replace('_', '-')} must be {need}, got {value}")


def _check_save_path(path: str) -> None:
    """Refuse, before training, a ``--save`` that could not be written or that would replace
    a file which is not a dualtape file (such as the training text)."""
    import tempfile

    from ..io import check_destination, read_header
    from .model import TextError

    try:
        target = check_destination(path)
        with tempfile.TemporaryFile(dir=target.parent):
            pass  # the folder takes a new file (read-only file systems, quotas)
    except OSError as exc:
        raise TextError(f"cannot write checkpoint {path}: {exc.strerror or exc}") from None
    if target.exists():
        try:
            read_header(target)
        except (OSError, ValueError):
            raise TextError(f"--save {path} exists and is not a dualtape file; refusing to "
                            "overwrite it (choose another path)") from None


def _resolve(name: str) -> Any:
    from ..backend import BackendUnavailable, resolve_backend
    from .model import TextError

    try:
        return resolve_backend(name)
    except BackendUnavailable as exc:
        raise TextError(str(exc)) from None


def _new_config(args: argparse.Namespace) -> Any:
    from .model import parse_hidden
    from .trainer import DEFAULT_RATES, TrainConfig

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


def _prepare(args: argparse.Namespace) -> Any:
    """The trainer the arguments describe (new or resumed), and a header to print."""
    from .model import TextError
    from .trainer import TextTrainer, load_checkpoint

    _check_run_args(args)
    if args.threads is not None:
        try:
            import threadpoolctl  # noqa: F401
        except ImportError:
            raise TextError("--threads needs threadpoolctl: pip install threadpoolctl") from None
    if args.save:
        _check_save_path(args.save)
    backend = _resolve(args.backend)
    if args.resume:
        checkpoint = load_checkpoint(args.resume, backend)
        config = _resumed_config(args, checkpoint.config)
        _check_config(config)  # before reading the corpus
        config.corpus = _corpus_path(args, config)
        text = _read(config, args.max_corpus_mb, from_checkpoint=args.file is None)
        trainer = checkpoint.trainer(checkpoint.vocab.encode(text), config,
                                     reseed=args.seed is not None)
        return trainer, text, f"resumed {args.resume} at step {checkpoint.step}"
    config = _new_config(args)
    _check_config(config)
    config.corpus = _corpus_path(args, config)
    text = _read(config, args.max_corpus_mb)
    return TextTrainer.new(text, config, backend), text, None


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
    """A tqdm progress bar with the loss and speed; messages are written above it. It counts
    steps (of ``steps`` when given) or, with a ``time_limit``, shows the time used of the
    limit and the time left."""

    def __init__(self, tqdm: Any, steps: int | None, time_limit: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.tqdm, self.time_limit, self.clock = tqdm, time_limit, clock
        self.started, self.done, self.reading = clock(), 0, ""
        if time_limit is None:
            self.bar = tqdm(total=steps, unit=" steps", file=sys.stdout, dynamic_ncols=True)
        else:
            self.bar = tqdm(total=time_limit, file=sys.stdout, dynamic_ncols=True,
                            bar_format="{percentage:3.0f}%|{bar}| {desc}")

    def advance(self) -> None:
        """Move the bar one step, or to the time used so far."""
        self.done += 1
        if self.time_limit is None:
            self.bar.update(1)
            return
        used = min(self.clock() - self.started, self.time_limit)
        interval = self.tqdm.format_interval
        self.bar.set_description_str(
            f"{interval(used)} of {interval(self.time_limit)}, ETA "
            f"{interval(self.time_limit - used)}, {self.done} steps{self.reading}", refresh=False)
        self.bar.update(used - self.bar.n)

    def progress(self, step: int, loss: float, chars_per_second: float) -> None:
        """Show the reading on the bar."""
        self.loss, self.speed = loss, chars_per_second
        self.reading = f", loss {loss:.3f}, {chars_per_second:,.0f} chars/s"
        if self.time_limit is None:
            self.bar.set_postfix_str(self.reading[2:], refresh=False)

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


def _reporter(steps: int | None, time_limit: float | None) -> PlainReporter:
    if not sys.stdout.isatty():
        return PlainReporter()
    try:
        from tqdm import tqdm
    except ImportError:
        return PlainReporter()
    return BarReporter(tqdm, steps, time_limit)


def _next_step(trainer: Any) -> str:
    """Where the model is and the command that uses it, or how to keep it next time."""
    if trainer.saved is None:
        return ("the model was not saved: run with --save PATH to keep it, then "
                "`dualtape sample PATH` writes text from it")
    path, step = trainer.saved
    return (f"checkpoint: {path} (step {step}); write text from it with: dualtape sample "
            f"{shlex.quote(path)}")


def _blas_threads(threads: int | None) -> contextlib.AbstractContextManager:
    """A limit on BLAS and OpenMP threads while training (``--threads``), via threadpoolctl."""
    if threads is None:
        return contextlib.nullcontext()
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=threads)


class StopRequest:
    """Whether a stop was asked for, and by which signal (its exit status is 128 + signal)."""

    def __init__(self) -> None:
        self.signum: int | None = None

    def __call__(self) -> bool:
        return self.signum is not None

    @property
    def exit_code(self) -> int:
        """130 after Ctrl-C (SIGINT), 143 after SIGTERM."""
        return 128 + (self.signum or signal.SIGINT)


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def _stop_on_interrupt() -> Iterator[StopRequest]:
    """The first Ctrl-C or SIGTERM asks the loop to stop after its step; a second one aborts."""
    request = StopRequest()
    if threading.current_thread() is not threading.main_thread():
        yield request
        return

    def handler(signum: int, frame: Any) -> None:
        if request():
            raise KeyboardInterrupt
        request.signum = signum

    previous = {sig: signal.signal(sig, handler) for sig in STOP_SIGNALS}
    try:
        yield request
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def train_text(args: argparse.Namespace) -> int:
    """``dualtape train-text``: train (or resume), report, save and sample."""
    from .model import TextError
    from .trainer import RunLimits, run_training

    run = run_training
    try:
        if args.distributed:
            from .distributed import prepare_distributed

            trainer, text, resumed, run = prepare_distributed(args, _prepare)
        else:
            trainer, text, resumed = _prepare(args)
    except TextError as exc:
        return _fail("train-text", str(exc))
    except MemoryError:
        return _fail("train-text", "out of memory while building the model; use a smaller "
                     "--hidden, --batch or --seq-len")
    except KeyboardInterrupt:
        return INTERRUPTED
    for line in _header(trainer, text, resumed):
        _emit(line)
    limits = RunLimits(args.steps, args.time_limit, args.log_every, args.sample_every,
                       args.sample_chars, args.temperature, args.save, args.save_every)
    reporter = _reporter(args.steps, args.time_limit)
    stop = StopRequest()
    try:
        with _blas_threads(args.threads), _stop_on_interrupt() as stop:
            result = run(trainer, limits, reporter, stop)
    except FloatingPointError as exc:
        reporter.close()
        return _fail("train-text", f"{exc}; nothing was saved")
    except TextError as exc:
        reporter.close()
        return _fail("train-text", str(exc))
    except MemoryError:
        reporter.close()
        return _fail("train-text", f"out of memory at step {trainer.step_count}; use a smaller "
                     "--hidden, --batch or --seq-len")
    except KeyboardInterrupt:
        reporter.close()
        saved = ("nothing was saved" if trainer.saved is None
                 else "saved {} at step {}".format(*trainer.saved))
        _emit(f"aborted at step {trainer.step_count}; {saved}")
        _emit(_next_step(trainer))
        return stop.exit_code
    reporter.close()
    why = {"steps": "step limit", "time": "time limit", "interrupted": "interrupted"}
    loss = "" if reporter.loss is None else f", loss {reporter.loss:.3f}"
    _emit(f"stopped ({why[result.reason]}) at step {trainer.step_count}: {result.steps} steps "
          f"in {result.seconds:.1f} s{loss}, {result.chars_per_second:,.0f} chars/s")
    _emit(_next_step(trainer))
    return stop.exit_code if result.reason == "interrupted" else 0


def sample_text(args: argparse.Namespace) -> int:
    """``dualtape sample``: write text from a checkpoint as it is drawn (Ctrl-C keeps what
    was printed)."""
    import numpy as np

    from .model import TextError, generate
    from .trainer import load_checkpoint

    try:
        _check(args, {"chars": ("0 or more", _non_negative),
                      "temperature": ("positive and finite", _positive_finite)})
        checkpoint = load_checkpoint(args.checkpoint, _resolve(args.backend))
        pieces = generate(checkpoint.net, checkpoint.vocab, args.chars,
                          temperature=args.temperature, rng=np.random.default_rng(args.seed),
                          prime=args.prime)
        _emit(args.prime, end="")
        for piece in pieces:
            _emit(piece, end="")
    except TextError as exc:
        return _fail("sample", str(exc))
    except FloatingPointError:
        _emit("")
        return _fail("sample", f"{args.checkpoint}: the network's outputs became NaN or infinite "
                     "while sampling; the checkpoint cannot be sampled")
    except KeyboardInterrupt:
        _emit("")
        return INTERRUPTED
    _emit("")
    return 0
