"""Training windows read in order (``train-text --stateful``): the corpus as parallel streams.

The training symbols are cut into ``count`` streams of equal length (``count`` = batch x the
ranks of a distributed run), stream s beginning at ``offset + s·span``. A step takes the next
window of ``seq_len + 1`` symbols from each of its streams: window k + 1 of a stream begins
where window k ended, and the network begins it from the state window k ended in, with the
gradient stopped at the window's start (truncated BPTT). After a pass over the corpus (an
epoch) every stream begins again from the initial state, its beginning moved on by one symbol
(``offset`` = epoch mod ``seq_len``), so that the window boundaries fall elsewhere each epoch.
A position is ``(epoch, window)``: the same on every rank, and all a checkpoint needs to
continue the streams where they were.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .model import TextError


class StreamPosition(NamedTuple):
    """The epoch (pass over the corpus) and the window within it that the next step reads."""

    epoch: int = 0
    window: int = 0


class StreamLayout(NamedTuple):
    """Where the streams of one epoch lie: the first stream's start, each stream's length in
    symbols, and the windows each holds."""

    offset: int
    span: int
    windows: int


def layout(length: int, seq_len: int, count: int, epoch: int) -> StreamLayout:
    """The streams of ``epoch`` over ``length`` symbols: ``count`` streams of ``span``
    symbols from ``offset = epoch mod seq_len``; a window's target is the next window's first
    input, so a stream of ``span`` symbols holds ``(span - 1) // seq_len`` windows."""
    offset = epoch % seq_len
    span = (length - offset) // count
    return StreamLayout(offset, span, (span - 1) // seq_len)


def check_streams(length: int, seq_len: int, count: int) -> None:
    """``TextError`` unless every epoch gives each of ``count`` streams a whole window."""
    need = count * (seq_len + 1) + seq_len - 1
    if length < need:
        raise TextError(
            f"--stateful reads {count} streams of at least {seq_len + 1} symbols each, which "
            f"needs {need:,} symbols, but the training text has {length:,}; use a smaller "
            "--batch or --seq-len, a longer text, or random windows (--no-stateful)"
        )


def stream_starts(length: int, seq_len: int, count: int, first: int, batch: int,
                  position: StreamPosition) -> np.ndarray:
    """The first symbol of streams ``first .. first + batch - 1``'s window at ``position``."""
    where = layout(length, seq_len, count, position.epoch)
    streams = np.arange(first, first + batch, dtype=np.int64)
    return where.offset + streams * where.span + position.window * seq_len


def advance(length: int, seq_len: int, count: int, position: StreamPosition) -> StreamPosition:
    """The position after ``position``: the next window, or the next epoch's first."""
    if position.window + 1 < layout(length, seq_len, count, position.epoch).windows:
        return StreamPosition(position.epoch, position.window + 1)
    return StreamPosition(position.epoch + 1, 0)
