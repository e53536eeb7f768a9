"""The ``dualtape`` command: ``info``, ``bench``, ``train-text``, ``sample``, ``plot``, ``tape``."""

from __future__ import annotations

import argparse
import os
import platform
import sys
from collections.abc import Sequence

import numpy as np

from . import __version__, kernels, tape_command
from .backend import (
    FLOAT_DTYPES,
    KNOWN_BACKENDS,
    BackendUnavailable,
    available_backends,
    resolve_backend,
)
from .benchmarks import cli as bench_cli
from .kernels import blas, numba_lstm
from .switches import check_switches
from .text import cli as text_cli
from .text import plot as text_plot
from .text import tape as text_tape
from .text.console import INTERRUPTED, OUTPUT_LOST, silence_stdout, to_stderr


def info(args: argparse.Namespace) -> int:
    """Print versions and which backends work here, and why the others do not."""
    print(f"dualtape {__version__} on Python {platform.python_version()} ({platform.machine()})")
    print(f"numpy {np.__version__}")
    usable = available_backends()
    for name in KNOWN_BACKENDS:
        try:
            chosen = resolve_backend(name)
        except BackendUnavailable as exc:
            print(f"  {name:<17} unavailable: {exc}")
            continue
        mark = "available" if name in usable else "unavailable"
        print(f"  {name:<17} {mark}, default device {chosen.device}")
    print(f"auto selects: {resolve_backend('auto').name}")
    print(f"LSTM loops on numpy: {_cpu_loops()}")
    print(f"train-text's step on numpy: {_main_job_route()}")
    if blas.available():
        print("SGD on numpy: one BLAS pass per large parameter (numpy's OpenBLAS)")
    else:
        print("SGD on numpy: two numpy passes per parameter (numpy bundles no OpenBLAS here)")
    return 0


def _cpu_loops() -> str:
    """Which LSTM loop numpy runs; for the compiled one, how long it took to be ready."""
    path, why = kernels.cpu_path()
    if path != "compiled":
        return f"{'ufunc loop' if path == 'ufuncs' else 'generic code'} ({why})"
    try:
        seconds = sum(numba_lstm.warm_up(dtype) for dtype in FLOAT_DTYPES)
    except Exception as exc:  # noqa: BLE001 - a compile that fails even without the cache
        return (f"compiled (numba {numba_lstm.version()}), but it fails to compile here even "
                f"afresh ({type(exc).__name__}: {exc}); its first use falls back to the "
                "ufunc loop with a warning")
    how = ("loaded from the disk cache" if numba_lstm.loaded_from_cache() else
           "compiled now and cached on disk: later runs load it")
    return f"compiled (numba {numba_lstm.version()}; ready in {seconds:.1f} s, {how})"


def _main_job_route() -> str:
    """The route of train-text's step with its defaults on numpy (``dualtape.route``); the
    model code imported here, so that importing ``dualtape.cli`` stays quick."""
    from .text.config import TrainConfig
    from .text.model import read_corpus
    from .text.trainer import TextTrainer

    trainer = TextTrainer.new(read_corpus(None), TrainConfig(), resolve_backend("numpy"))
    return str(trainer.route()).split(": ", 1)[1]


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand registered."""
    parser = argparse.ArgumentParser(
        prog="dualtape", description="Grenade-style neural networks on numpy, CuPy and PyTorch."
    )
    parser.add_argument("--version", action="version", version=f"dualtape {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("info", help="versions and available backends").set_defaults(run=info)
    bench_cli.register(commands)
    text_cli.register(commands)
    text_plot.register(commands)
    tape_command.register(commands, text_tape.training_call)
    return parser


def environment_problem() -> str | None:
    """What is wrong with the environment variables dualtape reads (``DUALTAPE_JIT``,
    ``DUALTAPE_FUSED``: ``switches``; ``DUALTAPE_BACKEND``: a backend's name or auto), in one
    line; None when every value is usable. Only the backend's name is checked: whether it
    works here is said where it is used."""
    try:
        check_switches()
    except ValueError as exc:
        return str(exc)
    backend = os.environ.get("DUALTAPE_BACKEND", "")
    if backend and backend not in ("auto", *KNOWN_BACKENDS):
        return (f"environment variable DUALTAPE_BACKEND={backend!r}: use one of auto, "
                f"{', '.join(KNOWN_BACKENDS)}, or leave it unset")
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``dualtape`` console script. A bad environment value, an error no
    subcommand caught and Ctrl-C are each one line on stderr (or none, for Ctrl-C) and a
    non-zero status, never a traceback."""
    args = build_parser().parse_args(argv)
    fail = f"dualtape {args.command}: error:"
    problem = environment_problem()
    if problem is not None:
        to_stderr(f"{fail} {problem}")
        return 1
    try:
        return args.run(args)
    except BrokenPipeError:  # e.g. `dualtape info | head`: the reader left, nothing to report
        silence_stdout()  # so the flush at exit neither fails nor prints
        # train-text handles its own lost stdout; should one escape, it must not read as done
        return OUTPUT_LOST if args.command == "train-text" else 0
    except KeyboardInterrupt:
        return INTERRUPTED
    except MemoryError:
        to_stderr(f"{fail} out of memory")
        return 1
    except Exception as exc:  # a bug: still one line
        to_stderr(f"{fail} {type(exc).__name__}: {exc}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
