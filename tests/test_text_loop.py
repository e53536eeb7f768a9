"""``text.loop``'s own decisions, on a trainer stand-in and a clock the test moves: the speeds
and seconds of training, the samples, the warnings of failed saves, the held-out remark and the
lines ``before_step`` returns. No arrays: the loop only calls the trainer (``test_text.py`` runs
it on a real one)."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace

import pytest

from dualtape.text.loop import RunLimits, TrainingClock, run_training
from dualtape.text.model import TextError

from .test_text import Recorder

STEP_SECONDS = 0.125
"""Wall-clock seconds a stand-in step takes (a held-out reading or a sample: 0.5, left out)."""


class Trainer:
    """What ``run_training`` calls of a ``TextTrainer``, with a clock that each call moves."""

    chars_per_step = 10
    vocab = "abcd"  # 4 symbols: a uniform guess costs 2 bits per character

    def __init__(self, *, held_nats: float = 1.0, failed_saves: int = 0,
                 fail_at_step: int | None = None) -> None:
        self.time = 0.0
        self.step_count = 0
        self.held_nats, self.failed_saves, self.fail_at_step = held_nats, failed_saves, fail_at_step
        self.rate = 0.5
        self.config = SimpleNamespace(rate=0.5)
        self.held_out: dict[str, list] = {}
        self.saves: list[str] = []

    def clock(self) -> TrainingClock:
        return TrainingClock(now=lambda: self.time)

    def step(self) -> None:
        if self.step_count + 1 == self.fail_at_step:
            raise RuntimeError("the step failed")
        self.time += STEP_SECONDS
        self.step_count += 1

    def read_loss(self) -> float:
        return 1.0

    def held_out_loss(self) -> float:
        self.time += 0.5
        self.held_out["last"] = [self.step_count, self.held_nats]
        return self.held_nats

    def sample(self, chars: int, temperature: float) -> str:
        self.time += 0.5
        return "x" * chars

    def check_finite(self) -> None:
        pass

    def save(self, path: str) -> None:
        if self.failed_saves:
            self.failed_saves -= 1
            raise TextError(f"cannot write checkpoint {path}: no room")
        self.saves.append(path)

    def save_or_fall_back(self, path: str, warn) -> str:
        warn(f"warning: {path} is taken")
        self.saves.append(f"{path}.fallback")
        return f"{path}.fallback"


def run(trainer: Trainer, recorder: Recorder | None = None,
        before_step: Callable[[], str | None] = lambda: None, **limits) -> tuple:
    """``run_training`` of 4 steps, a reading every 2, no sample, no held-out reading but the
    last, unless ``limits`` say otherwise; the result and the ``Recorder``."""
    recorder = recorder or Recorder()
    chosen = {"steps": 4, "log_every": 2, "sample_every": 0, "sample_chars": 0,
              "valid_every": 0, **limits}
    result = run_training(trainer, RunLimits(clock=trainer.clock(), **chosen), recorder,
                          before_step=before_step)
    return result, recorder


def test_a_clock_not_started_reads_zero_seconds():
    clock = TrainingClock(now=lambda: 5.0)
    assert clock.wall() == 0.0 and clock.training() == 0.0
    clock.start()
    assert clock.paused(lambda: "done") == "done" and clock.training() == 0.0


def test_speeds_and_seconds_count_training_only_even_below_a_second():
    trainer = Trainer()
    result, recorder = run(trainer)
    # 2 steps of 0.125 s between readings: 20 characters in 0.25 s; the held-out 0.5 s left out
    assert recorder.readings == [(2, 1.0, 80.0), (4, 1.0, 80.0)]
    assert result.training_seconds == 0.5 and result.seconds == 1.0
    assert result.chars_per_second == 80.0 and result.reason == "steps"


def test_a_held_out_loss_worse_than_uniform_is_explained_once():
    trainer = Trainer(held_nats=3.0)
    _, recorder = run(trainer, valid_every=2)
    assert recorder.held_out == [(2, 3.0), (4, 3.0)]
    assert recorder.messages == [
        "(held-out 4.328 bits/char: worse than a uniform guess over its 4 symbols (2.000 "
        "bits/char): the model has not learnt the text's symbol frequencies yet)"]


@pytest.mark.parametrize(("chars", "expected"), [(0, []), (1, ["x"])])
def test_a_sample_of_no_characters_is_not_printed_and_one_of_one_is(chars, expected):
    _, recorder = run(Trainer(), sample_chars=chars)
    assert recorder.messages == [f"--- sample at step 4 (temperature 0.8) ---\n{x}\n---"
                                 for x in expected]


def test_the_last_sample_is_not_repeated_at_the_end():
    _, recorder = run(Trainer(), sample_every=2, sample_chars=3)
    assert [m.splitlines()[0] for m in recorder.messages] == [
        "--- sample at step 2 (temperature 0.8) ---", "--- sample at step 4 (temperature 0.8) ---"]


def test_a_failed_save_warns_and_the_final_one_falls_back_with_a_warning():
    trainer = Trainer(failed_saves=1)
    _, recorder = run(trainer, save="run.npz", save_every=2)
    assert recorder.messages == [
        "warning: cannot write checkpoint run.npz: no room; training goes on and tries again "
        "at the next save", "saved run.npz at step 4",
        "warning: run.npz is taken", "saved run.npz.fallback at step 4"]


def test_a_failure_without_save_raises_with_no_warning():
    recorder = Recorder()
    with pytest.raises(RuntimeError, match="the step failed"):
        run(Trainer(fail_at_step=2), recorder)
    assert recorder.messages == []


def test_a_line_before_a_step_is_printed_with_that_step():
    news = iter(["the compiled loops are ready"])
    _, recorder = run(Trainer(), steps=3, before_step=lambda: next(news, None))
    assert recorder.messages == ["step 1: the compiled loops are ready"]
