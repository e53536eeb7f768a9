"""The training record of ``train-text --log PATH``: one row per loss reading, CSV or JSON Lines.

A row is written every ``--log-every`` steps and at the end of a run, with the columns
``COLUMNS``:

- ``step``: the model's step count (continuing across resumes, as the checkpoint's does);
- ``seconds``: seconds of training, as ``--time-limit`` counts them (``loop.TrainingClock``:
  the held-out readings', samples' and saves' left out), summed over resumes: a resumed run
  continues from the ``seconds`` of the log's last row at or before the step it resumed from;
- ``train_loss``: the mean cross entropy per character, in nats, of the training steps since
  the previous row (what the console prints);
- ``valid_loss``: the loss on held-out text, nats per character, and ``valid_bpc``: the same
  in bits per character (``valid_loss / ln 2``); empty (CSV) or null (JSON) when no held-out
  loss was measured;
- ``chars_per_s``: training characters per second since the previous row (all ranks of a
  distributed run; sampling and saving left out);
- ``learning_rate``: the rate of the row's last step (``--rate``, as ``--schedule`` sets it).

The format follows the name: ``.csv`` (a header line of the column names, then the rows;
empty fields where a value is missing) or ``.jsonl`` (one JSON object a line with those keys,
null where a value is missing or not finite). Any other name is refused.

A kill -9 loses at most the row being written: each row is one complete line written by one
``os.write`` on an ``O_APPEND`` descriptor, with no buffer in the process (rows are not
fsynced: after a power cut the system may have kept fewer). A file that does not end in a
newline (a write cut short by a full disk) gets one before the next row; readers skip lines
that do not parse. A row that cannot be written (a full disk, a removed drive) warns once and
logging stops: training and checkpoints go on.

An existing log must be a train-text log of the same format (its first line the CSV header,
or a JSON object with exactly these keys); anything else, and a folder, FIFO or device, is
refused before training. A resumed run appends. A new run refuses a log that already holds
rows unless told to replace it (``--overwrite``), and then empties it at its first row. A
resumed run may repeat steps that the previous run logged after its last checkpoint:
``read_log`` lets the later rows replace those (a row whose step is not past the previous
row's drops the earlier rows from that step on). The log named by ``--log`` is followed
through a symbolic link (as ``--save`` is); the default one beside the checkpoint never is.
"""

from __future__ import annotations

import errno
import json
import math
import os
import stat
from pathlib import Path
from typing import NamedTuple

from ..files import file_kind, open_regular

COLUMNS = ("step", "seconds", "train_loss", "valid_loss", "valid_bpc", "chars_per_s",
           "learning_rate")
FORMATS = {".csv": "csv", ".jsonl": "jsonl"}
"""The log formats, by the name's suffix."""
CSV_HEADER = ",".join(COLUMNS)
DEFAULT_SUFFIX = ".log.csv"
"""The default log is the checkpoint's path with this added: ``model.npz.log.csv``."""
HEADER_BYTES = 4096
"""How much of a file is read to tell whether it is a log (its first line)."""


def bits_per_char(nats: float) -> float:
    """A loss in nats per character as bits per character (nats / ln 2)."""
    return nats / math.log(2)


def worse_than_uniform(nats: float, symbols: int) -> str:
    """``""`` for a loss of ``nats`` per character at most a uniform guess's over ``symbols``
    symbols (log2 ``symbols`` bits/char); else the remark that says it is worse."""
    if bits_per_char(nats) <= math.log2(symbols):
        return ""
    return (f": worse than a uniform guess over its {symbols} symbols "
            f"({math.log2(symbols):.3f} bits/char)")


class LogError(ValueError):
    """A log that cannot be used: its name, its kind, or what it holds; the message is one line."""


class Row(NamedTuple):
    """One reading, as the log holds it (``valid_loss`` None when none was measured)."""

    step: int
    seconds: float
    train_loss: float
    valid_loss: float | None
    chars_per_s: float
    learning_rate: float

    @property
    def valid_bpc(self) -> float | None:
        """The held-out loss in bits per character."""
        return None if self.valid_loss is None else bits_per_char(self.valid_loss)

    @property
    def train_bpc(self) -> float:
        """The training loss in bits per character."""
        return bits_per_char(self.train_loss)


def log_format(path: str | os.PathLike) -> str:
    """``"csv"`` or ``"jsonl"`` from ``path``'s suffix; ``LogError`` for any other name."""
    suffix = Path(path).suffix.lower()
    if suffix not in FORMATS:
        raise LogError(f"{path}: a log's name must end in {' or '.join(FORMATS)}")
    return FORMATS[suffix]


def _number(value: float | None, digits: int) -> float | None:
    return None if value is None or not math.isfinite(value) else float(f"{value:.{digits}g}")


def encode(row: Row, fmt: str) -> bytes:
    """``row`` as one line of the ``fmt`` log, its newline included."""
    values = [row.step, round(row.seconds, 3), _number(row.train_loss, 9),
              _number(row.valid_loss, 9), _number(row.valid_bpc, 9),
              round(row.chars_per_s, 1), _number(row.learning_rate, 9)]
    if fmt == "jsonl":
        return (json.dumps(dict(zip(COLUMNS, values, strict=True))) + "\n").encode()
    return (",".join("" if v is None else str(v) for v in values) + "\n").encode()


def header(fmt: str) -> bytes:
    """What a new log of ``fmt`` starts with (JSON Lines: nothing)."""
    return (CSV_HEADER + "\n").encode() if fmt == "csv" else b""


def _fields(line: str, fmt: str) -> list:
    """The values of one line in ``COLUMNS`` order; ``ValueError`` when it does not parse."""
    if fmt == "jsonl":
        record = json.loads(line)
        if not isinstance(record, dict) or sorted(record) != sorted(COLUMNS):
            raise ValueError("not a row")
        return [record[c] for c in COLUMNS]
    fields = line.split(",")
    if len(fields) != len(COLUMNS):
        raise ValueError("not a row")
    return [None if f == "" else float(f) for f in fields]


def decode(line: str, fmt: str) -> Row | None:
    """The row one line holds; None when it does not parse (a line cut short)."""
    try:
        step, seconds, train, valid, _, speed, rate = _fields(line, fmt)
        if step is None or float(step) != int(step) or step < 0:
            return None
        return Row(int(step), float(seconds), float(train),
                   None if valid is None else float(valid), float(speed), float(rate))
    except (ValueError, TypeError, OverflowError, RecursionError):  # RecursionError: nesting
        return None


def _is_header(first: str, fmt: str) -> bool:
    if fmt == "csv":
        return first == CSV_HEADER
    return decode(first, fmt) is not None


class Log(NamedTuple):
    """What ``read_log`` read: the rows of the run's history and how many lines it skipped."""

    path: str
    rows: list[Row]
    skipped: int


def read_log(path: str | os.PathLike, *, follow: bool = True) -> Log:
    """The rows of the log at ``path``, later rows replacing those they repeat (see the module
    docstring); lines that do not parse are skipped and counted. ``LogError`` in one line when
    it cannot be read, is not a regular file, or is not a train-text log. Without ``follow``,
    a symbolic link at ``path`` is refused."""
    fmt = log_format(path)
    if not follow and os.path.islink(path):
        raise LogError(f"{path} is a symbolic link; give its target as --log to log there")
    try:
        handle, _ = open_regular(path)
    except OSError as exc:
        raise LogError(f"cannot read {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise LogError(str(exc)) from None
    with handle:
        start = handle.read(HEADER_BYTES)
        first = start.split(b"\n", 1)[0].decode("utf-8", "replace").rstrip("\r")
        if start and not _is_header(first, fmt):
            what = f"its first line is not {CSV_HEADER}" if fmt == "csv" else \
                f"its first line is not a JSON object of {', '.join(COLUMNS)}"
            raise LogError(f"{path} is not a train-text log ({what})")
        text = (start + handle.read()).decode("utf-8", "replace")
    lines = text.splitlines()[1 if fmt == "csv" else 0:]
    rows: list[Row] = []
    skipped = 0
    for line in lines:
        row = decode(line, fmt)
        if row is None:
            skipped += 1
            continue
        while rows and rows[-1].step >= row.step:  # a resumed run repeats these steps
            rows.pop()
        rows.append(row)
    return Log(str(path), rows, skipped)


class TrainingLog:
    """A log being written: checked when made (``open``), the file opened at the first row.

    ``write`` never raises: the first failure is returned as a warning and logging stops."""

    def __init__(self, path: str, fmt: str, *, seconds_before: float, empty_first: bool,
                 follow: bool) -> None:
        self.path, self.fmt, self.follow = path, fmt, follow
        self.seconds_before = seconds_before
        """Seconds of training the log holds before this run (added to each row's)."""
        self.empty_first = empty_first
        self.rows = 0
        """Rows written by this run."""
        self.failed: str | None = None
        """Why logging stopped, once it has."""
        self._fd: int | None = None

    @classmethod
    def open(cls, path: str | os.PathLike, *, resumed_step: int | None = None,
             replace: bool = False, follow: bool = True) -> TrainingLog:
        """A log for a run at ``path``, checked: a new file, an empty one, or (when resuming
        at ``resumed_step``, or to ``replace`` one) a train-text log of the same format.
        ``LogError`` in one line otherwise."""
        path = str(path)
        fmt = log_format(path)
        try:
            found = os.stat(path) if follow else os.lstat(path)
        except FileNotFoundError:
            found = None
        except OSError as exc:
            raise LogError(f"cannot use log {path}: {exc.strerror or exc}") from None
        if found is None or (stat.S_ISREG(found.st_mode) and found.st_size == 0):
            _check_folder(path)
            return cls(path, fmt, seconds_before=0.0, empty_first=False, follow=follow)
        if stat.S_ISLNK(found.st_mode):
            raise LogError(f"the log {path} is a symbolic link; refusing to follow it (give "
                           "--log with its target to log there)")
        if not stat.S_ISREG(found.st_mode):
            raise LogError(f"the log {path} is {file_kind(found.st_mode)}, not a regular file")
        if not os.access(path, os.W_OK):
            raise LogError(f"cannot use log {path}: the file is read-only")
        rows = read_log(path, follow=follow).rows
        if resumed_step is None and rows and not replace:
            raise LogError(f"the log {path} holds another run's record (up to step "
                           f"{rows[-1].step}); choose another --log, continue that run with "
                           "--resume, or pass --overwrite to start it afresh")
        earlier = [r.seconds for r in rows if resumed_step is not None and r.step <= resumed_step]
        return cls(path, fmt, seconds_before=earlier[-1] if earlier else 0.0,
                   empty_first=resumed_step is None, follow=follow)

    def write(self, row: Row) -> str | None:
        """Append ``row`` (its seconds counted from this run's start); None when written, a
        warning the first time it fails (nothing is written after that)."""
        if self.failed is not None:
            return None
        try:
            if self._fd is None:
                self._fd = self._open()
            line = encode(row._replace(seconds=row.seconds + self.seconds_before), self.fmt)
            if os.write(self._fd, line) != len(line):
                raise OSError(errno.ENOSPC, "the row was cut short (a full disk?)")
        except (OSError, LogError) as exc:
            self.failed = getattr(exc, "strerror", None) or str(exc)
            self.close()
            return (f"warning: cannot write the log {self.path}: {self.failed}; logging stops "
                    "here, training and checkpoints go on")
        self.rows += 1
        return None

    def _open(self) -> int:
        """The log's descriptor for appending, its header written or an unfinished last line
        ended; a file found to be something other than a log is refused (``LogError``)."""
        flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | getattr(os, "O_NONBLOCK", 0) | \
            getattr(os, "O_CLOEXEC", 0) | (0 if self.follow else getattr(os, "O_NOFOLLOW", 0))
        fd = os.open(self.path, flags, 0o666)
        try:
            found = os.fstat(fd)
            if not stat.S_ISREG(found.st_mode):
                raise LogError(f"it became {file_kind(found.st_mode)}")
            start = os.pread(fd, HEADER_BYTES, 0)
            first = start.split(b"\n", 1)[0].decode("utf-8", "replace")
            if start and not _is_header(first, self.fmt):
                raise LogError("it is no longer a train-text log")
            if self.empty_first and start:
                os.ftruncate(fd, 0)
                found = os.fstat(fd)
            if found.st_size == 0:
                os.write(fd, header(self.fmt))
            elif os.pread(fd, 1, found.st_size - 1) != b"\n":
                os.write(fd, b"\n")  # a line cut short stays alone
        except BaseException:
            os.close(fd)
            raise
        return fd

    def close(self) -> None:
        """Close the file (written rows are already in it)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _check_folder(path: str) -> None:
    folder = Path(os.path.realpath(path)).parent  # a link's target's folder, not the link's
    if not folder.is_dir():
        raise LogError(f"cannot write log {path}: its folder does not exist")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise LogError(f"cannot write log {path}: its folder is not writable")
