"""The corpus cut in two: the symbols a run trains on and, with ``--valid``, the held-out
ones after them, each part checked to be long enough for what reads it."""

from __future__ import annotations

import numpy as np

from .model import TextError


def check_length(ids: np.ndarray, seq_len: int) -> np.ndarray:
    """``ids`` if they hold at least one window of ``seq_len + 1``; else ``TextError``."""
    if len(ids) < seq_len + 1:
        raise TextError(
            f"the corpus has {len(ids)} symbols but --seq-len {seq_len} needs at least "
            f"{seq_len + 1}; use a longer text or a smaller --seq-len"
        )
    return ids


def split_held_out(ids: np.ndarray, fraction: float, seq_len: int
                   ) -> tuple[np.ndarray, np.ndarray | None]:
    """``(training, held_out)``: the corpus's last ``fraction`` of symbols held out (None
    for 0), so that no training window, of ``seq_len + 1`` symbols within the first part,
    overlaps it; ``TextError`` when either part is too short."""
    check_length(ids, seq_len)
    held = round(len(ids) * fraction)
    if not fraction:
        return ids, None
    if held < 2:
        raise TextError(f"--valid {fraction:g} of {len(ids):,} symbols holds out {held}, "
                        "fewer than the 2 a loss needs; use a larger --valid or 0 for none")
    training = ids[:len(ids) - held]
    if len(training) < seq_len + 1:
        raise TextError(
            f"--valid {fraction:g} leaves {len(training):,} of the corpus's {len(ids):,} "
            f"symbols for training, but --seq-len {seq_len} needs at least {seq_len + 1}; use "
            "a smaller --valid or --seq-len, or a longer text")
    return training, ids[len(ids) - held:]
