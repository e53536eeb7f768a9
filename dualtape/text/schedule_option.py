"""train-text's ``--schedule``: a learning-rate schedule (``dualtape.schedules``) written as a
short text, stored as that text in the checkpoint's configuration."""

from __future__ import annotations

from collections.abc import Callable
from itertools import accumulate

from ..schedules import CosineRate, LinearRate, Schedule, SequentialRate, StepRate

GRAMMAR = ("constant, or parts joined by + of step:N[:GAMMA], cosine:N[:MIN] and "
           "warmup:N[:START] (N a whole number of steps)")
"""What ``--schedule`` must be (docs/train-text.md says what each part means)."""

PARTS: dict[str, Callable[..., Schedule]] = {
    "step": lambda n, gamma=0.1: StepRate(n, gamma),
    "cosine": lambda n, low=0.0: CosineRate(n, low),
    "warmup": lambda n, start=1 / 3: LinearRate(start, 1.0, n),
}
"""Each part's schedule from its ``N`` (an int) and optional number."""


def parse_schedule(text: str) -> Schedule | None:
    """The schedule ``text`` writes (None for ``constant``): parts joined by ``+``, each but
    the last lasting its ``N`` steps (``SequentialRate``). ``ValueError`` if it writes none."""
    if text == "constant":
        return None
    made, lengths = [], []
    for part in text.split("+"):
        kind, *numbers = part.split(":")
        if kind not in PARTS or not 1 <= len(numbers) <= 2:
            raise ValueError(f"{part!r} is not a schedule part")
        made.append(PARTS[kind](int(numbers[0]), *map(float, numbers[1:])))
        lengths.append(int(numbers[0]))
    if len(made) == 1:
        return made[0]
    return SequentialRate(made, list(accumulate(lengths[:-1])))


def is_schedule(text: object) -> bool:
    """Whether ``text`` is a ``--schedule`` that ``parse_schedule`` reads."""
    if not isinstance(text, str):
        return False
    try:
        parse_schedule(text)
    except ValueError:
        return False
    return True
