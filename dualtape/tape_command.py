"""The ``dualtape tape`` command: ``tape_report`` of a saved network (a ``dualtape.save`` file or
a train-text checkpoint, which is one), printed, and with ``--plot`` drawn as one bar per layer.

A file is read by ``read_call`` into the ``TrainingCall`` its training makes: a plain file's
network as saved; a train-text checkpoint's (the reader ``dualtape.cli`` gives, from
``text/tape.py``) the call train-text makes, the layers before the final Softmax fed the
windows' symbol ids, scored by ``softmax_cross_entropy``, at the checkpoint's windows and with
its optimizer unless ``--seq-len``, ``--batch`` or ``--optimizer`` say otherwise.

Each problem is one line on stderr and exit status 1: a missing, unreadable or corrupt file,
a size that is not an integer >= 1, ``--seq-len`` for a feed-forward network, a tape policy
that is not ``full``, ``sqrt`` or k, a plot without matplotlib. The optimizer whose state is
counted is ``--optimizer`` (default: the file's, else ``sgd``: SGD with momentum, one array per
parameter; ``adam``: two; ``none``); the measured training call's loss is ``--loss``.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .backend import free_memory, get_backend
from .files import check_destination, write_atomically
from .io import load
from .losses import LOSSES
from .network import Network
from .recurrent import RecurrentNetwork
from .tape_memory import least_bytes, probe_bytes
from .tape_report import OPTIMIZER_SLOTS, TapeReport, tape_report


@dataclass(frozen=True)
class TrainingCall:
    """What a saved file's training runs: ``net`` (the network a training call takes), its
    ``loss`` (None: ``tape_report``'s default), and the ``seq_len``, ``batch`` and
    ``optimizer`` (a name or an optimizer) its training used (None: not recorded); ``ids``:
    examples are symbol ids in place of one-hot rows; ``note``: a line saying so (empty for
    a network reported as saved)."""

    net: Network | RecurrentNetwork
    ids: bool = False
    loss: str | None = None
    seq_len: int | None = None
    batch: int | None = None
    optimizer: Any = None
    note: str = ""


def read_network(path: str) -> TrainingCall:
    """The network ``dualtape.save`` wrote to ``path``, on numpy, reported as saved."""
    return TrainingCall(load(path, backend="numpy"))


def register(commands: Any, read_call: Callable[[str], TrainingCall] = read_network) -> None:
    """Add ``tape`` to the ``dualtape`` subcommands; ``read_call`` reads a file's
    ``TrainingCall`` (``OSError``, ``ValueError`` in one line)."""
    p = commands.add_parser(
        "tape", help="what a saved network's tape keeps, layer by layer",
        description="Print what the tape of a saved network (a dualtape file or a train-text "
        "checkpoint) keeps for one batch, layer by layer, what a checkpointed tape would keep "
        "instead, the parameters' and optimizer state's bytes, and the measured peak of one "
        "training call.")
    p.add_argument("checkpoint", metavar="CHECKPOINT", help="a file dualtape.save wrote")
    p.add_argument("--seq-len", metavar="T", help="steps per sequence (recurrent networks; a "
                   "train-text checkpoint's default: its windows' length)")
    p.add_argument("--batch", metavar="B",
                   help="examples per batch (default 1; a train-text checkpoint's: its batch)")
    p.add_argument("--shape", metavar="C,H,W",
                   help="one example's shape, for a network whose input has free axes")
    p.add_argument("--tape", default="sqrt", metavar="POLICY",
                   help="the checkpointed tape to compare: sqrt (default), k steps, or full")
    p.add_argument("--optimizer", choices=sorted(OPTIMIZER_SLOTS),
                   help="whose state to count: sgd (with momentum), adam, none (default: a "
                   "train-text checkpoint's own, else sgd)")
    p.add_argument("--loss", choices=sorted(LOSSES),
                   help="the loss of the measured training call (default: softmax_cross_entropy "
                   "for a train-text checkpoint, as it trains; cross_entropy after a final "
                   "Softmax; else squared_error)")
    p.add_argument("--plot", metavar="FILE.png", help="also draw one bar per layer (matplotlib)")
    p.set_defaults(run=tape_command, read_call=read_call)


def _fail(message: str) -> int:
    print(f"dualtape tape: error: {message}", file=sys.stderr, flush=True)
    return 1


def _size(option: str, text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"{option} must be an integer >= 1, got {text!r}")
    return value


def _gib(size: int) -> str:
    return f"{size / 2**30:,.1f} GiB"


def _probe_words(steps: int | None, batch: int) -> str:
    """``1,000 steps x batch 32``, or ``batch 32`` without steps, for a refusal."""
    return f"batch {batch:,}" if steps is None else f"{steps:,} steps x batch {batch:,}"


def tape_command(args: argparse.Namespace) -> int:
    """Print the report of ``args.checkpoint``; 1 with a one-line error on a problem."""
    try:
        batch = None if args.batch is None else _size("--batch", args.batch)
        seq_len = None if args.seq_len is None else _size("--seq-len", args.seq_len)
        example = None if args.shape is None else tuple(
            _size("--shape", s) for s in args.shape.split(","))
        policy: str | int = args.tape
        if args.tape not in ("full", "sqrt"):
            policy = _size("--tape", args.tape)
    except ValueError as exc:
        return _fail(str(exc).replace("--tape must be", "--tape must be full, sqrt or"))
    if args.plot is not None:
        if importlib.util.find_spec("matplotlib") is None:
            return _fail("--plot needs matplotlib: pip install 'dualtape[bench]'")
        try:
            check_destination(args.plot)
        except OSError as exc:
            return _fail(f"cannot write {args.plot}: {exc.strerror or exc}")
    try:
        call = args.read_call(args.checkpoint)
    except OSError as exc:
        return _fail(f"cannot read {args.checkpoint}: {exc.strerror or exc}")
    except ValueError as exc:
        return _fail(str(exc))
    net = call.net
    recurrent = isinstance(net, RecurrentNetwork)
    seq_len = call.seq_len if seq_len is None and recurrent else seq_len
    batch = batch or call.batch or 1
    if recurrent and seq_len is None:
        return _fail(f"{args.checkpoint} is a RecurrentNetwork: give --seq-len T")
    if not recurrent and seq_len is not None:
        return _fail(f"{args.checkpoint} is a Network (no sequence): drop --seq-len")
    if example is None and call.ids:
        example = ()
    if example is None and (net.input_shape is None
                            or any(not isinstance(s, int) for s in net.input_shape)):
        return _fail(f"{args.checkpoint}: the network's input {net.input_shape} has free axes; "
                     "give one example's shape with --shape")
    leading = (seq_len, batch) if recurrent else (batch,)
    shape = (*leading, *(net.input_shape if example is None else example))
    optimizer = args.optimizer or call.optimizer or "sgd"
    options = ["--seq-len", "--batch", "--tape"] if recurrent else ["--batch"]
    options += ["--shape"] if args.shape is not None else []
    smaller = " or ".join([", ".join(options[:-1]), options[-1]] if options[1:] else options)
    try:
        free = free_memory(net.backend or get_backend())
        for estimate, *what in ((least_bytes, "more than", "its input alone"),
                                (probe_bytes, "about", "its tape and temporaries")):
            need = estimate(net, shape, policy if recurrent else "full")
            if free is not None and need.bytes > free:
                return _fail(f"measuring this report needs {what[0]} {_gib(need.bytes)} (a "
                             f"training call on {_probe_words(need.steps, batch)}: {what[1]}) "
                             f"but this machine has {_gib(free)} available; give a smaller "
                             f"{smaller}")
        report = tape_report(net, shape, tape=policy if recurrent else "sqrt",
                             optimizer=optimizer, loss=args.loss or call.loss)
    except (ValueError, TypeError) as exc:
        return _fail(str(exc))
    except MemoryError:
        return _fail(f"out of memory while measuring this report; give a smaller {smaller}")
    if call.note:
        print(call.note)
    print(report)
    if args.plot is not None:
        try:
            write_plot(args.plot, report)
        except (OSError, ValueError) as exc:
            return _fail(f"cannot write {args.plot}: {getattr(exc, 'strerror', None) or exc}")
        print(f"wrote {args.plot}")
    return 0


def write_plot(path: str, report: TapeReport) -> None:
    """One bar per layer (its full tape's bytes; beside it, with a checkpointed tape, what
    that keeps of the layer), written to ``path`` as a PNG, atomically."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [f"{layer.index} {layer.layer}" for layer in report.layers]
    fig, ax = plt.subplots(figsize=(max(6.0, 0.9 * len(names) + 2), 4.5))
    try:
        places = range(len(names))
        width = 0.4 if report.segments else 0.8
        ax.bar([p - width / 2 * bool(report.segments) for p in places],
               [layer.bytes / 2**20 for layer in report.layers], width, label="full tape")
        if report.segments:
            ax.bar([p + width / 2 for p in places],
                   [(layer.checkpoint_bytes + layer.segment_bytes) / 2**20
                    for layer in report.layers], width,
                   label=f"tape={report.policy!r}, held in backward")
            ax.legend()
        ax.set_xticks(list(places), names, rotation=30, ha="right", fontsize=8)
        ax.set_ylabel("MiB")
        sequence = f"T={report.seq_len}, " if report.seq_len is not None else ""
        ax.set_title(f"tape per layer ({sequence}batch {report.batch}, {report.backend})")
        fig.tight_layout()
        write_atomically(path, lambda f: fig.savefig(f, format="png", dpi=110))
    finally:
        plt.close(fig)
