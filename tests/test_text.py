"""train-text and sample: vocabulary, windows, training, checkpoints, sampling and the CLI."""

from __future__ import annotations

import dataclasses
import errno
import json
import math
import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import dualtape
from dualtape import LSTM, cli
from dualtape.backend import resolve_backend
from dualtape.gradcheck import numeric_gradient
from dualtape.text import cli as text_cli
from dualtape.text import console
from dualtape.text import trainer as trainer_module
from dualtape.text.checkpoint import load_checkpoint
from dualtape.text.config import TrainConfig
from dualtape.text.loop import RunLimits, TrainingClock, run_training
from dualtape.text.model import (
    CAPITAL,
    UNKNOWN,
    TextError,
    Vocabulary,
    annotate_capitals,
    build_text_network,
    check_text_network,
    choose,
    parse_hidden,
    random_windows,
    read_corpus,
    restore_capitals,
    sample,
)
from dualtape.text.trainer import DivergedError, TextTrainer

from .helpers import assert_params_equal, host_params

TEXT = "The cat sat on the mat. The dog sat on the log. " * 12
TINY = TrainConfig(hidden=[12], seq_len=8, batch=4, optimizer="adam", rate=0.05, seed=3)


# --- vocabulary ------------------------------------------------------------------------------


def test_vocabulary_keeps_the_most_frequent_characters_and_maps_the_rest_to_unknown():
    vocab = Vocabulary.build("aaaabbbcc d", size=2)
    assert vocab.symbols == [UNKNOWN, "a", "b"]
    assert vocab.characters == 2
    assert vocab.encode("abcx").tolist() == [1, 2, 0, 0]
    assert vocab.decode([1, 2, 0]) == "ab\ufffd"


def test_vocabulary_ties_break_by_code_point_and_round_trips_through_json():
    vocab = Vocabulary.build("zyxzyx", size=2)
    assert vocab.symbols == [UNKNOWN, "x", "y"]
    again = Vocabulary.from_json(json.loads(json.dumps(vocab.to_json())))
    assert again == vocab
    with pytest.raises(ValueError):
        Vocabulary.from_json({"symbols": 3})


def test_encode_decode_round_trip_keeps_every_known_character():
    vocab = Vocabulary.build(TEXT + "\n\t\u00e9", size=100)
    assert vocab.decode(vocab.encode(TEXT)) == TEXT


def test_capital_annotation_round_trips_and_shrinks_the_vocabulary():
    text = "Hello World, ÉTÉ and İstanbul! ß"
    assert restore_capitals(annotate_capitals(text)) == text
    plain = Vocabulary.build(text)
    marked = Vocabulary.build(text, annotate_capitals=True)
    assert marked.symbols[:2] == [UNKNOWN, CAPITAL]
    assert "H" not in marked.symbols and "h" in marked.symbols
    assert marked.characters < plain.characters
    assert marked.decode(marked.encode(text)) == text
    assert len(marked.encode("Ab")) == 3  # marker, a, b


def test_private_use_symbols_in_the_text_are_unknown_and_stray_markers_vanish():
    vocab = Vocabulary.build("abc1" + CAPITAL + UNKNOWN, annotate_capitals=True)
    assert vocab.encode(CAPITAL + "a").tolist() == [0, vocab.index["a"]]
    assert vocab.decode([1]) == ""
    assert vocab.decode([1, vocab.index["1"], 1, vocab.index["a"]]) == "1A"


def test_vocabulary_size_must_be_positive():
    with pytest.raises(ValueError, match="positive"):
        Vocabulary.build("abc", size=0)


# --- windows ---------------------------------------------------------------------------------


def test_random_windows_are_consecutive_and_reproducible():
    ids = np.arange(100)
    windows = random_windows(ids, 10, 6, np.random.default_rng(5))
    assert windows.shape == (11, 6)
    assert np.all(np.diff(windows, axis=0) == 1)
    assert windows.min() >= 0 and windows.max() <= 99
    assert np.array_equal(windows, random_windows(ids, 10, 6, np.random.default_rng(5)))


def test_random_windows_fit_a_corpus_of_exactly_seq_len_plus_one():
    assert random_windows(np.arange(11), 10, 2, np.random.default_rng()).tolist()[0] == [0, 0]
    with pytest.raises(ValueError, match="at least 11"):
        random_windows(np.arange(10), 10, 2, np.random.default_rng())


def test_parse_hidden():
    assert parse_hidden("80,80") == [80, 80]
    for bad in ("", "80,", "a", "0", "-3,4", "8.5"):
        with pytest.raises(TextError, match="--hidden"):
            parse_hidden(bad)


def test_built_in_corpus_ships_with_the_package():
    text = read_corpus(None)
    assert 30_000 < len(text) < 60_000 and text.isascii()


# --- training --------------------------------------------------------------------------------


def test_network_shape_and_rescaled_lstm_weights():
    with dualtape.use_backend("numpy"):
        net = build_text_network(20, [16, 8], seed=1)
    assert [repr(layer) for layer in net.layers] == [
        "LSTM(20, 16, init='scaled_recurrent')", "LSTM(16, 8, init='scaled')",
        "FullyConnected(8, 20)", "Softmax()"]
    assert np.abs(net.layers[0].params["W"]).max() > 0.5  # one-hot input: Grenade's scale
    assert np.abs(net.layers[1].params["W"]).max() <= 1 / 4  # divided by sqrt(16)
    assert np.abs(net.layers[1].params["U"]).max() <= 1 / np.sqrt(8)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_init_option_gives_the_weights_train_text_scaled_by_hand(backend, dtype):
    # Before LSTM(init=...), build_text_network scaled Grenade's weights on the device.
    net = build_text_network(20, [16, 8, 4], seed=5, dtype=dtype)
    by_hand = build_text_network(20, [16, 8, 4], seed=5, dtype=dtype)
    seeds = np.random.default_rng(5).integers(0, 2**63 - 1, size=4)
    sizes = zip(by_hand.layers[:3], (20, 16, 8), (16, 8, 4), strict=True)
    for k, (layer, n_in, n_out) in enumerate(sizes):
        layer.params.update(LSTM(n_in, n_out, seed=int(seeds[k]), dtype=dtype).params)
        layer.params["U"] = layer.params["U"] * (1.0 / math.sqrt(n_out))
        if k:
            layer.params["W"] = layer.params["W"] * (1.0 / math.sqrt(n_in))
    assert_params_equal(host_params(net), host_params(by_hand))


def _losses(trainer: TextTrainer, steps: int) -> list[float]:
    out = []
    for _ in range(steps):
        trainer.step()
        out.append(trainer.read_loss())
    return out


def test_a_few_steps_lower_the_loss_on_every_backend(backend):
    trainer = TextTrainer.new(TEXT, TINY, backend)
    assert trainer.net.backend.name == backend.name
    losses = _losses(trainer, 12)
    assert np.mean(losses[-4:]) < losses[0] - 0.4
    assert trainer.step_count == 12


def test_sgd_with_momentum_lowers_the_loss_too():
    config = TrainConfig(hidden=[12], seq_len=8, batch=4, seed=3, rate=0.5)
    losses = _losses(TextTrainer.new(TEXT, config, resolve_backend("numpy")), 30)
    assert np.mean(losses[-5:]) < losses[0] - 0.3


def test_the_loss_is_read_back_as_a_mean_and_nan_is_caught():
    trainer = TextTrainer.new(TEXT, TINY, resolve_backend("numpy"))
    assert trainer.read_loss() is None
    trainer.step()
    trainer.step()
    assert 0 < trainer.read_loss() < 10
    trainer.net.layers[0].params["b"] = trainer.net.layers[0].params["b"] * np.nan
    trainer.step()
    with pytest.raises(FloatingPointError, match="diverged"):
        trainer.read_loss()


def cross_entropy_per_char(net, window: np.ndarray, vocab_size: int) -> float:
    """The mean cross entropy per character of ``window`` under ``net`` (numpy float64), by
    the public forward pass and the Softmax's probabilities: an oracle independent of the
    trainer's logits path."""
    eye = np.eye(vocab_size)
    _, _, probs = net.forward_sequence(net.initial_state(window.shape[1]), eye[window[:-1]])
    picked = np.take_along_axis(dualtape.to_numpy(probs), window[1:, :, None], axis=-1)
    return float(-np.log(picked).sum() / (window.shape[0] - 1) / window.shape[1])


@pytest.mark.parametrize("clip", [0.0, 1e6], ids=["clip-off", "clip-above-the-norm"])
def test_a_step_is_plain_sgd_on_the_mean_loss_per_character(clip):
    config = TrainConfig(hidden=[5], seq_len=6, batch=3, rate=0.1, momentum=0.0, l2=0.0,
                         clip=clip, dtype="float64", seed=2)
    trainer = TextTrainer.new(TEXT, config, resolve_backend("numpy"))
    window = random_windows(trainer.ids, 6, 3, np.random.default_rng([2, 1]))  # the first draw
    before = host_params(trainer.net)
    params = trainer.net.layers[0].params

    def loss_at(w: np.ndarray) -> float:
        params["W"] = w
        return cross_entropy_per_char(trainer.net, window, len(trainer.vocab))

    loss = loss_at(before[0]["W"].copy())
    expected = numeric_gradient(loss_at, before[0]["W"].copy())
    params["W"] = before[0]["W"].copy()
    trainer.step()
    step = (before[0]["W"] - dualtape.to_numpy(trainer.net.layers[0].params["W"])) / 0.1
    np.testing.assert_allclose(step, expected, rtol=1e-5, atol=1e-9)
    assert trainer.read_loss() == pytest.approx(loss, rel=1e-12)


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_clipped_steps_hand_the_optimizer_the_same_arrays_and_the_copying_clips_numbers(
        monkeypatch, optimizer):
    """train-text clips in place (its default clip, with SGD with momentum and L2): every
    step gives the optimizer the arrays of the step before, so a numpy optimizer keeps its
    step (``held_update``); the numbers are those of a clip that copies, bit for bit."""
    config = dataclasses.replace(TINY, optimizer=optimizer, clip=0.5, hidden=[12, 7])
    copying = trainer_module.clip_gradients

    def train(patch: pytest.MonkeyPatch, in_place: bool):
        trainer = TextTrainer.new(TEXT, config, resolve_backend("numpy"))
        if not in_place:
            patch.setattr(trainer_module, "clip_gradients",
                          lambda grads, limit, **_: copying(grads, limit))
        given, step = [], trainer.optimizer.step
        patch.setattr(trainer.optimizer, "step", lambda params, grads: (
            given.append([id(g) for group in grads for g in group.values()]),
            step(params, grads)))
        for _ in range(4):
            trainer.step()
        assert (given[1:] == given[:-1]) == in_place
        return host_params(trainer.net)

    with monkeypatch.context() as patch:
        in_place = train(patch, True)
    with monkeypatch.context() as patch:
        assert_params_equal(in_place, train(patch, False))


def test_the_loss_read_back_is_the_mean_of_the_steps_since_the_last_read():
    one_by_one = TextTrainer.new(TEXT, TINY, resolve_backend("numpy"))
    together = TextTrainer.new(TEXT, TINY, resolve_backend("numpy"))
    losses = _losses(one_by_one, 3)
    for _ in range(3):
        together.step()
    assert together.read_loss() == pytest.approx(np.mean(losses), rel=1e-6)
    assert together.read_loss() is None


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan])
def test_an_infinite_or_nan_loss_is_a_divergence(value):
    trainer = TextTrainer.new(TEXT, TINY, resolve_backend("numpy"))
    trainer.step()
    trainer._loss_sum = trainer._loss_sum * value
    with pytest.raises(DivergedError, match="training diverged: the loss is"):
        trainer.read_loss()


def test_a_step_that_raises_changes_nothing_and_the_next_draws_the_same_windows(monkeypatch):
    trainer = TextTrainer.new(TEXT, TINY, resolve_backend("numpy"))
    fresh = TextTrainer.new(TEXT, TINY, resolve_backend("numpy"))
    real = trainer_module.backpropagate_sequence
    calls = []

    def fails_once(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise MemoryError
        return real(*args, **kwargs)

    monkeypatch.setattr(trainer_module, "backpropagate_sequence", fails_once)
    state = trainer.window_rng.bit_generator.state
    with pytest.raises(MemoryError):
        trainer.step()
    assert trainer.window_rng.bit_generator.state == state and trainer.step_count == 0
    assert trainer.read_loss() is None
    trainer.step()
    fresh.step()
    assert_params_equal(host_params(trainer.net), host_params(fresh.net))


def test_a_corpus_shorter_than_a_window_is_refused():
    with pytest.raises(TextError, match="--seq-len 8 needs at least 9"):
        TextTrainer.new("abcdefgh", TINY, resolve_backend("numpy"))


# --- checkpoints -----------------------------------------------------------------------------


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_resume_on_another_backend_continues_with_the_same_losses(backend, tmp_path, optimizer):
    config = TrainConfig(hidden=[10, 6], seq_len=6, batch=3, optimizer=optimizer,
                         rate=0.3 if optimizer == "sgd" else 0.02, seed=11)
    first = TextTrainer.new(TEXT, config, resolve_backend("numpy"))
    _losses(first, 4)
    path = tmp_path / "ckpt.npz"
    first.save(path)
    expected = _losses(first, 3)
    checkpoint = load_checkpoint(path, backend)
    assert checkpoint.step == 4 and checkpoint.config == config
    resumed = checkpoint.trainer(checkpoint.vocab.encode(TEXT))
    assert resumed.net.backend.name == backend.name
    np.testing.assert_allclose(_losses(resumed, 3), expected, rtol=2e-4)
    assert resumed.step_count == 7


@pytest.mark.parametrize("poison", ["parameters hold", "optimizer state holds"])
def test_a_model_that_is_not_finite_is_never_written(tmp_path, poison):
    trainer = TextTrainer.new(TEXT, TINY, resolve_backend("numpy"))  # Adam: two moments
    trainer.step()
    path = tmp_path / "c.npz"
    trainer.save(path)
    written = path.read_bytes()
    if poison == "parameters hold":
        trainer.net.layers[0].params["b"] = trainer.net.layers[0].params["b"] * np.nan
    else:
        slots = next(iter(trainer.optimizer.state.values()))
        slots["v"] = slots["v"] + np.inf
    trainer.step_count += 1
    with pytest.raises(DivergedError, match=f"the {poison} NaN or infinity at step 2"):
        trainer.save(path)
    assert path.read_bytes() == written and trainer.saved == (str(path), 1)


def test_resuming_with_a_seed_draws_from_the_new_seed(tmp_path):
    trainer = TextTrainer.new(TEXT, TINY, resolve_backend("numpy"))
    trainer.step()
    trainer.save(tmp_path / "c.npz")
    checkpoint = load_checkpoint(tmp_path / "c.npz")
    kept = checkpoint.trainer(trainer.ids)
    assert kept.window_rng.bit_generator.state == trainer.window_rng.bit_generator.state
    reseeded = checkpoint.trainer(trainer.ids, dataclasses.replace(TINY, seed=99), reseed=True)
    for got, stream in ((reseeded.window_rng, 1), (reseeded.sample_rng, 2)):
        assert got.bit_generator.state == np.random.default_rng([99, stream]).bit_generator.state


def test_checkpoint_keeps_the_sample_generator(tmp_path):
    trainer = TextTrainer.new(TEXT, TINY, resolve_backend("numpy"))
    trainer.step()
    trainer.save(tmp_path / "c.npz")
    expected = trainer.sample(30, 1.0)
    resumed = load_checkpoint(tmp_path / "c.npz").trainer(trainer.ids)
    assert resumed.sample(30, 1.0) == expected


# --- sampling --------------------------------------------------------------------------------


def test_sampling_is_deterministic_with_a_seed(backend):
    trainer = TextTrainer.new(TEXT, TINY, backend)
    _losses(trainer, 3)

    def draw(seed: int, prime: str = "") -> str:
        return sample(trainer.net, trainer.vocab, 25, temperature=0.9,
                      rng=np.random.default_rng(seed), prime=prime)

    assert draw(1) == draw(1)
    assert len(draw(1)) == 25
    assert draw(2, "The") == draw(2, "The")
    assert len({draw(seed) for seed in range(4)}) > 1


@pytest.mark.parametrize("temperature", [1e-310, 5e-324, 1e300])
def test_extreme_temperatures_sample_without_nan(temperature):
    probs = np.array([0.2, 0.5, 0.3])
    rng = np.random.default_rng(0)
    drawn = {choose(probs, temperature, rng) for _ in range(200)}
    assert drawn == ({1} if temperature < 1 else {0, 1, 2})


def test_temperature_sharpens_and_must_be_positive():
    probs = np.array([0.1, 0.6, 0.3])
    rng = np.random.default_rng(0)
    assert all(choose(probs, 0.01, rng) == 1 for _ in range(50))
    with dualtape.use_backend("numpy"):
        net = build_text_network(4, [3], seed=0)
    with pytest.raises(ValueError, match="temperature"):
        sample(net, Vocabulary.build("abc"), 3, temperature=0)


def test_samples_restore_capitals():
    config = TrainConfig(hidden=[8], seq_len=8, batch=2, annotate_capitals=True, seed=0)
    trainer = TextTrainer.new("ABC DEF GHI " * 10, config, resolve_backend("numpy"))
    text = trainer.sample(200, 1.5)
    assert CAPITAL not in text and "^" not in text and len(text) <= 200


# --- the loop --------------------------------------------------------------------------------


class Recorder:
    def __init__(self):
        self.steps, self.readings, self.messages, self.held_out = 0, [], [], []

    def advance(self):
        self.steps += 1

    def progress(self, step, loss, speed, valid_loss=None):
        self.readings.append((step, loss, speed))
        if valid_loss is not None:
            self.held_out.append((step, valid_loss))

    def text(self, message):
        self.messages.append(message)

    def warn(self, message):
        self.messages.append(message)


def test_run_training_logs_samples_and_saves(tmp_path):
    trainer = TextTrainer.new(TEXT, TINY, resolve_backend("numpy"))
    limits = RunLimits(steps=7, log_every=3, sample_every=5, sample_chars=12,
                       save=str(tmp_path / "run.npz"), save_every=4)
    recorder = Recorder()
    result = run_training(trainer, limits, recorder)
    assert result.reason == "steps" and result.steps == 7 and result.chars_per_second > 0
    assert recorder.steps == 7
    assert [step for step, _, _ in recorder.readings] == [3, 6, 7]
    assert all(speed > 0 for _, _, speed in recorder.readings)
    samples = [m for m in recorder.messages if m.startswith("--- sample")]
    assert len(samples) == 2  # at step 5 and at the end
    assert sum(m.startswith("saved") for m in recorder.messages) == 2
    assert load_checkpoint(tmp_path / "run.npz").step == 7


def test_run_training_stops_when_asked():
    trainer = TextTrainer.new(TEXT, TINY, resolve_backend("numpy"))
    calls = iter(range(100))
    recorder = Recorder()
    result = run_training(trainer, RunLimits(sample_every=0, sample_chars=5), recorder,
                          lambda: next(calls) >= 2)
    assert result.reason == "interrupted" and trainer.step_count == 2
    assert [m[:19] for m in recorder.messages] == ["--- sample at step "]  # only the last


def poisoned_at(trainer: TextTrainer, when: int, monkeypatch) -> None:
    """The trainer's parameters turn NaN in its ``when``-th step (as a diverging run's do)."""
    real = trainer.step

    def step():
        real()
        if trainer.step_count == when:
            trainer.net.layers[0].params["b"] = trainer.net.layers[0].params["b"] * np.nan

    monkeypatch.setattr(trainer, "step", step)


def test_a_run_that_diverges_stops_at_the_next_save_point_and_keeps_the_last(tmp_path,
                                                                             monkeypatch):
    trainer = TextTrainer.new(TEXT, TINY, resolve_backend("numpy"))
    poisoned_at(trainer, 3, monkeypatch)
    path = tmp_path / "run.npz"
    recorder = Recorder()
    limits = RunLimits(steps=10, log_every=100, sample_chars=0, save=str(path), save_every=2)
    with pytest.raises(DivergedError, match="parameters hold NaN or infinity at step 4"):
        run_training(trainer, limits, recorder)
    assert load_checkpoint(path).step == 2 and trainer.saved == (str(path), 2)
    assert [m for m in recorder.messages if m.startswith("saved")] == [f"saved {path} at step 2"]


def test_a_nan_loss_ends_the_run_without_saving(tmp_path, monkeypatch):
    trainer = TextTrainer.new(TEXT, TINY, resolve_backend("numpy"))

    def diverged():
        raise DivergedError("training diverged: the loss is nan near step 1")

    monkeypatch.setattr(trainer, "read_loss", diverged)
    path = tmp_path / "run.npz"
    with pytest.raises(DivergedError):
        run_training(trainer, RunLimits(steps=3, log_every=1, save=str(path)), Recorder())
    assert not path.exists() and trainer.saved is None


@pytest.mark.parametrize("where", ["sample", "step", "report"])
def test_any_other_failure_in_the_loop_saves_first(tmp_path, monkeypatch, where):
    trainer = TextTrainer.new(TEXT, TINY, resolve_backend("numpy"))
    recorder = Recorder()
    failure = RuntimeError(f"planted failure in a {where}")
    real_step = trainer.step

    def fail(*args):
        raise failure

    def step():  # the third step raises
        if trainer.step_count == 2:
            fail()
        real_step()

    if where == "sample":
        monkeypatch.setattr(trainer, "sample", fail)
    elif where == "step":
        monkeypatch.setattr(trainer, "step", step)
    else:
        monkeypatch.setattr(recorder, "progress", fail)
    path = tmp_path / "run.npz"
    limits = RunLimits(steps=10, log_every=2, sample_every=2, sample_chars=5, save=str(path))
    with pytest.raises(RuntimeError, match="planted failure"):
        run_training(trainer, limits, recorder)
    assert load_checkpoint(path).step == 2 and f"saved {path} at step 2" in recorder.messages


def test_when_the_rescue_save_fails_too_it_warns_and_the_failure_propagates(tmp_path,
                                                                             monkeypatch):
    trainer = TextTrainer.new(TEXT, TINY, resolve_backend("numpy"))

    def fail(*args):
        raise RuntimeError("planted failure in a sample")

    def no_save(*args):
        raise TextError("cannot write checkpoint: no space; nothing was saved")

    monkeypatch.setattr(trainer, "sample", fail)
    monkeypatch.setattr(trainer, "save_or_fall_back", no_save)
    recorder = Recorder()
    limits = RunLimits(steps=10, sample_every=1, save=str(tmp_path / "run.npz"))
    with pytest.raises(RuntimeError, match="planted failure"):
        run_training(trainer, limits, recorder)
    assert recorder.messages == ["warning: cannot write checkpoint: no space; nothing was saved"]


def test_time_limit_stops_the_run():
    trainer = TextTrainer.new(TEXT, TINY, resolve_backend("numpy"))
    result = run_training(trainer, RunLimits(time_limit=0.05, sample_chars=0), Recorder())
    assert result.reason == "time" and result.seconds >= 0.05


class FakeClock:
    """A wall clock that moves only when told (``now``, seconds)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def taking(clock: FakeClock, seconds: float, action):
    """``action``, moving ``clock`` on by ``seconds`` at each call."""
    def run(*args, **kwargs):
        clock.now += seconds
        return action(*args, **kwargs)
    return run


class Rows(list):
    """A log that keeps its rows."""

    def write(self, row):
        self.append(row)


def test_the_time_limit_log_and_speeds_count_the_seconds_of_training_alone(tmp_path,
                                                                           monkeypatch):
    """An injected clock: a step takes 1 s, a held-out reading, a sample and a save 5 s each.
    The limit of 10 s stops after 10 steps (the wall clock passes 10 s at step 4); the log's
    seconds are the steps' and the speeds over them; the wall time has all of it, up to the
    final save and sample."""
    wall = FakeClock()
    trainer = TextTrainer.new(TEXT, TINY, resolve_backend("numpy"))
    monkeypatch.setattr(trainer, "step", taking(wall, 1.0, trainer.step))
    monkeypatch.setattr(trainer, "held_out_loss", taking(wall, 5.0, lambda: 2.0))
    for name in ("sample", "save"):  # the final save_or_fall_back saves with save
        monkeypatch.setattr(trainer, name, taking(wall, 5.0, getattr(trainer, name)))
    rows, recorder = Rows(), Recorder()
    limits = RunLimits(time_limit=10, log_every=2, valid_every=4, sample_every=3,
                       sample_chars=5, save=str(tmp_path / "m.npz"), save_every=5, log=rows,
                       clock=TrainingClock(wall))
    result = run_training(trainer, limits, recorder)
    assert (result.reason, result.steps, result.training_seconds) == ("time", 10, 10.0)
    assert result.seconds == 10 + 3 * 5 + 3 * 5 + 2 * 5  # readings 4, 8, 10; samples 3, 6,
    # 9; saves 5, 10
    assert [(r.step, r.seconds) for r in rows] == [(2, 2.0), (4, 4.0), (6, 6.0), (8, 8.0),
                                                   (10, 10.0)]
    speed = 2 * trainer.chars_per_step / 2.0  # two steps of 1 s between readings
    assert [r.chars_per_s for r in rows] == [speed] * 5 == [s for _, _, s in recorder.readings]
    assert result.chars_per_second == speed
    assert wall.now == result.seconds + 5 + 5  # then the final save and sample


def test_the_bar_of_a_time_limit_shows_the_seconds_of_training(capsys, corpus, monkeypatch):
    clocks = []

    def reporter(steps, time_limit, clock):
        clocks.append(clock)
        return console.PlainReporter()

    monkeypatch.setattr(console, "make_reporter", reporter)
    code, _, _ = run(capsys, "train-text", str(corpus), *SMALL, "--time-limit", "60",
                     "--steps", "2", "--sample-chars", "0")
    assert code == 0 and len(clocks) == 1
    assert isinstance(clocks[0].__self__, TrainingClock)
    assert clocks[0] == clocks[0].__self__.training


def test_the_first_ctrl_c_asks_to_stop_and_the_second_aborts():
    before = signal.getsignal(signal.SIGINT)  # not Python's own where SIGINT starts ignored
    with console.stop_on_signals(console.StopRequest()) as stop:
        assert not stop()
        os.kill(os.getpid(), signal.SIGINT)
        assert stop()
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
    assert signal.getsignal(signal.SIGINT) is before


def test_a_stop_keeps_its_first_cause_and_only_a_ctrl_c_while_stopping_aborts():
    stop = console.StopRequest()
    assert not stop() and stop.exit_code == 130
    stop.signal(signal.SIGHUP)
    for later in (lambda: stop.ask(console.OUTPUT_LOST, "stdout was lost"),  # a dead terminal
                  lambda: stop.signal(signal.SIGTERM), lambda: stop.signal(signal.SIGHUP)):
        later()
        assert stop() and (stop.status, stop.cause, stop.exit_code) == (129, "SIGHUP", 129)
    with pytest.raises(KeyboardInterrupt):
        stop.signal(signal.SIGINT)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["sigterm", "sighup"])
def test_sigterm_and_sighup_ask_to_stop_and_the_handlers_come_back(signum):
    before = signal.getsignal(signum)
    with console.stop_on_signals(console.StopRequest()) as stop:
        os.kill(os.getpid(), signum)
        os.kill(os.getpid(), signum)  # a repeat does not abort
        assert stop.status == 128 + signum
    assert signal.getsignal(signum) is before


class GoneStdout:
    """A stdout that cannot be written any more (its writes raise ``error``)."""

    encoding = "utf-8"

    def __init__(self, error: OSError):
        self.error = error

    def write(self, text: str) -> int:
        raise self.error

    def flush(self) -> None:
        raise self.error

    def isatty(self) -> bool:
        return False


@pytest.mark.parametrize("error", [BrokenPipeError(errno.EPIPE, "Broken pipe"),
                                   OSError(errno.ENOSPC, "No space left on device"),
                                   OSError(errno.EIO, "Input/output error")],
                         ids=["closed-pipe", "full-disk", "hung-up-terminal"])
def test_a_lost_stdout_asks_to_stop_and_sends_warnings_to_stderr(capsys, monkeypatch, error):
    gone = GoneStdout(error)
    monkeypatch.setattr(sys, "stdout", gone)
    stop = console.StopRequest()
    output = console.Output(stop)
    reporter = console.GuardedReporter(console.PlainReporter(), output)
    reporter.progress(1, 2.0, 100.0)
    assert stop.status == console.OUTPUT_LOST and error.strerror in stop.cause
    assert output.lost is error and sys.stdout is not gone  # silenced: the null device
    print("a library's late line")  # goes nowhere, and raises nothing
    reporter.text("--- sample ---")
    reporter.warn("warning: cannot write checkpoint")
    output.warn("saved run.npz at step 1")
    reporter.close()
    assert capsys.readouterr().err == "warning: cannot write checkpoint\nsaved run.npz at step 1\n"


def test_a_progress_bar_that_finds_stdout_gone_gives_way_to_plain_lines(monkeypatch):
    def no_bar(*args):
        raise BrokenPipeError(errno.EPIPE, "Broken pipe")

    monkeypatch.setattr(console, "make_reporter", no_bar)
    monkeypatch.setattr(sys, "stdout", GoneStdout(BrokenPipeError(errno.EPIPE, "Broken pipe")))
    stop = console.StopRequest()
    reporter = console.GuardedReporter.make(console.Output(stop), None, None)
    assert type(reporter.reporter) is console.PlainReporter and stop.status == 74


@pytest.mark.parametrize("command, status", [("train-text", 74), ("info", 0)])
def test_a_broken_pipe_that_reaches_the_dualtape_command(monkeypatch, command, status):
    def gone(args):
        raise BrokenPipeError(errno.EPIPE, "Broken pipe")

    monkeypatch.setattr(text_cli, "train_text", gone)
    monkeypatch.setattr(cli, "info", gone)
    monkeypatch.setattr(sys, "stdout", GoneStdout(BrokenPipeError(errno.EPIPE, "Broken pipe")))
    assert cli.main([command]) == status


@pytest.mark.parametrize("raised, status, err", [
    (RuntimeError("boom"), 1, "dualtape info: error: RuntimeError: boom\n"),
    (MemoryError(), 1, "dualtape info: error: out of memory\n"),
    (KeyboardInterrupt(), 130, ""),
])
def test_what_escapes_a_command_is_one_line_not_a_traceback(monkeypatch, capsys, raised, status,
                                                            err):
    def escapes(args):
        raise raised

    monkeypatch.setattr(cli, "info", escapes)
    assert cli.main(["info"]) == status
    assert capsys.readouterr() == ("", err)


# --- the command line ------------------------------------------------------------------------


@pytest.fixture
def corpus(tmp_path) -> Path:
    path = tmp_path / "corpus.txt"
    path.write_text(TEXT, encoding="utf-8")
    return path


SMALL = ["--hidden", "8", "--seq-len", "8", "--batch", "2", "--backend", "numpy", "--seed", "4"]


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def fails(capsys, *argv: str, match: str) -> None:
    code, _, err = run(capsys, *argv)
    assert code == 1, err
    assert err.endswith("\n") and err.count("\n") == 1, err
    assert "Traceback" not in err and match in err, err


@pytest.mark.parametrize("command", ["train-text", "sample"])
def test_help(capsys, command):
    with pytest.raises(SystemExit) as exit_:
        cli.main([command, "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: dualtape {command}") and "--temperature" in out


def test_train_save_sample_and_resume_from_the_command_line(capsys, corpus, tmp_path):
    ckpt = str(tmp_path / "model.npz")
    code, out, _ = run(capsys, "train-text", str(corpus), *SMALL, "--steps", "6",
                       "--log-every", "2", "--sample-every", "4", "--sample-chars", "20",
                       "--save", ckpt)
    assert code == 0
    assert "vocabulary: " in out and "step      2  loss" in out and "--- sample at step 4" in out
    assert "stopped (step limit) at step 6" in out and f"saved {ckpt} at step 6" in out
    code, out, _ = run(capsys, "sample", ckpt, "--chars", "40", "--seed", "1", "--prime", "The")
    assert code == 0 and out.startswith("The") and len(out) == 3 + 40 + 1
    assert run(capsys, "sample", ckpt, "--chars", "40", "--seed", "1", "--prime", "The")[1] == out
    code, out, _ = run(capsys, "train-text", "--resume", ckpt, "--steps", "2", "--backend",
                       "numpy", "--sample-chars", "0", "--rate", "0.01")
    assert code == 0 and "resumed" in out and "at step 8" in out


def test_train_text_ends_with_the_sample_command_for_its_checkpoint(capsys, corpus, tmp_path):
    ckpt = str(tmp_path / "my model.npz")
    code, out, _ = run(capsys, "train-text", str(corpus), *SMALL, "--steps", "2",
                       "--sample-chars", "0", "--save", ckpt)
    last = out.splitlines()[-1]
    assert code == 0 and last.startswith(f"checkpoint: {ckpt} (step 2)")
    command = shlex.split(last.partition("write text from it with: ")[2])
    assert command[:2] == ["dualtape", "sample"]
    code, out, _ = run(capsys, *command[1:], "--chars", "5")
    assert code == 0 and len(out) == 5 + 1


def test_train_text_without_save_says_how_to_keep_the_model(capsys, corpus):
    code, out, _ = run(capsys, "train-text", str(corpus), *SMALL, "--steps", "1",
                       "--sample-chars", "0")
    assert code == 0
    assert out.splitlines()[-1].startswith("the model was not saved: run with --save PATH")


def test_train_text_help_states_the_stopping_defaults(capsys):
    with pytest.raises(SystemExit):
        cli.main(["train-text", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "stop after N steps in this run (default: no step limit;" in out
    assert "training (default: no time limit)" in out
    assert "Without --steps or --time-limit it trains until Ctrl-C" in out


def test_the_step_bar_puts_a_space_before_steps(capsys):
    tqdm = pytest.importorskip("tqdm").tqdm
    bar = console.BarReporter(tqdm, steps=None)
    for _ in range(41):
        bar.advance()
    bar.progress(41, 2.5, 1000.0)
    bar.close()
    out = capsys.readouterr().out
    assert "41 steps" in out and "41step" not in out and "loss 2.500" in out
    assert "step     41  loss 2.500  1,000 chars/s\n" in out  # the reading above the bar


def test_with_a_time_limit_the_bar_shows_the_time_used_and_left(capsys):
    tqdm = pytest.importorskip("tqdm").tqdm
    times = iter([100.0, 104.0, 106.5])
    bar = console.BarReporter(tqdm, steps=None, time_limit=10, clock=lambda: next(times))
    bar.advance()
    bar.progress(1, 2.5, 1000.0)
    bar.advance()
    bar.close()
    out = capsys.readouterr().out
    assert " 65%|" in out and "00:06 of 00:10, ETA 00:03, 2 steps, loss 2.500" in out


def test_a_bar_tqdm_refuses_gives_way_to_plain_lines(monkeypatch):
    pytest.importorskip("tqdm")

    class Terminal(GoneStdout):
        def isatty(self) -> bool:
            return True

    def refused(*args, **kwargs):
        raise ValueError("tqdm cannot draw this bar")

    monkeypatch.setattr(sys, "stdout", Terminal(OSError(errno.EIO, "unused")))
    monkeypatch.setattr(console, "BarReporter", refused)
    assert type(console.make_reporter(None, 10.0)) is console.PlainReporter


def test_ctrl_c_saves_and_exits_130(capsys, corpus, tmp_path, monkeypatch):
    class AfterThree(console.StopRequest):
        """A Ctrl-C that arrives during the fourth check."""

        def __call__(self):
            self.calls = getattr(self, "calls", 0) + 1
            if self.calls > 3:
                self.signal(signal.SIGINT)
            return super().__call__()

    monkeypatch.setattr(text_cli, "StopRequest", AfterThree)
    ckpt = tmp_path / "c.npz"
    code, out, _ = run(capsys, "train-text", str(corpus), *SMALL, "--save", str(ckpt),
                       "--sample-chars", "0")
    assert code == 130 and "stopped (interrupted) at step 3" in out
    assert load_checkpoint(ckpt).step == 3


def test_train_text_input_errors(capsys, tmp_path, corpus):
    fails(capsys, "train-text", str(tmp_path / "missing.txt"), match="cannot read")
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    fails(capsys, "train-text", str(empty), match="is empty")
    latin = tmp_path / "latin.txt"
    latin.write_bytes("caf\u00e9 ".encode("latin-1") * 50)
    fails(capsys, "train-text", str(latin), match="--encoding")
    fails(capsys, "train-text", str(latin), "--encoding", "nope", match="unknown text encoding")
    short = tmp_path / "short.txt"
    short.write_text("hello world")
    fails(capsys, "train-text", str(short), "--backend", "numpy", match="--seq-len 50")
    fails(capsys, "train-text", str(tmp_path), match="cannot read")
    fails(capsys, "train-text", str(corpus), "--hidden", "80,x", match="--hidden")
    fails(capsys, "train-text", str(corpus), "--temperature", "0", match="--temperature")
    fails(capsys, "train-text", str(corpus), "--momentum", "1", match="--momentum")
    fails(capsys, "train-text", str(corpus), "--save", str(tmp_path / "no" / "c.npz"),
          match="folder does not exist")


def test_threads_limits_blas_while_training(capsys, corpus):
    pytest.importorskip("threadpoolctl")
    code, out, _ = run(capsys, "train-text", str(corpus), *SMALL, "--threads", "1",
                       "--steps", "1", "--sample-chars", "0")
    assert code == 0
    fails(capsys, "train-text", str(corpus), "--threads", "0", match="--threads")


def test_latin_1_text_trains_with_encoding(capsys, tmp_path):
    latin = tmp_path / "latin.txt"
    latin.write_bytes("caf\u00e9 ".encode("latin-1") * 50)
    code, out, _ = run(capsys, "train-text", str(latin), *SMALL, "--encoding", "latin-1",
                       "--steps", "1", "--sample-chars", "0")
    assert code == 0 and "vocabulary: 6 symbols" in out


@pytest.fixture
def checkpoint(tmp_path) -> Path:
    trainer = TextTrainer.new(TEXT, TINY, resolve_backend("numpy"))
    path = tmp_path / "ok.npz"
    trainer.save(path)
    return path


def test_checkpoint_errors(capsys, tmp_path, checkpoint, corpus):
    fails(capsys, "sample", str(tmp_path / "none.npz"), match="cannot read checkpoint")
    junk = tmp_path / "junk.npz"
    junk.write_bytes(b"not a zip file at all")
    fails(capsys, "sample", str(junk), match="not a dualtape file")
    plain = tmp_path / "plain.npz"
    with dualtape.use_backend("numpy"):
        dualtape.save(dualtape.Network([dualtape.FullyConnected(2, 2, seed=0)]), plain)
    fails(capsys, "sample", str(plain), match="not a train-text checkpoint")
    fails(capsys, "train-text", "--resume", str(plain), match="not a train-text checkpoint")
    fails(capsys, "sample", str(checkpoint), "--temperature", "-1", match="--temperature")
    fails(capsys, "train-text", "--resume", str(checkpoint), "--hidden", "20",
          match="does not match the checkpoint")


def _rewrite(path: Path, change) -> None:
    with np.load(path, allow_pickle=False) as archive:
        arrays = {name: archive[name] for name in archive.files}
    header = json.loads(arrays["__header__"].tobytes().decode())
    change(header, arrays)
    arrays["__header__"] = np.frombuffer(json.dumps(header).encode(), dtype=np.uint8)
    with open(path, "wb") as f:
        np.savez(f, **arrays)


def test_newer_formats_and_other_networks_are_refused(capsys, checkpoint):
    _rewrite(checkpoint, lambda h, a: h["extra"].update(text_format=2))
    fails(capsys, "sample", str(checkpoint), match="newer than this dualtape reads")
    _rewrite(checkpoint, lambda h, a: h.update(version=99))
    fails(capsys, "sample", str(checkpoint), match="format version 99")


def test_a_vocabulary_that_does_not_fit_the_network_is_refused(capsys, checkpoint):
    def smaller(header, arrays):
        header["extra"]["vocabulary"]["symbols"] = header["extra"]["vocabulary"]["symbols"][:-1]

    _rewrite(checkpoint, smaller)
    fails(capsys, "sample", str(checkpoint), match="checkpoint is from another network")


def test_import_dualtape_stays_cheap():
    code = ("import sys, dualtape, dualtape.cli; "
            "bad = [m for m in ('tqdm', 'dualtape.text.model', 'dualtape.text.trainer', "
            "'dualtape.text.config', 'dualtape.text.checkpoint', 'dualtape.text.loop', "
            "'dualtape.benchmarks.report', 'dualtape.benchmarks.references') "
            "if m in sys.modules]; print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_optimizer_state_that_does_not_fit_the_network_is_refused(tmp_path):
    trainer = TextTrainer.new(TEXT, TINY, resolve_backend("numpy"))
    trainer.step()
    path = tmp_path / "trained.npz"
    trainer.save(path)
    assert load_checkpoint(path).trainer(trainer.ids).optimizer.state

    def transpose_momentum(header, arrays):
        key = next(k for k in arrays if k.startswith("extra/optimizer/0/W/"))
        arrays[key] = arrays[key].T
        header["arrays"][key]["shape"].reverse()  # a consistent edit: only the optimizer objects

    _rewrite(path, transpose_momentum)
    with pytest.raises(TextError, match="optimizer state does not fit"):
        load_checkpoint(path).trainer(trainer.ids)


# --- the recurrent cell and dropout (--cell, --dropout) --------------------------------------

CELLS = ["LSTM", "StandardLSTM", "GRU"]
FORMER = {"grenade-lstm": "LSTM", "lstm": "StandardLSTM", "gru": "GRU"}


def test_each_cell_builds_its_layers_with_dropout_between_them():
    with dualtape.use_backend("numpy"):
        for cell in CELLS:
            net = build_text_network(20, [16, 8, 4], seed=1, cell=cell, dropout=0.25)
            kinds = [layer.kind for layer in net.layers]
            assert kinds == [cell, "Dropout", cell, "Dropout", cell, "FullyConnected", "Softmax"]
            assert check_text_network(net, 20) == ([16, 8, 4], cell, 0.25)
        plain = build_text_network(20, [16, 8], seed=1, cell="GRU")
        assert check_text_network(plain, 20) == ([16, 8], "GRU", 0.0)
        # torch's initialisation for torch's cells: uniform in +-1/sqrt(n_out)
        assert np.abs(plain.layers[1].params["W_hh"]).max() <= 1 / np.sqrt(8)
        # the dropout draws no seeds the weights use: the same weights with and without it
        dropped = build_text_network(20, [16, 8], seed=1, cell="gru", dropout=0.5)
        assert_params_equal(host_params(plain), host_params(_without_dropout(dropped)))
        with pytest.raises(ValueError, match="dropout goes between recurrent layers"):
            build_text_network(20, [16], seed=1, dropout=0.5)
        with pytest.raises(ValueError, match="cell must be one of LSTM, StandardLSTM, GRU"):
            build_text_network(20, [16], seed=1, cell="rnn")


def _not_text_models():
    lstm, std, gru = (lambda i, o: dualtape.LSTM(i, o, seed=0), lambda i, o: dualtape.StandardLSTM(
        i, o, seed=0), lambda i, o: dualtape.GRU(i, o, seed=0))
    head = [dualtape.FullyConnected(6, 5, seed=0), dualtape.Softmax()]
    drop = dualtape.Dropout
    return {
        "mixed cells": [lstm(5, 6), std(6, 6)],
        "basic recurrent": [dualtape.BasicRecurrent(5, 6, seed=0)],
        "dropout after the last": [gru(5, 6), drop(0.2)],
        "dropout first": [drop(0.2), gru(5, 6)],
        "two dropouts": [gru(5, 6), drop(0.2), drop(0.2), gru(6, 6)],
        "different rates": [gru(5, 6), drop(0.2), gru(6, 6), drop(0.3), gru(6, 6)],
        "dropout between some": [gru(5, 6), drop(0.2), gru(6, 6), gru(6, 6)],
        "dropout at rate 0": [gru(5, 6), drop(0.0), gru(6, 6)],
        "no recurrent layer": [dualtape.FullyConnected(5, 6, seed=0)],
    }, head


@pytest.mark.parametrize("case", list(_not_text_models()[0]))
def test_check_text_network_refuses_other_layouts(case):
    with dualtape.use_backend("numpy"):
        bodies, head = _not_text_models()
        net = dualtape.RecurrentNetwork(bodies[case] + head)
        with pytest.raises(TextError, match="is not a text model"):
            check_text_network(net, 5)


@pytest.mark.parametrize("cell", CELLS)
def test_each_cell_lowers_the_loss_with_and_without_dropout(cell):
    for dropout in (0.0, 0.3):
        config = dataclasses.replace(TINY, hidden=[12, 12], cell=cell, dropout=dropout)
        trainer = TextTrainer.new(TEXT, config, resolve_backend("numpy"))
        losses = _losses(trainer, 25)
        assert np.mean(losses[-5:]) < losses[0] - 0.4, (cell, dropout, losses)


@pytest.mark.parametrize("cell", CELLS)
def test_a_resumed_run_with_dropout_draws_the_masks_it_would_have(tmp_path, cell):
    config = dataclasses.replace(TINY, hidden=[10, 6], cell=cell, dropout=0.4)
    first = TextTrainer.new(TEXT, config, resolve_backend("numpy"))
    _losses(first, 3)
    first.sample(10, 1.0)  # neither sampling nor the save point's loss draws a mask
    first.save(tmp_path / "c.npz")
    expected = _losses(first, 3)
    checkpoint = load_checkpoint(tmp_path / "c.npz")
    assert checkpoint.config == config and len(checkpoint.rngs["dropout"]) == 1
    resumed = checkpoint.trainer(checkpoint.vocab.encode(TEXT))
    np.testing.assert_allclose(_losses(resumed, 3), expected, rtol=1e-6)
    reseeded = checkpoint.trainer(resumed.ids, dataclasses.replace(config, seed=8), reseed=True)
    fresh = TextTrainer.new(TEXT, dataclasses.replace(config, seed=8), resolve_backend("numpy"))
    assert [g.bit_generator.state for g in reseeded.dropout_rngs] == [
        g.bit_generator.state for g in fresh.dropout_rngs]


def _without_dropout(net):
    return dualtape.RecurrentNetwork([layer for layer in net.layers if layer.kind != "Dropout"])


def test_dropout_is_off_in_samples_and_back_on_for_training():
    config = dataclasses.replace(TINY, hidden=[12, 12], dropout=0.5)
    trainer = TextTrainer.new(TEXT, config, resolve_backend("numpy"))
    _losses(trainer, 3)
    state = trainer.sample_rng.bit_generator.state
    masks = [g.bit_generator.state for g in trainer.dropout_rngs]
    drawn = trainer.sample(40, 0.9, prime="The")
    trainer.sample_rng.bit_generator.state = state
    plain = sample(_without_dropout(trainer.net), trainer.vocab, 40, temperature=0.9,
                   rng=trainer.sample_rng, prime="The")
    assert drawn == plain
    trainer.check_finite()
    assert [g.bit_generator.state for g in trainer.dropout_rngs] == masks  # none drawn
    assert all(layer.training for layer in trainer.net.layers if layer.kind == "Dropout")
    trainer.step()
    assert [g.bit_generator.state for g in trainer.dropout_rngs] != masks


MODEL = ["--hidden", "8,8", "--seq-len", "8", "--batch", "2", "--backend", "numpy",
         "--seed", "4"]


@pytest.mark.parametrize("cell", CELLS)
def test_each_cell_trains_saves_samples_and_resumes_from_the_command_line(capsys, corpus,
                                                                          tmp_path, cell):
    ckpt = str(tmp_path / "model.npz")
    code, out, err = run(capsys, "train-text", str(corpus), *MODEL, "--cell", cell,
                         "--dropout", "0.3", "--steps", "4", "--sample-chars", "10",
                         "--save", ckpt)
    assert code == 0, err
    assert f"network: {cell}(" in out and "-> Dropout(0.3) ->" in out
    assert "compiling" not in out or cell == "LSTM"
    code, out, err = run(capsys, "sample", ckpt, "--chars", "30", "--seed", "1", "--prime", "The")
    assert code == 0 and len(out) == 3 + 30 + 1, err
    assert run(capsys, "sample", ckpt, "--chars", "30", "--seed", "1", "--prime", "The")[1] == out
    net = load_checkpoint(ckpt).net
    expected = sample(_without_dropout(net), load_checkpoint(ckpt).vocab, 30, temperature=0.8,
                      rng=np.random.default_rng(1), prime="The")
    assert out == "The" + expected + "\n"  # no mask in the samples
    code, out, err = run(capsys, "train-text", "--resume", ckpt, "--steps", "2", "--backend",
                         "numpy", "--sample-chars", "0")  # the cell and dropout from the file
    assert code == 0 and "at step 6" in out and f"network: {cell}(" in out, err
    code, out, err = run(capsys, "train-text", "--resume", ckpt, "--steps", "1", "--cell", cell,
                         "--dropout", "0.3", "--backend", "numpy", "--sample-chars", "0")
    assert code == 0, err
    other = next(c for c in CELLS if c != cell)
    fails(capsys, "train-text", "--resume", ckpt, "--cell", other,
          match=f"--cell {other} does not match the checkpoint ({cell}); leave it out")
    fails(capsys, "train-text", "--resume", ckpt, "--dropout", "0.1",
          match="--dropout 0.1 does not match the checkpoint (0.3); leave it out")


@pytest.mark.parametrize("former, cell", FORMER.items())
def test_the_former_cell_names_are_taken_and_read_as_class_names(capsys, corpus, tmp_path,
                                                                 former, cell):
    assert TrainConfig(cell=former).cell == cell
    with dualtape.use_backend("numpy"):
        assert build_text_network(5, [4], cell=former).layers[0].kind == cell
    ckpt = tmp_path / "model.npz"
    code, out, err = run(capsys, "train-text", str(corpus), *MODEL, "--cell", former,
                         "--steps", "2", "--sample-chars", "0", "--save", str(ckpt))
    assert code == 0 and f"network: {cell}(" in out, err
    assert load_checkpoint(ckpt).config.cell == cell
    _rewrite(ckpt, lambda h, a: h["extra"]["config"].update(cell=former))  # an older checkpoint
    assert load_checkpoint(ckpt).config.cell == cell
    code, out, err = run(capsys, "train-text", "--resume", str(ckpt), "--cell", cell, "--steps",
                         "1", "--backend", "numpy", "--sample-chars", "0")
    assert code == 0, err


def test_dropout_needs_two_recurrent_layers(capsys, corpus):
    fails(capsys, "train-text", str(corpus), *SMALL, "--dropout", "0.2",
          match="--dropout 0.2 needs two recurrent layers or more (it goes between them) but "
          "--hidden 8 has one")
    code, _, err = run(capsys, "train-text", str(corpus), *SMALL, "--dropout", "0",
                       "--steps", "1", "--sample-chars", "0")
    assert code == 0, err
