"""Learning-rate schedules for ``SGD`` and ``Adam`` (``schedule=``): each is a pure function of
the optimizer's constructor rate and the step number, ``schedule(rate, step)``, so an
optimizer keeps nothing for it but its step count (``steps``).

The step is the optimizer's: the ``t``-th ``step`` (and ``train_recurrent``'s compiled steps)
runs at ``schedule(rate, t - 1)``, as a torch scheduler stepped once after every
``optimizer.step()`` gives the ``t``-th step the rate of its ``last_epoch = t - 1``. Each kind
equals torch's scheduler of the same parameters (``tests/fixtures/schedule_golden.npz``):

- ``StepRate(step_size, gamma)``: ``StepLR``, ``rate·gamma^⌊step/step_size⌋``;
- ``CosineRate(t_max, eta_min)``: ``CosineAnnealingLR``, ``eta_min + (rate − eta_min)·(1 +
  cos(π·step/t_max))/2``; past ``t_max`` the rate rises again, as torch's does (period
  ``2·t_max``): give ``t_max`` the run's length;
- ``LinearRate(start_factor, end_factor, total_iters)``: ``LinearLR``, a linear warm-up (or
  decay) of the factor over ``total_iters`` steps, then ``end_factor`` for good;
- ``LambdaRate(factor)``: ``LambdaLR``, ``rate·factor(step)`` (a factor, not a rate);
- ``SequentialRate(schedules, milestones)``: ``SequentialLR``, each schedule from its
  milestone on with its step counted from 0 there (a warm-up, then a cosine).

A constant rate is ``schedule=None``. ``describe``/``restore`` turn a schedule into plain
data and back for ``state_dict``; a ``LambdaRate``'s function cannot be saved, so only its
place is, and restoring it needs the optimizer built with the same schedule.
"""

from __future__ import annotations

import bisect
import math
import numbers
from collections.abc import Callable, Sequence
from typing import Any

from .layers.edges import check_real, check_size


class Schedule:
    """A learning rate as a pure function of the step; subclasses define ``__call__``."""

    def __call__(self, rate: float, step: int) -> float:
        """The rate of step ``step`` (counted from 0) for the constructor's ``rate``."""
        raise NotImplementedError

    def spec(self) -> dict[str, Any]:
        """The schedule as plain data (``restore`` builds it back)."""
        return {"kind": type(self).__name__, **vars(self)}

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and vars(other) == vars(self)

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({args})"


class StepRate(Schedule):
    """torch's ``StepLR``: the rate times ``gamma`` every ``step_size`` steps."""

    def __init__(self, step_size: int, gamma: float = 0.1) -> None:
        self.step_size = check_size("StepRate", "step_size", step_size)
        self.gamma = check_real("StepRate", "gamma", gamma, "(0, inf)")

    def __call__(self, rate: float, step: int) -> float:
        return rate * self.gamma ** (step // self.step_size)


class CosineRate(Schedule):
    """torch's ``CosineAnnealingLR``: from the rate down to ``eta_min`` along half a cosine
    over ``t_max`` steps, and back up over the next ``t_max`` (torch's ``T_max``)."""

    def __init__(self, t_max: int, eta_min: float = 0.0) -> None:
        self.t_max = check_size("CosineRate", "t_max", t_max)
        self.eta_min = check_real("CosineRate", "eta_min", eta_min, "[0, inf)")

    def __call__(self, rate: float, step: int) -> float:
        cosine = math.cos(math.pi * step / self.t_max)
        return self.eta_min + (rate - self.eta_min) * (1 + cosine) / 2


class LinearRate(Schedule):
    """torch's ``LinearLR``: the rate times a factor going linearly from ``start_factor`` to
    ``end_factor`` over ``total_iters`` steps, then staying there (a warm-up by default)."""

    def __init__(self, start_factor: float = 1 / 3, end_factor: float = 1.0,
                 total_iters: int = 5) -> None:
        self.start_factor = check_real("LinearRate", "start_factor", start_factor, "(0, 1]")
        self.end_factor = check_real("LinearRate", "end_factor", end_factor, "[0, 1]")
        self.total_iters = check_size("LinearRate", "total_iters", total_iters)

    def __call__(self, rate: float, step: int) -> float:
        done = min(step, self.total_iters) / self.total_iters
        return rate * (self.start_factor + (self.end_factor - self.start_factor) * done)


class LambdaRate(Schedule):
    """torch's ``LambdaLR``: the rate times ``factor(step)``, any function of the step."""

    def __init__(self, factor: Callable[[int], float]) -> None:
        if not callable(factor):
            raise TypeError(f"LambdaRate: factor must be a function of the step, got {factor!r}")
        self.factor = factor

    def __call__(self, rate: float, step: int) -> float:
        """``rate·factor(step)``; a factor that is not a real number is given back as it is,
        for the optimizer to refuse (``scheduled_rate``)."""
        found = self.factor(step)
        return rate * found if isinstance(found, numbers.Real) else found

    def spec(self) -> dict[str, Any]:
        return {"kind": "LambdaRate"}  # a function is not plain data


class SequentialRate(Schedule):
    """torch's ``SequentialLR``: ``schedules[i]`` from ``milestones[i − 1]`` (the first from
    step 0), its step counted from 0 there; one milestone fewer than schedules, increasing."""

    def __init__(self, schedules: Sequence[Schedule], milestones: Sequence[int]) -> None:
        if not isinstance(schedules, Sequence) or not schedules or not all(
                isinstance(s, Schedule) for s in schedules):
            raise TypeError(f"SequentialRate: schedules must be a list of schedules, got "
                            f"{schedules!r}")
        found = [check_size("SequentialRate", "milestones", m) for m in milestones]
        if len(found) != len(schedules) - 1 or found != sorted(set(found)):
            raise ValueError(f"SequentialRate: milestones must be {len(schedules) - 1} "
                             f"increasing steps, one fewer than schedules, got {milestones!r}")
        self.schedules, self.milestones = list(schedules), found

    def __call__(self, rate: float, step: int) -> float:
        k = bisect.bisect_right(self.milestones, step)
        return self.schedules[k](rate, step - (self.milestones[k - 1] if k else 0))

    def spec(self) -> dict[str, Any]:
        return {"kind": "SequentialRate", "schedules": [s.spec() for s in self.schedules],
                "milestones": self.milestones}


KINDS: dict[str, type[Schedule]] = {
    c.__name__: c for c in (StepRate, CosineRate, LinearRate, SequentialRate)}
"""The schedules ``restore`` builds from their plain data (a ``LambdaRate`` it cannot)."""


def check_schedule(owner: str, schedule: Any) -> Schedule | None:
    """``schedule`` if it is a ``Schedule`` or None, else a one-line ``TypeError``."""
    if schedule is None or isinstance(schedule, Schedule):
        return schedule
    raise TypeError(f"{owner}: schedule must be a schedule (StepRate, CosineRate, LinearRate, "
                    f"LambdaRate, SequentialRate) or None, got {schedule!r}; a function of the "
                    "step is LambdaRate(function), which multiplies the rate")


def scheduled_rate(owner: str, schedule: Schedule, rate: float, step: int) -> float:
    """``schedule(rate, step)`` as a float, or a ``ValueError`` naming ``schedule`` and the
    step where it is not a finite number >= 0."""
    found = schedule(rate, step)
    try:
        value = float(found)
    except (TypeError, ValueError):
        value = math.nan
    if not value >= 0 or not math.isfinite(value):
        raise ValueError(f"{owner}: schedule gave the rate {found!r} at step {step}; a rate "
                         "must be a finite number >= 0")
    return value


def describe(schedule: Schedule | None) -> dict[str, Any] | None:
    """``schedule`` as plain data (None stays None)."""
    return None if schedule is None else schedule.spec()


def restore(spec: Any, current: Schedule | None) -> Schedule | None:
    """The schedule ``describe`` gave ``spec``; ``current`` (the optimizer's) where ``spec``
    holds a ``LambdaRate``, whose function only ``current`` can have: then ``spec`` must be
    ``describe(current)``. Anything else raises ``ValueError`` (or the constructors' own)."""
    if _has_function(spec):
        if describe(current) != spec:
            raise ValueError(f"the saved schedule {spec} holds a LambdaRate, whose function "
                             f"cannot be saved: build the optimizer with the same schedule "
                             f"before loading (it has {current!r})")
        return current
    return _build(spec)


def _has_function(spec: Any) -> bool:
    return isinstance(spec, dict) and (spec.get("kind") == "LambdaRate" or any(
        _has_function(s) for s in spec.get("schedules", ())))


def _build(spec: Any) -> Schedule | None:
    if spec is None:
        return None
    if not isinstance(spec, dict) or spec.get("kind") not in KINDS:
        raise ValueError(f"{spec!r} is not a saved schedule (known: {', '.join(KINDS)})")
    args = {k: v for k, v in spec.items() if k != "kind"}
    if spec["kind"] == "SequentialRate":
        args["schedules"] = [_build(s) for s in args.get("schedules", ())]
    try:
        return KINDS[spec["kind"]](**args)
    except TypeError as exc:
        raise ValueError(f"{spec!r} is not a saved schedule: {exc}") from None
