"""The training loop: a trainer stepped until a limit or a stop request, with the loss
readings, samples, held-out losses and saves between steps, told to a ``Reporter``; its time
limit, log and speeds count seconds of training (``TrainingClock``: the readings' and saves'
seconds left out)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from .model import TextError
from .record import Row, TrainingLog, bits_per_char, worse_than_uniform
from .trainer import DivergedError, TextTrainer

T = TypeVar("T")


class Reporter(Protocol):
    """Where the training loop reports (a progress bar or plain lines)."""

    def advance(self) -> None:
        """One step done."""

    def progress(self, step: int, loss: float, chars_per_second: float,
                 valid_loss: float | None = None) -> None:
        """A loss read back at ``step``, the speed since the previous read and, when one was
        measured, the held-out loss."""

    def text(self, message: str) -> None:
        """A message or a sample, printed whole."""

    def warn(self, message: str) -> None:
        """A warning, printed whole where the user will see it."""


class TrainingClock:
    """Seconds of training: wall-clock seconds since ``start`` less those spent in ``paused``
    actions (held-out readings, samples, saves). ``--time-limit``, the log's ``seconds``, the
    speeds and the progress bar read it; ``now`` is the wall clock (tests give their own)."""

    def __init__(self, now: Callable[[], float] = time.perf_counter) -> None:
        self.now = now
        self.began: float | None = None
        self.left_out = 0.0

    def start(self) -> None:
        """Start counting, from 0."""
        self.began, self.left_out = self.now(), 0.0

    def wall(self) -> float:
        """Wall-clock seconds since ``start`` (0 before it)."""
        return 0.0 if self.began is None else self.now() - self.began

    def training(self) -> float:
        """``wall()`` less the seconds of the paused actions."""
        return self.wall() - self.left_out

    def paused(self, action: Callable[[], T]) -> T:
        """``action()``, its seconds left out of training."""
        began = self.now()
        try:
            return action()
        finally:
            self.left_out += self.now() - began


@dataclass
class RunLimits:
    """When the loop stops, reports, samples, saves and reads the held-out loss (None or 0
    = never; the held-out loss is also read at the end). ``writes`` False (MPI ranks other
    than 0) checks the model at every save point without writing it, nor the ``log`` (a row
    at each loss reading). ``time_limit`` is in seconds of training, read on ``clock``."""

    steps: int | None = None
    time_limit: float | None = None
    log_every: int = 10
    sample_every: int = 200
    sample_chars: int = 200
    temperature: float = 0.8
    save: str | None = None
    save_every: int = 0
    writes: bool = True
    valid_every: int = 200
    log: TrainingLog | None = None
    clock: TrainingClock = field(default_factory=TrainingClock)


@dataclass
class RunResult:
    """How a run ended: ``reason`` (``"steps"``, ``"time"`` or ``"interrupted"``), the steps
    it made, its wall time up to the final save (``seconds``), the part of it spent training
    (``TrainingClock.training``: sampling, saving and held-out readings left out) and its mean
    speed over that part."""

    reason: str
    steps: int
    seconds: float
    training_seconds: float
    chars_per_second: float


def run_training(
    trainer: TextTrainer,
    limits: RunLimits,
    reporter: Reporter,
    stop_requested: Callable[[], bool] = lambda: False,
    before_step: Callable[[], str | None] = lambda: None,
) -> RunResult:
    """Train until a limit or a stop request (without limits: until a stop request).

    With ``save``, it saves every ``save_every`` steps (a failed save warns and training goes
    on) and at the end (falling back to a path next to it, see ``save_or_fall_back``). Every
    save point first checks that the model is finite: a diverged one is never written, and
    ``DivergedError`` (also raised for a NaN loss) ends the run with the last checkpoint kept.
    Any other exception in the loop (a failed sample, step or report) saves first and is then
    raised. Ends with a sample unless one was just printed, after the final save, so an abort
    while sampling loses nothing. The first held-out loss worse than a uniform guess over the
    vocabulary is followed by a line that says so. ``before_step()`` runs before each step;
    a line it returns is printed (``compile_ahead.Background.poll``: the compiled loops are
    ready)."""
    clock, pause = limits.clock, limits.clock.paused  # a paused action is not training
    clock.start()
    done = since_log = 0
    last = 0.0  # the seconds of training at the previous reading
    explained = False  # whether a held-out loss worse than a uniform guess was explained

    def log(valid: float | None = None) -> None:
        nonlocal last, since_log
        loss = trainer.read_loss()
        now = clock.training()
        if loss is not None:
            speed = since_log * trainer.chars_per_step / max(now - last, 1e-9)
            record(loss, speed, now, valid)
        last, since_log = now, 0

    def record(loss: float, speed: float, seconds: float, valid: float | None = None) -> None:
        nonlocal explained
        reporter.progress(trainer.step_count, loss, speed, valid)
        worse = "" if valid is None or explained else worse_than_uniform(valid,
                                                                          len(trainer.vocab))
        if worse:
            assert valid is not None  # worse says how a held-out loss compares
            explained = True
            reporter.text(f"(held-out {bits_per_char(valid):.3f} bits/char{worse}: the model "
                          "has not learnt the text's symbol frequencies yet)")
        if limits.log is not None and limits.writes:
            problem = limits.log.write(Row(trainer.step_count, seconds, loss, valid, speed,
                                           trainer.rate))
            if problem is not None:
                reporter.warn(problem)

    def show_sample() -> None:
        if limits.sample_chars > 0:
            text = trainer.sample(limits.sample_chars, limits.temperature)
            reporter.text(f"--- sample at step {trainer.step_count} (temperature "
                          f"{limits.temperature:g}) ---\n{text}\n---")

    def checkpoint() -> None:
        if not limits.writes:
            trainer.check_finite()
            return
        assert limits.save is not None  # saves are made only with a path to save to
        try:
            trainer.save(limits.save)
        except TextError as exc:
            reporter.warn(f"warning: {exc}; training goes on and tries again at the next save")
            return
        reporter.text(f"saved {limits.save} at step {trainer.step_count}")

    def final_checkpoint() -> None:
        trainer.check_finite()
        if limits.writes:
            assert limits.save is not None  # saves are made only with a path to save to
            where = trainer.save_or_fall_back(limits.save, reporter.warn)
            reporter.text(f"saved {where} at step {trainer.step_count}")

    def rescue() -> None:
        """Save what was trained before a failure ended the loop; a failure to save warns."""
        if limits.save and limits.writes:
            try:
                final_checkpoint()
            except Exception as exc:
                reporter.warn(f"warning: {exc}")

    def stop_reason() -> str | None:
        if limits.steps is not None and done >= limits.steps:
            return "steps"
        if limits.time_limit is not None and clock.training() >= limits.time_limit:
            return "time"
        return "interrupted" if stop_requested() else None

    try:
        reason = stop_reason()
        while reason is None:
            if (news := before_step()) is not None:
                reporter.text(f"step {trainer.step_count + 1}: {news}")
            trainer.step()
            done += 1
            since_log += 1
            reporter.advance()
            reason = stop_reason()  # known before the reading, so the last one has it all
            if reason or (limits.valid_every and done % limits.valid_every == 0):
                log(pause(trainer.held_out_loss))  # read before, its time left out
            elif limits.log_every and done % limits.log_every == 0:
                log()
            if limits.sample_every and done % limits.sample_every == 0:
                pause(show_sample)
            if limits.save and limits.save_every and done % limits.save_every == 0:
                pause(checkpoint)
    except DivergedError:
        raise
    except Exception:
        rescue()
        raise
    seconds, training = clock.wall(), max(clock.training(), 1e-9)
    speed = done * trainer.chars_per_step / training
    if limits.save:
        final_checkpoint()
    if not (limits.sample_every and done and done % limits.sample_every == 0):
        show_sample()
    return RunResult(reason, done, seconds, training, speed)
