"""What ``train-text`` shows and how it is stopped: reporters, stdout that may go away, signals.

Exit statuses of ``train-text`` (``EXIT_*``, documented in ``cli``): 0 a clean finish, 1 an
error, 2 a command line that does not parse (argparse), ``OUTPUT_LOST`` (74, ``EX_IOERR``)
when stdout went away (a closed pipe, a full disk, a hung-up terminal), 128 + N after signal
N (129 SIGHUP, 130 SIGINT, 143 SIGTERM).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

UNKNOWN_SIZE = {"ncols": 80, "nrows": 24}
"""The bar's size on a terminal that reports none (0 columns or rows), where tqdm, asked to
follow the terminal's width, would draw nothing."""
INTERRUPTED = 128 + signal.SIGINT
OUTPUT_LOST = 74
"""Exit status when stdout could not be written (``EX_IOERR`` of sysexits.h)."""
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def emit(text: str, end: str = "\n") -> None:
    """Print and flush, even where the console's encoding lacks some characters."""
    try:
        sys.stdout.write(text + end)
    except UnicodeEncodeError:
        encoding = sys.stdout.encoding or "ascii"
        sys.stdout.write((text + end).encode(encoding, "replace").decode(encoding))
    sys.stdout.flush()


def to_stderr(line: str) -> None:
    """One line on stderr; nothing when stderr is gone too."""
    with contextlib.suppress(OSError, ValueError):
        print(line, file=sys.stderr, flush=True)


def silence_stdout() -> None:
    """Send stdout to the null device, its descriptor too, so that later writes and the flush
    at exit neither fail nor print "Exception ignored" (Python's advice for a closed pipe)."""
    try:
        descriptor = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # a stream without a descriptor, or closed
        sys.stdout = open(os.devnull, "w")  # for the rest of the process
        return
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, descriptor)
    finally:
        os.close(null)


class StopRequest:
    """Whether the run was asked to stop, and its exit status. The first cause is kept; a
    Ctrl-C after any request aborts (``KeyboardInterrupt``), repeated SIGTERM or SIGHUP do
    not."""

    def __init__(self) -> None:
        self.status: int | None = None
        self.cause = ""

    def __call__(self) -> bool:
        return self.status is not None

    def ask(self, status: int, cause: str) -> None:
        """Ask the run to stop after its step, with exit ``status`` (kept if already asked)."""
        if self.status is None:
            self.status, self.cause = status, cause

    def signal(self, signum: int) -> None:
        """A stop signal: ask to stop with status 128 + ``signum``; a second Ctrl-C aborts."""
        if self.status is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.ask(128 + signum, signal.Signals(signum).name)

    @property
    def exit_code(self) -> int:
        """The status asked for, or 130 (a Ctrl-C) when none was."""
        return self.status if self.status is not None else INTERRUPTED


@contextlib.contextmanager
def stop_on_signals(request: StopRequest) -> Iterator[StopRequest]:
    """While inside, Ctrl-C, SIGTERM and SIGHUP ask ``request`` to stop (see ``StopRequest``);
    the previous handlers come back after. Off the main thread, signals are left alone."""
    if threading.current_thread() is not threading.main_thread():
        yield request
        return
    previous = {sig: signal.signal(sig, lambda signum, frame: request.signal(signum))
                for sig in STOP_SIGNALS}
    try:
        yield request
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


class Output:
    """The run's stdout. The first write that fails (a closed pipe, a full disk, a terminal
    that hung up) asks ``stop`` to stop with ``OUTPUT_LOST`` and sends stdout to the null
    device; warnings then go to stderr."""

    def __init__(self, stop: StopRequest) -> None:
        self.stop = stop
        self.lost: OSError | None = None

    def write(self, action: Callable[[], Any]) -> None:
        """Run ``action`` (which writes to stdout) unless stdout is lost; a failure loses it."""
        if self.lost is not None:
            return
        try:
            action()
        except OSError as exc:
            self.lost = exc
            silence_stdout()
            self.stop.ask(OUTPUT_LOST, f"stdout was lost ({exc.strerror or exc})")

    def line(self, text: str) -> None:
        """Print a line on stdout while it lasts."""
        self.write(lambda: emit(text))

    def warn(self, text: str) -> None:
        """A line the user must see: on stdout, or on stderr once stdout is lost."""
        self.line(text)
        if self.lost is not None:
            to_stderr(text)


class PlainReporter:
    """Progress as a line at each loss reading (every ``--log-every`` steps; for logs and
    pipes). It remembers the last reading."""

    def __init__(self) -> None:
        self.loss: float | None = None
        self.speed = 0.0

    def advance(self) -> None:
        """Nothing to do per step."""

    def remember(self, step: int, loss: float, chars_per_second: float,
                 valid_loss: float | None) -> str:
        """Keep the reading; the line that shows it."""
        self.loss, self.speed = loss, chars_per_second
        return reading_line(step, loss, chars_per_second, valid_loss)

    def progress(self, step: int, loss: float, chars_per_second: float,
                 valid_loss: float | None = None) -> None:
        """Print the reading."""
        emit(self.remember(step, loss, chars_per_second, valid_loss))

    def text(self, message: str) -> None:
        """Print a message."""
        emit(message)

    def warn(self, message: str) -> None:
        """Print a warning."""
        self.text(message)

    def close(self) -> None:
        """Nothing to close."""


class BarReporter(PlainReporter):
    """A tqdm progress bar with the loss and speed; messages are written above it. It counts
    steps (of ``steps`` when given) or, with a ``time_limit``, shows the time used of the
    limit and the time left, as ``clock`` counts it (train-text's: seconds of training)."""

    def __init__(self, tqdm: Any, steps: int | None, time_limit: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.tqdm, self.time_limit, self.clock = tqdm, time_limit, clock
        self.started, self.done, self.reading = clock(), 0, ""
        shape = bar_shape()
        if time_limit is None:
            self.bar = tqdm(total=steps, unit=" steps", file=sys.stdout, **shape)
        else:
            self.bar = tqdm(total=time_limit, file=sys.stdout, **shape,
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

    def progress(self, step: int, loss: float, chars_per_second: float,
                 valid_loss: float | None = None) -> None:
        """Print the reading above the bar and show it on the bar."""
        line = self.remember(step, loss, chars_per_second, valid_loss)
        self.reading = f", loss {loss:.3f}, {chars_per_second:,.0f} chars/s"
        if self.time_limit is None:
            self.bar.set_postfix_str(self.reading[2:], refresh=False)
        self.text(line)

    def text(self, message: str) -> None:
        """Print above the bar."""
        try:
            self.tqdm.write(message, file=sys.stdout)
        except UnicodeEncodeError:
            self.bar.clear()
            emit(message)

    def close(self) -> None:
        """Leave the bar on screen."""
        self.bar.close()


def make_reporter(steps: int | None, time_limit: float | None,
                  clock: Callable[[], float] = time.monotonic) -> PlainReporter:
    """A progress bar on a terminal (with tqdm installed; ``clock`` the bar's for a
    ``time_limit``), plain lines elsewhere (and where tqdm refuses the bar: the bar is a
    nicety; a failed write to stdout is raised)."""
    if not sys.stdout.isatty():
        return PlainReporter()
    try:
        from tqdm import tqdm
    except ImportError:
        return PlainReporter()
    try:
        return BarReporter(tqdm, steps, time_limit, clock)
    except OSError:
        raise
    except Exception:
        return PlainReporter()


def reading_line(step: int, loss: float, chars_per_second: float,
                 valid_loss: float | None = None) -> str:
    """A loss reading as one line: the step, the training loss (nats/char), the speed, and
    the held-out loss in nats and bits per character when one was measured."""
    line = f"step {step:>6}  loss {loss:.3f}  {chars_per_second:,.0f} chars/s"
    if valid_loss is None:
        return line
    from .record import bits_per_char  # the standard library alone, like this module

    return f"{line}  held-out {valid_loss:.3f} ({bits_per_char(valid_loss):.3f} bits/char)"


def bar_shape() -> dict[str, Any]:
    """tqdm's size arguments: follow the terminal's width, or ``UNKNOWN_SIZE`` when stdout
    reports no size."""
    try:
        size = os.get_terminal_size(sys.stdout.fileno())
    except (AttributeError, OSError, ValueError):
        size = None
    if size is None or size.columns < 2 or size.lines < 2:
        return dict(UNKNOWN_SIZE)
    return {"dynamic_ncols": True}


class GuardedReporter:
    """A reporter whose writes go through ``output``: a lost stdout stops the run instead of
    raising, and warnings then reach stderr."""

    def __init__(self, reporter: PlainReporter, output: Output) -> None:
        self.reporter, self.output = reporter, output

    @classmethod
    def make(cls, output: Output, steps: int | None, time_limit: float | None,
             clock: Callable[[], float] = time.monotonic) -> GuardedReporter:
        """``make_reporter``'s reporter, guarded; plain lines when making a bar already
        finds stdout gone."""
        made: list[PlainReporter] = []
        output.write(lambda: made.append(make_reporter(steps, time_limit, clock)))
        return cls(made[0] if made else PlainReporter(), output)

    @property
    def loss(self) -> float | None:
        """The last loss read."""
        return self.reporter.loss

    def advance(self) -> None:
        """One step done."""
        self.output.write(self.reporter.advance)

    def progress(self, step: int, loss: float, chars_per_second: float,
                 valid_loss: float | None = None) -> None:
        """A loss reading."""
        self.output.write(lambda: self.reporter.progress(step, loss, chars_per_second,
                                                         valid_loss))

    def text(self, message: str) -> None:
        """A message or a sample."""
        self.output.write(lambda: self.reporter.text(message))

    def warn(self, message: str) -> None:
        """A warning, on stderr once stdout is lost."""
        self.output.write(lambda: self.reporter.warn(message))
        if self.output.lost is not None:
            to_stderr(message)

    def close(self) -> None:
        """Close the reporter (a bar stays on screen)."""
        self.output.write(self.reporter.close)
