"""train-text and sample as a hostile user meets them: edited checkpoints, files in the way of
--save, failed saves, SIGTERM, huge sizes and corpora, NaN weights and long samples."""

from __future__ import annotations

import math
import os
import select
import signal
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from dualtape.backend import resolve_backend
from dualtape.text import model as text
from dualtape.text import trainer as text_train
from dualtape.text.model import TextError, generate, read_corpus
from dualtape.text.trainer import (
    RunLimits,
    TextTrainer,
    TrainConfig,
    estimate_memory,
    load_checkpoint,
    run_training,
)

from .test_text import SMALL, TEXT, TINY, Recorder, _rewrite, checkpoint, corpus, fails, run

__all__ = ["checkpoint", "corpus"]  # fixtures shared with test_text
ONE_STEP = [*SMALL, "--steps", "1", "--sample-chars", "0"]


@pytest.fixture
def trained(capsys, corpus, tmp_path) -> Path:
    """A checkpoint written by `train-text --save` (so it records its corpus's fingerprint)."""
    path = tmp_path / "trained.npz"
    code, _, err = run(capsys, "train-text", str(corpus), *SMALL, "--steps", "2",
                       "--sample-chars", "0", "--save", str(path))
    assert code == 0, err
    return path


def edit_config(path: Path, **changes) -> None:
    _rewrite(path, lambda header, arrays: header["extra"]["config"].update(changes))


# --- a checkpoint's stored values pass the command line's checks ------------------------------


TAMPERED = [
    ({"seq_len": -3}, "seq_len must be a positive integer, got -3"),
    ({"seq_len": 0}, "seq_len must be a positive integer, got 0"),
    ({"seq_len": "50"}, "seq_len must be a positive integer, got '50'"),
    ({"batch": True}, "batch must be a positive integer, got True"),
    ({"clip": -1}, "clip must be a finite number, 0 (off) or more, got -1"),
    ({"clip": math.inf}, "clip must be a finite number, 0 (off) or more, got inf"),
    ({"rate": 0}, "rate must be a positive finite number"),
    ({"momentum": 1.0}, "momentum must be in [0, 1)"),
    ({"dtype": "float16"}, "dtype must be float32 or float64, got 'float16'"),
    ({"optimizer": "rmsprop"}, "optimizer must be one of sgd, adam"),
    ({"hidden": ["12"]}, "hidden must be a list of positive layer sizes"),
    ({"seed": -1}, "seed must be an integer from 0"),
    ({"corpus": 5}, "corpus must be a file path or null"),
]


@pytest.mark.parametrize("changes, message", TAMPERED, ids=[next(iter(c)) + "=" + repr(
    next(iter(c.values()))) for c, _ in TAMPERED])
def test_a_checkpoint_with_invalid_stored_values_is_refused(capsys, checkpoint, changes, message):
    edit_config(checkpoint, **changes)
    with pytest.raises(TextError, match="the checkpoint's " + message.replace("[", r"\[")
                       .replace("(", r"\(").replace(")", r"\)")):
        load_checkpoint(checkpoint)
    fails(capsys, "sample", str(checkpoint), match=message)
    fails(capsys, "train-text", "--resume", str(checkpoint), "--steps", "1", match=message)


@pytest.mark.parametrize("step", [-5, "7", 2.5])
def test_a_checkpoint_with_an_invalid_step_is_refused(capsys, checkpoint, step):
    _rewrite(checkpoint, lambda header, arrays: header["extra"].update(step=step))
    fails(capsys, "sample", str(checkpoint), match=f"step must be an integer, 0 or more, got "
          f"{step!r}")


@pytest.mark.parametrize("flag, value", [("--clip", "inf"), ("--rate", "inf"), ("--rate", "nan"),
                                         ("--l2", "inf"), ("--temperature", "inf"),
                                         ("--seed", "-1")])
def test_options_must_be_finite(capsys, corpus, flag, value):
    fails(capsys, "train-text", str(corpus), *ONE_STEP, flag, value, match=f"{flag} must be")


# --- what a resumed run reads ----------------------------------------------------------------


def test_a_checkpoint_edited_to_name_another_file_does_not_read_it(capsys, trained, tmp_path,
                                                                   corpus):
    secret = tmp_path / "secret.txt"
    secret.write_text("password: hunter2\n" * 50)
    edit_config(trained, corpus=str(secret))
    fails(capsys, "train-text", "--resume", str(trained), "--steps", "1",
          match="is not the text the checkpoint was trained on")
    code, out, _ = run(capsys, "train-text", str(corpus), "--resume", str(trained), "--steps",
                       "1", "--sample-chars", "0")
    assert code == 0 and "resumed" in out


def test_a_changed_corpus_needs_file(capsys, trained, corpus):
    code, out, _ = run(capsys, "train-text", "--resume", str(trained), "--steps", "1",
                       "--sample-chars", "0")
    assert code == 0 and str(corpus) in out
    corpus.write_text(TEXT.upper())
    fails(capsys, "train-text", "--resume", str(trained), "--steps", "1",
          match="give the text as FILE")


@pytest.mark.parametrize("target", ["/dev/zero", "folder"])
def test_a_checkpoint_naming_something_other_than_a_regular_file_is_refused(
        capsys, trained, tmp_path, target):
    edit_config(trained, corpus=str(tmp_path) if target == "folder" else target)
    fails(capsys, "train-text", "--resume", str(trained), "--steps", "1",
          match="records no fingerprint of a regular file")


def test_a_checkpoint_without_a_fingerprint_needs_file(capsys, checkpoint, corpus):
    edit_config(checkpoint, corpus=str(corpus))  # as saved before fingerprints were recorded
    fails(capsys, "train-text", "--resume", str(checkpoint), "--steps", "1",
          match="records no fingerprint")


# --- --save is checked before training -------------------------------------------------------


def test_save_refuses_to_overwrite_a_file_that_is_not_a_dualtape_file(capsys, corpus):
    before = corpus.read_bytes()
    fails(capsys, "train-text", str(corpus), *SMALL, "--steps", "1", "--save", str(corpus),
          match="exists and is not a dualtape file")
    assert corpus.read_bytes() == before


def test_save_replaces_another_runs_checkpoint_only_with_overwrite(capsys, corpus, trained):
    fails(capsys, "train-text", str(corpus), *ONE_STEP, "--save", str(trained),
          match=f"--save {trained} (step 2) is another run's checkpoint; refusing to replace")
    assert load_checkpoint(trained).step == 2
    code, out, _ = run(capsys, "train-text", str(corpus), *SMALL, "--steps", "3",
                       "--sample-chars", "0", "--save", str(trained), "--overwrite")
    assert code == 0 and load_checkpoint(trained).step == 3


def test_save_destinations_that_cannot_be_written_are_refused_before_training(
        capsys, corpus, trained, tmp_path):
    trained.chmod(0o444)
    code, out, err = run(capsys, "train-text", str(corpus), *SMALL, "--steps", "1",
                         "--save", str(trained))
    assert code == 1 and "read-only" in err and "step" not in out
    fails(capsys, "train-text", str(corpus), *ONE_STEP, "--save", str(tmp_path), match="folder")
    fails(capsys, "train-text", str(corpus), *ONE_STEP, "--save", str(tmp_path / "no" / "c.npz"),
          match="folder does not exist")


# --- failed saves ----------------------------------------------------------------------------


def failing_saves(monkeypatch, refused: set[str]) -> None:
    """``text_train.save`` fails with a full disk for the paths in ``refused``."""
    real = text_train.save

    def save(net, path, **kwargs):
        if str(path) in refused:
            raise OSError(28, "No space left on device", str(path))
        real(net, path, **kwargs)

    monkeypatch.setattr(text_train, "save", save)


def test_a_failed_periodic_save_warns_and_training_goes_on(tmp_path, monkeypatch):
    target = str(tmp_path / "run.npz")
    failing_saves(monkeypatch, {target})
    trainer = TextTrainer.new(TEXT, TINY, resolve_backend("numpy"))
    recorder = Recorder()
    result = run_training(trainer, RunLimits(steps=4, save=target, save_every=2,
                                             sample_chars=0), recorder)
    warnings = [m for m in recorder.messages if m.startswith("warning: cannot write")]
    assert result.steps == 4 and len(warnings) == 3 and "No space left" in warnings[0]
    fallback = tmp_path / "run.step4.npz"
    assert f"saved {fallback} at step 4" in recorder.messages
    assert load_checkpoint(fallback).step == 4 and not Path(target).exists()


def test_when_every_save_fails_the_error_names_each_try(tmp_path, monkeypatch):
    target = tmp_path / "run.npz"
    fallbacks = [tmp_path / "run.step1.npz", Path(text_train.tempfile.gettempdir()) /
                 "run.step1.npz"]
    failing_saves(monkeypatch, {str(target), *map(str, fallbacks)})
    trainer = TextTrainer.new(TEXT, TINY, resolve_backend("numpy"))
    with pytest.raises(TextError, match="nothing was saved") as info:
        run_training(trainer, RunLimits(steps=1, save=str(target), sample_chars=0), Recorder())
    assert all(str(p) in str(info.value) for p in [target, *fallbacks])


def test_the_final_save_comes_before_the_final_sample(capsys, tmp_path, monkeypatch, corpus):
    def interrupted_sample(*args, **kwargs):
        raise KeyboardInterrupt  # a second Ctrl-C while the last sample is drawn

    monkeypatch.setattr(TextTrainer, "sample", interrupted_sample)
    target = tmp_path / "run.npz"
    code, out, _ = run(capsys, "train-text", str(corpus), *SMALL, "--steps", "3",
                       "--sample-every", "0", "--save", str(target))
    assert code == 130 and f"aborted at step 3; saved {target} at step 3" in out
    assert load_checkpoint(target).step == 3


# --- signals (real processes) ----------------------------------------------------------------


def wait_for_line(proc: subprocess.Popen, start: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], deadline - time.monotonic())
        line = proc.stdout.readline() if ready else ""
        if line.startswith(start):
            return
        if not line and proc.poll() is not None:
            break
    proc.kill()
    pytest.fail(f"no line starting {start!r}: {proc.communicate()}")


@pytest.mark.parametrize("signum, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)],
                         ids=["sigterm", "sigint"])
def test_a_signal_stops_training_saves_and_exits_128_plus_the_signal(corpus, tmp_path, signum,
                                                                     code):
    target = tmp_path / "run.npz"
    proc = subprocess.Popen(
        [sys.executable, "-m", "dualtape.cli", "train-text", str(corpus), *SMALL,
         "--log-every", "1", "--sample-chars", "0", "--save", str(target)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    wait_for_line(proc, "step ")
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err
    assert "stopped (interrupted)" in out and f"saved {target}" in out
    assert load_checkpoint(target).step > 0


# --- sizes -----------------------------------------------------------------------------------


@pytest.mark.parametrize("option", [("--hidden", "100000"), ("--batch", "100000000")])
def test_a_model_larger_than_memory_is_refused_in_one_line(capsys, corpus, option):
    fails(capsys, "train-text", str(corpus), "--seq-len", "8", "--backend", "numpy", *option,
          match="GiB free; use a smaller")


def test_resuming_with_a_batch_larger_than_memory_is_refused(capsys, checkpoint):
    fails(capsys, "train-text", "--resume", str(checkpoint), "--batch", "100000000",
          match="GiB free; use a smaller")


def test_running_out_of_memory_anyway_is_one_line(capsys, corpus, monkeypatch):
    def no_memory(*args):
        raise MemoryError

    monkeypatch.setattr(TextTrainer, "new", no_memory)
    fails(capsys, "train-text", str(corpus), *ONE_STEP, match="out of memory while building")
    monkeypatch.undo()
    monkeypatch.setattr(TextTrainer, "step", no_memory)
    fails(capsys, "train-text", str(corpus), *ONE_STEP, match="out of memory at step 0")


def test_a_checkpoint_too_large_for_memory_is_one_line(capsys, checkpoint, monkeypatch):
    def no_memory(*args, **kwargs):
        raise MemoryError

    monkeypatch.setattr(text_train, "load_with_extra", no_memory)
    fails(capsys, "sample", str(checkpoint), match="does not fit in memory")


@pytest.mark.parametrize("config", [
    TrainConfig(hidden=[80, 80], seed=1),
    TrainConfig(hidden=[64], batch=64, seq_len=20, optimizer="adam", rate=0.01, seed=1),
    TrainConfig(hidden=[48], batch=128, seq_len=60, dtype="float64", seed=1),
    TrainConfig(hidden=[256], batch=16, seq_len=30, seed=1),
], ids=["default", "adam", "float64-long", "wide"])
def test_the_memory_estimate_covers_a_measured_step_within_three_times(config):
    # Measured on numpy: 1.1x (default) to 1.9x (float64-long) the traced peak.
    corpus_text = read_corpus(None)
    tracemalloc.start()
    try:
        trainer = TextTrainer.new(corpus_text, config, resolve_backend("numpy"))
        trainer.step()
        trainer.step()
        peak = tracemalloc.get_traced_memory()[1] - trainer.ids.nbytes
    finally:
        tracemalloc.stop()
    estimate = estimate_memory(config, len(trainer.vocab))
    assert peak <= estimate <= 3 * peak


def test_a_corpus_over_the_size_cap_is_refused(capsys, corpus):
    fails(capsys, "train-text", "/dev/zero", *ONE_STEP, match="larger than 64 MB")
    fails(capsys, "train-text", str(corpus), *ONE_STEP, "--max-corpus-mb", "0.0001",
          match="larger than 0.0001 MB; give a smaller text or raise --max-corpus-mb")
    code, _, _ = run(capsys, "train-text", str(corpus), *SMALL, "--max-corpus-mb", "0.01",
                     "--steps", "1", "--sample-chars", "0")
    assert code == 0


# --- sampling --------------------------------------------------------------------------------


def test_generate_yields_text_before_the_whole_sample_is_drawn():
    trainer = TextTrainer.new(TEXT, TINY, resolve_backend("numpy"))
    pieces = generate(trainer.net, trainer.vocab, 10**9, rng=np.random.default_rng(0))
    assert len(next(pieces)) == 1


def test_ctrl_c_while_sampling_keeps_what_was_printed(capsys, checkpoint, monkeypatch):
    real, calls = text.choose, []

    def choose(*args):
        calls.append(1)
        if len(calls) > 30:
            raise KeyboardInterrupt
        return real(*args)

    monkeypatch.setattr(text, "choose", choose)
    code, out, _ = run(capsys, "sample", str(checkpoint), "--chars", "1000", "--prime", "The")
    assert code == 130 and out.startswith("The") and len(out) == 3 + 30 + 1


def test_a_checkpoint_with_nan_weights_is_refused_without_blaming_the_rate(capsys, checkpoint,
                                                                           corpus):
    def poison(header, arrays):
        arrays["layer0/W"] = np.full_like(arrays["layer0/W"], np.nan)

    _rewrite(checkpoint, poison)
    for argv in (["sample", str(checkpoint)],
                 ["train-text", str(corpus), "--resume", str(checkpoint), "--steps", "2"]):
        code, _, err = run(capsys, *argv)
        assert code == 1 and "weights hold NaN" in err and "--rate" not in err
        assert err.count("\n") == 1 and "Traceback" not in err


def test_nan_while_sampling_is_one_line(capsys, checkpoint, monkeypatch):
    def nan_choose(*args):
        raise FloatingPointError("sample: the network gives no usable probabilities (NaN?)")

    monkeypatch.setattr(text, "choose", nan_choose)
    code, _, err = run(capsys, "sample", str(checkpoint))
    assert code == 1 and "became NaN or infinite while sampling" in err
    assert "Traceback" not in err
