"""The ``train-text`` and ``sample`` commands: arguments, checks and console output.

Only ``argparse``, ``console`` and ``threads`` (the standard library alone) are imported here;
the model code (``model``, ``trainer``, ``loop``, ...) and tqdm are imported when a command runs, so
``dualtape info`` stays quick. Bad input is reported as one line on stderr with exit status 1,
never a traceback.

Where a checkpoint goes: ``--save PATH``, or, when resuming without it, back to the
``--resume`` file (the header says so). Both are checked before training: the folder must be
writable; an existing file there must be a regular dualtape file, and it is replaced only when
it is the checkpoint being resumed (the same file by any spelling or link) or with
``--overwrite``; anything else (the training text, a FIFO, a device) is never replaced.

How a run stops, and its exit status (0, 1, 2, 74, 128 + N; ``sample`` 0, 1, 74, 130): one home,
docs/train-text.md, "How a run ends".

What a resumed run reads: FILE when given; else the built-in corpus when the checkpoint was
trained on it; else the checkpoint's recorded corpus path, only when that is a regular file
whose text still has the SHA-256 recorded at save (a checkpoint edited to name another file,
a changed corpus, or one from before the fingerprint was recorded needs FILE). A checkpoint's
stored configuration passes the same checks (``config.CONFIG_RULES``) as the options.

The record: every ``--log-every`` steps the loss is read back, printed (above the bar on a
terminal) and appended to the log (``record``: ``--log PATH``, else ``CHECKPOINT.log.csv``
beside ``--save`` or the ``--resume`` file, never through a link there; ``--no-log``: none),
checked before training; a log that cannot be written warns once and training goes on.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import math
import shlex
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..kernels.overlap import overlap_gradients
from . import threads
from .cells import CELL_NAMES, cell_name
from .console import (
    INTERRUPTED,
    OUTPUT_LOST,
    GuardedReporter,
    Output,
    StopRequest,
    emit,
    stop_on_signals,
    to_stderr,
)
from .prepare import (
    DEFAULT_VALID,
    MAX_SAMPLE_CHARS,
    Prepared,
    check_options,
    non_negative,
    positive_finite,
    prepare,
    resolve,
)

if TYPE_CHECKING:
    from .distributed import Runner

BACKEND_CHOICES = ("auto", "numpy", "cupy", "torch", "array_api_strict")


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
                       help="recurrent layer sizes, comma-separated (default 80,80)")
    model.add_argument("--cell", choices=CELL_NAMES, type=cell_name,
                       help="the recurrent layers, by class name: LSTM (default; Grenade's "
                       "peephole LSTM), StandardLSTM (torch.nn.LSTM's) or GRU (torch.nn.GRU's); "
                       "the former names grenade-lstm, lstm and gru are taken too (mind the "
                       "case: lstm is StandardLSTM); Grenade's BasicRecurrent is linear, too "
                       "weak for text, and not offered")
    model.add_argument("--dropout", type=float, metavar="P",
                       help="while training, zero this fraction of each recurrent layer's "
                       "outputs on the way to the next (not after the last, as torch.nn.LSTM's "
                       "dropout; needs two layers), 0 <= P < 1; off in samples (default 0)")
    model.add_argument("--dtype", choices=("float32", "float64"), help="default float32")
    model.add_argument("--optimizer", choices=("sgd", "adam"),
                       help="SGD with momentum (default) or Adam")
    model.add_argument("--valid", type=float, metavar="FRACTION",
                       help="hold out the corpus's last FRACTION (0 to 0.5) from training and "
                       "report the loss on it in nats and bits per character every "
                       f"--valid-every steps and at the end, 0 = none (default {DEFAULT_VALID:g})")
    train = p.add_argument_group("training")
    train.add_argument("--rate", type=float, help="learning rate (default 0.5 SGD, 0.01 Adam)")
    train.add_argument("--schedule", metavar="SPEC",
                       help="the rate by step: constant (default), step:N[:GAMMA] (times GAMMA, "
                       "default 0.1, every N steps), cosine:N[:MIN] (down to MIN, default 0, "
                       "over N steps), warmup:N[:START] (from START, default 1/3, times the "
                       "rate up to it over N steps), or parts joined by +, each but the last "
                       "lasting its N steps (warmup:200+cosine:9800)")
    train.add_argument("--momentum", type=float, help="SGD momentum (default 0.95)")
    train.add_argument("--l2", type=float, help="SGD L2 regulariser (default 1e-6)")
    train.add_argument("--clip", type=float,
                       help="clip the gradient's global norm to this, 0 = off (default 1.0)")
    train.add_argument("--seq-len", type=int, metavar="T",
                       help="characters per training window (default 50)")
    train.add_argument("--batch", type=int, metavar="B", help="windows per step (default 32)")
    train.add_argument("--stateful", action=argparse.BooleanOptionalAction,
                       help="read the text in order as B streams, each window beginning from "
                       "the state the stream's previous window ended in (truncated BPTT; the "
                       "gradient stops at the window's start), instead of B windows at random "
                       "offsets from the initial state (default: random windows)")
    train.add_argument("--seed", type=int, help="seed for weights, windows and samples "
                       "(default: a random one, printed)")
    run = p.add_argument_group("running")
    run.add_argument("--backend", choices=BACKEND_CHOICES, default="auto",
                     help="where to compute (default auto: cupy with a GPU, else numpy)")
    run.add_argument("--threads", default="auto", metavar="N|auto|unset",
                     help="CPU threads for BLAS, OpenMP and torch (needs threadpoolctl). "
                     "auto (default): chosen from the sizes, one thread unless the time loop's "
                     "products are large, never more than the cores free (shared among the "
                     "ranks of --distributed on one machine; a count set in OMP_NUM_THREADS, "
                     "OPENBLAS_NUM_THREADS or MKL_NUM_THREADS is kept); the header says what "
                     "was chosen. N: that many. unset: the libraries' own defaults")
    run.add_argument("--steps", type=int, metavar="N",
                     help="stop after N steps in this run (default: no step limit; without "
                     "--steps or --time-limit training runs until Ctrl-C, which stops it "
                     "after the current step and saves when --save is given)")
    run.add_argument("--time-limit", type=float, metavar="SECONDS",
                     help="stop after this many seconds of training (default: no time limit): "
                     "the steps' and loss readings' time, not that of held-out readings, "
                     "samples and saves, nor of getting ready before the first step; the "
                     "progress bar then shows the training time used and left. The last "
                     "held-out reading, the final save and the sample come after the limit")
    run.add_argument("--log-every", type=int, default=100, metavar="N",
                     help="read the loss back from the device every N steps, print it (above "
                     "the progress bar on a terminal) and add a row to the log (default 100)")
    run.add_argument("--log", metavar="PATH",
                     help="append a row per reading to this log, PATH.csv or PATH.jsonl, with "
                     "the columns step, seconds (of training, summed over resumes), as "
                     "--time-limit counts them, "
                     "train_loss (nats/char), valid_loss (nats/char) and valid_bpc (bits/char; "
                     "empty without a held-out loss), chars_per_s, learning_rate; a resumed "
                     "run appends, a new one refuses another run's log unless --overwrite; "
                     "plot it with `dualtape plot PATH` (default with --save or --resume: "
                     "the checkpoint's path + .log.csv)")
    run.add_argument("--no-log", action="store_true", help="write no log")
    run.add_argument("--valid-every", type=int, default=200, metavar="N",
                     help="read the held-out loss every N steps and at the end, 0 = only at "
                     "the end (default 200)")
    run.add_argument("--sample-every", type=int, default=200, metavar="N",
                     help="print a sample every N steps and at the end, 0 = only at "
                     "the end (default 200)")
    run.add_argument("--sample-chars", type=int, default=200, metavar="N",
                     help=f"characters per sample, 0 = no samples, at most "
                     f"{MAX_SAMPLE_CHARS:,} (default 200)")
    run.add_argument("--temperature", type=float, default=0.8,
                     help="sampling temperature, > 0 (default 0.8)")
    run.add_argument("--save", metavar="PATH",
                     help="write a checkpoint here at the end (and on Ctrl-C, SIGTERM, SIGHUP "
                     "or a lost stdout); an existing checkpoint is replaced only when it is "
                     "the one resumed, or with --overwrite (default: the --resume file)")
    run.add_argument("--overwrite", action="store_true",
                     help="let --save replace an existing checkpoint of another run (and the "
                     "log start afresh)")
    run.add_argument("--save-every", type=int, default=0, metavar="N",
                     help="also save every N steps (default: only at the end)")
    run.add_argument("--resume", metavar="PATH",
                     help="continue from a checkpoint, saving back to it unless --save is given")
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


def _fail(command: str, message: str, status: int = 1) -> int:
    to_stderr(f"dualtape {command}: error: {message}")
    return status


def _shown(layer: Any) -> str:
    """A layer for the header: its repr, a Dropout's without its (long, derived) seed."""
    return f"Dropout({layer.rate:g})" if layer.kind == "Dropout" else repr(layer)


def _header(prepared: Prepared, chosen: threads.ThreadChoice) -> list[str]:
    trainer, text = prepared.trainer, prepared.text
    cfg, vocab, net = trainer.config, trainer.vocab, trainer.net
    corpus = cfg.corpus or "the built-in corpus"
    extras = "unknown" + (" and capital marker" if vocab.annotate_capitals else "")
    count = sum(math.prod(p.shape) for group in net.params for p in group.values())
    lines = [
        f"corpus: {corpus} ({len(text):,} characters); vocabulary: {len(vocab)} symbols "
        f"({vocab.characters} characters + {extras})",
        f"network: {' -> '.join(map(_shown, net.layers))}; {count:,} parameters, {cfg.dtype} on "
        f"{trainer.backend.name}",
    ]
    opt = (f"SGD rate {cfg.rate:g}, momentum {cfg.momentum:g}, l2 {cfg.l2:g}"
           if cfg.optimizer == "sgd" else f"Adam rate {cfg.rate:g}")
    if cfg.schedule != "constant":
        opt += f", schedule {cfg.schedule}"
    windows = (f"{cfg.batch} streams read in order (stateful), windows of {cfg.seq_len}"
               if cfg.stateful else f"random windows of {cfg.seq_len} x batch {cfg.batch}")
    lines.append(f"training: {opt}, clip {cfg.clip:g}; {windows}; seed {cfg.seed}")
    lines.append(chosen.line)
    with overlap_gradients(chosen.overlap):  # as the steps run
        lines.append(f"route: {trainer.route()}")
    if trainer.held_ids is not None:
        lines.append(f"held out: the corpus's last {cfg.valid * 100:g}% "
                     f"({len(trainer.held_ids):,} symbols), never trained on")
    if prepared.note:
        lines.append(prepared.note)
    return lines


def _next_step(trainer: Any) -> str:
    """Where the model is and the command that uses it, or how to keep it next time."""
    if trainer.saved is None:
        return ("the model was not saved: run with --save PATH to keep it, then "
                "`dualtape sample PATH` writes text from it")
    path, step = trainer.saved
    return (f"checkpoint: {path} (step {step}); write text from it with: dualtape sample "
            f"{shlex.quote(path)}")


def _on_disk(trainer: Any, before: str | None) -> str:
    """What a run that did not end cleanly leaves on disk: its last checkpoint, or the file
    it would have replaced, or nothing."""
    if trainer.saved is not None:
        return "saved {} at step {}".format(*trainer.saved)
    if before is not None:
        return f"{before} was left as it was"
    return "nothing was saved"


def _threads(args: argparse.Namespace, config: Any, ranks: int) -> threads.ThreadChoice:
    """The threads ``--threads`` asks for, for ``config``'s sizes on this machine, its cores
    shared by ``ranks`` ranks of this run."""
    option = threads.parse_threads(args.threads)
    return threads.choose_threads(option, config.hidden, config.batch,
                                  gates=threads.RECURRENT_GATES[config.cell],
                                  cores=threads.usable_cores(), ranks=ranks,
                                  load=threads.busy_cores() if option == threads.AUTO else None,
                                  can_limit=threads.threadpoolctl_installed())


def train_text(args: argparse.Namespace) -> int:
    """``dualtape train-text``: train (or resume), report, save and sample; the exit status
    says how the run ended (see the module's docstring). A run that saves holds its
    checkpoint's lock (``lock.py``) until it returns."""
    with contextlib.ExitStack() as held:
        return _train_text(args, held)


def _train_text(args: argparse.Namespace, held: contextlib.ExitStack) -> int:
    from .. import allocator
    from .lock import hold_run_lock
    from .loop import run_training
    from .model import TextError

    run: Runner = run_training
    memory = allocator.describe(allocator.keep_freed_memory())
    try:
        if args.distributed:
            from .distributed import prepare_distributed

            prepared, run = prepare_distributed(args, held)
            ranks = threads.ranks_on_this_host()
        else:
            hold_run_lock(args.save, args.resume, held)
            prepared, ranks = prepare(args), 1
        chosen = _threads(args, prepared.trainer.config, ranks)
        log = _open_log(args, prepared.trainer)
        ahead = _compile_ahead(prepared.trainer, chosen, args.distributed)
    except TextError as exc:
        return _fail("train-text", str(exc))
    except MemoryError:
        return _fail("train-text", "out of memory while building the model; use a smaller "
                     "--hidden, --batch or --seq-len")
    except KeyboardInterrupt:
        return INTERRUPTED
    except Exception as exc:  # a bug: still one line
        return _fail("train-text", f"while preparing the run: {type(exc).__name__}: {exc}")
    stop = StopRequest()
    output = Output(stop)
    logging = [] if log is None else [f"log: {log.path}, a row every {args.log_every} steps"]
    child, waits = ahead or (None, None)
    for line in [*_header(prepared, chosen), memory, *logging, *([waits] if waits else [])]:
        output.line(line)
    try:
        return _train(args, prepared, run, stop, output, chosen, log, child)
    finally:
        if log is not None:
            log.close()


COMPILE_NOTICE_S = 1.0
"""A compile of the CPU loops that takes longer than this is announced (and then timed)."""


def _compile_ahead(trainer: Any, chosen: threads.ThreadChoice, distributed: bool) -> Any:
    """Where numba's disk cache holds no compiled loops of the run's cell and dtype yet (a
    fresh install, a new numba or dualtape), a ``compile_ahead.Background`` child process
    compiling what the run calls (``rehearse``) while the first steps run on the ufunc loops,
    the ``(child, line saying so)``; else None: with ``DUALTAPE_BACKGROUND_COMPILE=0``, under
    ``--distributed`` (no child per rank), off numpy's compiled loops, or where the disk cache
    is not used, or when no child process starts. Started before the header, whose route then
    says the steps wait for it."""
    from ..kernels import compile_ahead, cpu_path, flush
    from ..switches import switched_on
    from .rehearse import CELL_MODULES, command

    cfg = trainer.config
    if (trainer.backend.name != "numpy" or distributed or cpu_path()[0] != "compiled"
            or not switched_on("DUALTAPE_BACKGROUND_COMPILE")
            or compile_ahead.cached(CELL_MODULES[cfg.cell], cfg.dtype) is not False):
        return None
    with flush.flushed():  # the ufunc loops flush too: its functions compile here, once
        pass
    try:
        child = compile_ahead.Background(command(trainer, chosen.count, chosen.overlap))
    except OSError:  # no process to be had (fork refused): wait for the compiler here
        return None
    cell = "GRU" if cfg.cell == "GRU" else "LSTM"
    return child, (f"numba's disk cache holds no CPU {cell} loops for {cfg.dtype} yet: they "
                   f"compile in a background process (pid {child.process.pid}) while the first "
                   "steps run on the ufunc loops, then the run switches to them (results differ "
                   "by float rounding; DUALTAPE_BACKGROUND_COMPILE=0 waits for the compiler "
                   "instead)")


def _ready_cpu_loops(trainer: Any, output: Output) -> None:
    """Compile the compiled CPU loops of the run's cell for its dtype (or load them from
    numba's disk cache) before the first step, and mark them cached
    (``compile_ahead.mark``); past ``COMPILE_NOTICE_S`` a line says so, instead of a silent
    pause, and a second how long it took. A compile that fails is left to the loops'
    self-check at the first step, which warns once and falls back to the ufunc loop."""
    import threading

    from ..kernels import compile_ahead, cpu_path
    from .rehearse import CELL_MODULES, warm_up

    if trainer.backend.name != "numpy" or cpu_path()[0] != "compiled":
        return
    cfg = trainer.config
    announced = threading.Event()

    def announce() -> None:
        announced.set()
        cell = "GRU" if cfg.cell == "GRU" else "LSTM"
        output.line(f"compiling the CPU {cell} loops for {cfg.dtype} (cached on disk "
                    "with those the first steps compile: later runs of this model and optimizer "
                    "load them) ...")

    notice = threading.Timer(COMPILE_NOTICE_S, announce)
    notice.daemon = True
    notice.start()
    try:
        seconds = warm_up(cfg.cell, cfg.dtype)
    except Exception:  # noqa: BLE001 - the self-check at the first step reports it
        return
    finally:
        notice.cancel()
        notice.join()
    compile_ahead.mark(CELL_MODULES[cfg.cell], cfg.dtype)
    if announced.is_set():
        output.line(f"compiled in {seconds:.1f} s")


def _open_log(args: argparse.Namespace, trainer: Any) -> Any:
    """The run's ``TrainingLog`` (``--log``, else beside the checkpoint), checked; None with
    ``--no-log`` or nowhere to put it."""
    from ..files import same_file
    from .model import TextError
    from .record import DEFAULT_SUFFIX, LogError, TrainingLog

    beside = args.save or args.resume
    if args.no_log and args.log is not None:
        raise TextError("give --log PATH or --no-log, not both")
    if args.no_log or (args.log is None and beside is None):
        return None
    path = args.log or beside + DEFAULT_SUFFIX
    if beside is not None and same_file(path, beside):
        raise TextError(f"--log {path} is the checkpoint --{'save' if args.save else 'resume'} "
                        f"{beside} writes; the save would overwrite the log: give another --log")
    try:
        return TrainingLog.open(path, resumed_step=trainer.step_count if args.resume else None,
                                replace=args.overwrite, follow=args.log is not None)
    except LogError as exc:
        raise TextError(str(exc)) from None


def _closing(log: Any, best: list | None, symbols: int) -> list[str]:
    """What the last lines say of the log and of the best held-out loss (``[step, nats]``,
    over every run of the checkpoint's), which above log2(``symbols``) bits/char is worse
    than a uniform guess and says so."""
    from .record import bits_per_char, worse_than_uniform

    lines = []
    if best is not None:
        step, nats = best
        lines.append(f"best held-out loss: {bits_per_char(nats):.3f} bits/char ({nats:.3f} "
                     f"nats) at step {step}{worse_than_uniform(nats, symbols)}")
    if log is not None and log.failed is not None:
        lines.append(f"log: {log.path} is incomplete: {log.failed}")
    elif log is not None and log.rows:
        lines.append(f"log: {log.path} (+{log.rows} rows); plot it with: dualtape plot "
                     f"{shlex.quote(log.path)}")
    return lines


def _train(args: argparse.Namespace, prepared: Prepared, run: Callable, stop: StopRequest,
           output: Output, chosen: threads.ThreadChoice, log: Any = None,
           child: Any = None) -> int:
    """The run itself, after the header: every way it ends, in one line and a status; the
    steps switch to the compiled loops when ``child`` (``_compile_ahead``) has filled the
    cache, else they are made ready first."""
    import numpy as np

    from .loop import RunLimits
    from .model import TextError
    from .trainer import DivergedError

    trainer = prepared.trainer
    limits = RunLimits(args.steps, args.time_limit, args.log_every, args.sample_every,
                       args.sample_chars, args.temperature, args.save or args.resume,
                       args.save_every, valid_every=args.valid_every, log=log)
    reporter = GuardedReporter.make(output, args.steps, args.time_limit, limits.clock.training)

    def failed(message: str) -> int:
        reporter.close()
        return _fail("train-text", f"{message}; {_on_disk(trainer, prepared.before)}")

    if child is not None:  # never under --distributed: run is run_training
        run = functools.partial(run, before_step=child.poll)
    try:  # numpy's overflow warnings are noise here: a diverged model is reported below
        with (threads.limited_threads(chosen.count, chosen.overlap), stop_on_signals(stop),
              np.errstate(all="ignore")):
            if child is None:
                _ready_cpu_loops(trainer, output)
            result = run(trainer, limits, reporter, stop)
    except DivergedError as exc:
        return failed(str(exc))
    except TextError as exc:  # the final save failed: it says what it tried; add what is kept
        reporter.close()
        if trainer.saved is not None:
            return _fail("train-text", "{}; the last checkpoint written is {} (step {})".format(
                exc, *trainer.saved))
        kept = "" if prepared.before is None else f"; {prepared.before} was left as it was"
        return _fail("train-text", f"{exc}{kept}")
    except MemoryError:
        return failed(f"out of memory at step {trainer.step_count}; use a smaller --hidden, "
                      "--batch or --seq-len")
    except KeyboardInterrupt:
        reporter.close()
        output.warn(f"aborted at step {trainer.step_count}; "
                    f"{_on_disk(trainer, prepared.before)}")
        output.warn(_next_step(trainer))
        return stop.exit_code
    except Exception as exc:  # a bug: still one line, after the rescue save
        return failed(f"the run failed at step {trainer.step_count}: "
                      f"{type(exc).__name__}: {exc}")
    reporter.close()
    if child is not None and (going_on := child.leave()) is not None:
        output.line(going_on)
    why = {"steps": "step limit", "time": "time limit", "interrupted": "interrupted"}
    loss = "" if reporter.loss is None else f", loss {reporter.loss:.3f}"
    output.line(f"stopped ({why[result.reason]}) at step {trainer.step_count}: {result.steps} "
                f"steps in {result.training_seconds:.1f} s of training{loss}, "
                f"{result.chars_per_second:,.0f} chars/s ({result.seconds:.1f} s of wall time "
                "with the held-out readings, samples and saves; the final save and sample "
                "follow)")
    for line in _closing(log, trainer.held_out.get("best"), len(trainer.vocab)):
        output.line(line)
    output.line(_next_step(trainer))
    if output.lost is not None:
        to_stderr(f"dualtape train-text: {stop.cause}; stopped at step {trainer.step_count}, "
                  f"{_on_disk(trainer, prepared.before)}")
    return stop.status or 0  # 0 only when nothing asked the run to stop


def sample_text(args: argparse.Namespace) -> int:
    """``dualtape sample``: write text from a checkpoint as it is drawn (Ctrl-C keeps what
    was printed)."""
    import numpy as np

    from .checkpoint import load_checkpoint
    from .config import CONFIG_RULES
    from .model import TextError, generate

    output = Output(StopRequest())
    try:
        check_options(args, {"chars": ("0 or more", non_negative),
                      "temperature": ("positive and finite", positive_finite),
                      "seed": CONFIG_RULES["seed"]})
        checkpoint = load_checkpoint(args.checkpoint, resolve(args.backend))
        pieces = generate(checkpoint.net, checkpoint.vocab, args.chars,
                          temperature=args.temperature, rng=np.random.default_rng(args.seed),
                          prime=args.prime)
        output.write(lambda: emit(args.prime, end=""))
        for piece in pieces:
            if output.lost is not None:
                break
            output.write(functools.partial(emit, piece, end=""))
        output.line("")
    except TextError as exc:
        return _fail("sample", str(exc))
    except FloatingPointError:
        output.line("")
        return _fail("sample", f"{args.checkpoint}: the network's outputs became NaN or infinite "
                     "while sampling; the checkpoint cannot be sampled")
    except KeyboardInterrupt:
        output.line("")
        return INTERRUPTED
    except Exception as exc:  # a bug: still one line
        output.line("")
        return _fail("sample", f"{type(exc).__name__}: {exc}")
    if output.lost is None or isinstance(output.lost, BrokenPipeError):
        return 0  # done, or the reader left (`| head`): it had what it wanted
    return _fail("sample", f"cannot write the text: {output.lost.strerror or output.lost}",
                 OUTPUT_LOST)
