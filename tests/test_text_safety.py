"""train-text and sample as a hostile user meets them: edited checkpoints, files in the way of
--save, failed saves, SIGTERM, huge sizes and corpora, NaN weights and long samples."""

from __future__ import annotations

import dataclasses
import math
import os
import pty
import select
import shlex
import signal
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from dualtape import spare
from dualtape.backend import resolve_backend
from dualtape.text import checkpoint as text_checkpoint
from dualtape.text import cli as text_cli
from dualtape.text import console
from dualtape.text import model as text
from dualtape.text import trainer as text_train
from dualtape.text.checkpoint import load_checkpoint
from dualtape.text.config import TrainConfig
from dualtape.text.loop import RunLimits, run_training
from dualtape.text.memory import estimate_memory
from dualtape.text.model import TextError, generate, read_corpus
from dualtape.text.trainer import TextTrainer

from .helpers import HOLD_LOCK
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
    ({"cell": "rnn"}, "cell must be one of LSTM, StandardLSTM, GRU, got 'rnn'"),
    ({"cell": ["lstm"]}, "cell must be one of LSTM, StandardLSTM, GRU, got ['lstm']"),
    ({"dropout": 1.0}, "dropout must be a number in [0, 1), got 1.0"),
    ({"dropout": "0.2"}, "dropout must be a number in [0, 1), got '0.2'"),
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


def drop(key):
    return lambda extra: extra.pop(key)


def set_in(*keys, value):
    """An edit setting ``extra[k1][k2]...`` to ``value``."""
    def edit(extra):
        target = extra
        for key in keys[:-1]:
            target = target[key]
        target[keys[-1]] = value
    return edit


def drop_in(*keys):
    def edit(extra):
        target = extra
        for key in keys[:-1]:
            target = target[key]
        del target[keys[-1]]
    return edit


REQUIRED_FIELDS = [f.name for f in dataclasses.fields(TrainConfig)
                   if f.name not in text_checkpoint.OPTIONAL_FIELDS]
DAMAGED = "the checkpoint's training state is damaged"
EDITED_STATE = [
    *[(set_in("text_format", value=v), "text_format must be a format number from 1")
      for v in (0, -1, True, "1", 1.5)],
    (drop("text_format"), "is not a train-text checkpoint"),
    (drop("vocabulary"), DAMAGED + " (not a vocabulary description)"),
    (set_in("vocabulary", "annotate_capitals", value=0), DAMAGED),  # false, but not False
    (set_in("vocabulary", "symbols", value="\ue000aa"), DAMAGED),
    (drop("config"), DAMAGED + " ('config')"),
    (set_in("config", value=[1, 2]), "config is a list, not a mapping"),
    *[(drop_in("config", name), f"config lacks {name}") for name in REQUIRED_FIELDS],
    (set_in("config", "colour", value="red"), DAMAGED),
    (set_in("config", "dtype", value="float64"), "the network is float32 but its configuration"),
    (set_in("config", "annotate_capitals", value=True), "capital annotation (False) differs"),
    (set_in("config", "vocab", value=3), "more than its configuration's --vocab 3"),
    (set_in("config", "hidden", value=[9]), "hidden sizes [8] differ"),
    (set_in("config", "cell", value="gru"),
     "the network's cell LSTM differs from its recorded configuration's GRU"),
    (set_in("config", "dropout", value=0.2),
     "the network's dropout 0 differs from its recorded configuration's 0.2"),
    (set_in("rng", "dropout", value={}), DAMAGED + " (rng's dropout is a dict, not a list"),
    (set_in("rng", "dropout", value=[{"bit_generator": "MT19937"}]), DAMAGED),
    (set_in("rng", "dropout", value=[]), None),  # no Dropout layers, no states: as it should be
    (set_in("config", "corpus_sha256", value="g" * 64), "corpus_sha256 must be a SHA-256"),
    (drop("step"), DAMAGED + " ('step')"),
    (drop("rng"), DAMAGED + " ('rng')"),
    (set_in("rng", value=[1, 2]), DAMAGED),
    (drop_in("rng", "windows"), "rng holds ['samples'], not the states of windows and samples"),
    (drop_in("rng", "samples"), "rng holds ['windows'], not the states of windows and samples"),
    (set_in("rng", "more", value={}), "not the states of windows and samples"),
    (drop_in("rng", "windows", "state", "inc"), DAMAGED + " ('inc')"),
    (drop_in("rng", "samples", "has_uint32"), DAMAGED + " ('has_uint32')"),
    (drop_in("rng", "windows", "state"), DAMAGED + " ('state')"),
    (set_in("rng", "windows", "state", "state", value=2**200), DAMAGED),
    (set_in("rng", "samples", "state", "inc", value=-1), DAMAGED),
    (set_in("rng", "windows", "state", "state", value="x"), DAMAGED),
    (set_in("rng", "windows", "bit_generator", value="MT19937"), DAMAGED),
]


@pytest.mark.parametrize("edit, message", EDITED_STATE, ids=range(len(EDITED_STATE)))
def test_every_field_of_the_training_state_edited_or_removed_is_one_line(capsys, trained,
                                                                         corpus, edit, message):
    _rewrite(trained, lambda header, arrays: edit(header["extra"]))
    if message is None:  # an edit that changes nothing that matters
        assert run(capsys, "sample", str(trained), "--chars", "3")[0] == 0
        return
    fails(capsys, "sample", str(trained), match=message)
    fails(capsys, "train-text", str(corpus), "--resume", str(trained), "--steps", "1",
          match=message)


def test_the_stored_vocabulary_size_must_hold_the_vocabulary(capsys, trained):
    symbols = load_checkpoint(trained).vocab.characters
    edit_config(trained, vocab=symbols)
    assert run(capsys, "sample", str(trained), "--chars", "3")[0] == 0
    edit_config(trained, vocab=symbols - 1)
    fails(capsys, "sample", str(trained), match=f"the vocabulary keeps {symbols} characters, "
          f"more than its configuration's --vocab {symbols - 1}")


def edit_optimizer(path: Path, change) -> None:
    """Apply ``change(state)`` to the checkpoint's optimizer arrays (``{"0/W/m": array,
    ...}``), keeping the header's table of arrays in step."""
    def rewrite(header, arrays):
        state = {k[len("extra/optimizer/"):]: arrays.pop(k) for k in list(arrays)
                 if k.startswith("extra/optimizer/")}
        for key in list(header["arrays"]):
            if key.startswith("extra/optimizer/"):
                del header["arrays"][key]
        change(state)
        for key, value in state.items():
            arrays[f"extra/optimizer/{key}"] = value
            header["arrays"][f"extra/optimizer/{key}"] = {"dtype": value.dtype.str,
                                                          "shape": list(value.shape)}
    _rewrite(path, rewrite)


def poison_momentum(state):
    state["0/W/m"] = state["0/W/m"] * np.nan


def drop_one_momentum(state):
    del state["0/b/m"]


def more_steps(state):
    state["steps"] = np.asarray(5)


def no_state(state):
    state.clear()


@pytest.mark.parametrize("change, message, when", [
    (poison_momentum, "the optimizer state holds NaN or infinity", "load"),
    (drop_one_momentum, "optimizer state covers 4 of the 5 parameters", "resume"),
    (more_steps, "optimizer has taken 5 steps but the checkpoint is at step 2", "resume"),
    (no_state, "optimizer has taken 0 steps but the checkpoint is at step 2", "resume"),
], ids=["nan", "partial", "steps", "removed"])
def test_an_edited_optimizer_state_is_refused(capsys, trained, corpus, change, message, when):
    edit_optimizer(trained, change)
    if when == "load":
        fails(capsys, "sample", str(trained), match=message)
    else:
        assert run(capsys, "sample", str(trained), "--chars", "3")[0] == 0  # sampling needs none
    fails(capsys, "train-text", str(corpus), "--resume", str(trained), "--steps", "1",
          match=message)


def test_a_checkpoint_from_before_the_cell_and_dropout_is_grenades_lstm(capsys, trained,
                                                                         corpus):
    def old(header, arrays):
        for name in ("cell", "dropout"):
            header["extra"]["config"].pop(name)

    _rewrite(trained, old)
    assert load_checkpoint(trained).config.cell == "LSTM"
    code, out, err = run(capsys, "train-text", str(corpus), "--resume", str(trained),
                         "--steps", "1", "--sample-chars", "0", "--cell", "grenade-lstm")
    assert code == 0 and "resumed" in out, err


@pytest.fixture
def with_dropout(capsys, corpus, tmp_path) -> Path:
    path = tmp_path / "dropout.npz"
    code, _, err = run(capsys, "train-text", str(corpus), *SMALL, "--hidden", "8,8,8",
                       "--dropout", "0.2", "--steps", "2", "--sample-chars", "0",
                       "--save", str(path))
    assert code == 0, err
    return path


@pytest.mark.parametrize("edit, message", [
    (drop_in("rng", "dropout"), "its rng holds 0 dropout generator states but the network has "
     "2 Dropout layers"),
    (lambda extra: extra["rng"]["dropout"].pop(), "its rng holds 1 dropout generator states"),
    (set_in("config", "dropout", value=0.3), "the network's dropout 0.2 differs"),
    (set_in("config", "dropout", value=0), "the network's dropout 0.2 differs"),
], ids=["no states", "one state", "another rate", "none"])
def test_a_checkpoint_with_dropout_keeps_its_generators_and_rate(capsys, with_dropout, corpus,
                                                                 edit, message):
    _rewrite(with_dropout, lambda header, arrays: edit(header["extra"]))
    fails(capsys, "sample", str(with_dropout), match=message)
    fails(capsys, "train-text", str(corpus), "--resume", str(with_dropout), "--steps", "1",
          match=message)


def test_a_checkpoint_from_before_the_fingerprint_still_resumes_with_file(capsys, trained,
                                                                          corpus):
    _rewrite(trained, lambda header, arrays: header["extra"]["config"].pop("corpus_sha256"))
    code, out, err = run(capsys, "train-text", str(corpus), "--resume", str(trained),
                         "--steps", "1", "--sample-chars", "0")
    assert code == 0 and "resumed" in out, err


def test_a_corpus_given_relative_is_found_again_by_a_resume_from_another_folder(
        capsys, corpus, tmp_path, monkeypatch):
    monkeypatch.chdir(corpus.parent)
    model = tmp_path / "model.npz"
    code, _, err = run(capsys, "train-text", corpus.name, *ONE_STEP, "--save", str(model))
    assert code == 0, err
    assert load_checkpoint(model).config.corpus == str(corpus.resolve())
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")  # no corpus.txt here: the recorded path serves
    code, out, err = run(capsys, "train-text", "--resume", str(model), *ONE_STEP[-4:])
    assert code == 0 and load_checkpoint(model).step == 2, err


REFUSED_OPTIONS = [
    ("--steps", "-1"), ("--log-every", "0"), ("--log-every", "-1"), ("--sample-every", "-1"),
    ("--save-every", "-1"), ("--sample-chars", "-1"), ("--sample-chars", "100001"),
    *[("--time-limit", v) for v in ("0", "-1", "inf", "nan")],
    *[("--temperature", v) for v in ("0", "-1", "inf", "nan")],
    *[("--max-corpus-mb", v) for v in ("0", "-1", "inf", "nan")],
    ("--threads", "0"), ("--threads", "-1"),
    *[(flag, v) for flag in ("--vocab", "--seq-len", "--batch") for v in ("0", "-1")],
    *[("--rate", v) for v in ("0", "-1", "inf", "nan")],
    *[("--momentum", v) for v in ("-1", "1", "inf", "nan")],
    *[(flag, v) for flag in ("--l2", "--clip") for v in ("-1", "inf", "nan")],
    ("--seed", "-1"), ("--seed", str(2**63)), ("--hidden", "0"), ("--hidden", "-4"),
    ("--save", ""), ("--resume", ""),
    *[("--dropout", v) for v in ("-0.1", "1", "1.5", "inf", "nan")],
]


@pytest.mark.parametrize("flag, value", REFUSED_OPTIONS)
def test_out_of_range_options_are_refused_in_one_line(capsys, corpus, flag, value):
    fails(capsys, "train-text", str(corpus), *ONE_STEP, flag, value, match=f"{flag} must be")


HUGE = str(10**18)
ACCEPTED_OPTIONS = [
    ("--steps", "0"), ("--time-limit", "1e300"), ("--log-every", HUGE),
    ("--sample-every", HUGE), ("--sample-every", "0"), ("--save-every", HUGE),
    ("--save-every", "0"), ("--temperature", "1e300"), ("--temperature", "1e-300"),
    ("--max-corpus-mb", "1e300"), ("--vocab", str(10**30)), ("--clip", "1e300"),
    ("--clip", "0"), ("--momentum", "0"), ("--l2", "0"), ("--seed", "0"),
    ("--seed", str(2**63 - 1)),
]


@pytest.mark.parametrize("flag, value", ACCEPTED_OPTIONS)
def test_extreme_options_that_make_sense_run(capsys, corpus, flag, value):
    code, out, err = run(capsys, "train-text", str(corpus), *SMALL, "--steps", "1",
                         "--sample-chars", "5", flag, value)
    assert code == 0 and "stopped (step limit)" in out or flag == "--steps", err


@pytest.mark.parametrize("flag, value, message", [
    ("--seq-len", str(10**9), "needs at least 1000000001"),
    ("--batch", str(10**12), "GiB free; use a smaller"),
    ("--hidden", str(10**9), "GiB free; use a smaller"),
    ("--rate", "1e300", "training diverged"),
    ("--l2", "1e300", "training diverged"),
], ids=["seq-len", "batch", "hidden", "rate", "l2"])
def test_huge_options_that_cannot_run_are_one_line(capsys, corpus, tmp_path, flag, value,
                                                   message):
    fails(capsys, "train-text", str(corpus), *ONE_STEP, "--save", str(tmp_path / "m.npz"),
          flag, value, match=message)
    assert not (tmp_path / "m.npz").exists()


def test_options_that_do_not_parse_are_argparses_usage_error(capsys, corpus):
    for flag, value in (("--steps", "inf"), ("--seed", "1.5"), ("--rate", "fast"),
                        ("--cell", "rnn"), ("--cell", "basic"), ("--dropout", "half")):
        with pytest.raises(SystemExit) as stopped:
            run(capsys, "train-text", str(corpus), flag, value)
        assert stopped.value.code == 2
        assert "invalid" in capsys.readouterr().err


@pytest.mark.parametrize("flag, value", [
    ("--chars", "-1"), *[("--temperature", v) for v in ("0", "-1", "inf", "nan")],
    ("--seed", "-1"), ("--seed", str(2**63)),
])
def test_out_of_range_sample_options_are_refused_in_one_line(capsys, checkpoint, flag, value):
    fails(capsys, "sample", str(checkpoint), flag, value, match=f"{flag} must be")


@pytest.mark.parametrize("flag, value", [("--chars", "0"), ("--temperature", "1e-300"),
                                         ("--temperature", "1e300"), ("--seed", "0"),
                                         ("--seed", str(2**63 - 1))])
def test_extreme_sample_options_that_make_sense_run(capsys, checkpoint, flag, value):
    code, out, err = run(capsys, "sample", str(checkpoint), "--chars", "5", flag, value)
    assert code == 0 and err == ""


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


@pytest.mark.parametrize("spelling", ["same", "dot-slash", "symlink", "hard-link"])
def test_the_checkpoint_being_resumed_may_be_saved_over_by_any_name(capsys, corpus, trained,
                                                                    spelling):
    name = {"same": str(trained), "dot-slash": str(trained.parent / "." / trained.name)}
    if spelling == "symlink":
        (trained.parent / "link.npz").symlink_to(trained.name)
        name[spelling] = str(trained.parent / "link.npz")
    elif spelling == "hard-link":
        os.link(trained, trained.parent / "hard.npz")
        name[spelling] = str(trained.parent / "hard.npz")
    code, out, err = run(capsys, "train-text", str(corpus), "--resume", name[spelling],
                         "--steps", "1", "--sample-chars", "0", "--save", str(trained))
    assert code == 0 and load_checkpoint(trained).step == 3, err


def test_resume_saves_back_unless_save_is_given_and_says_so(capsys, corpus, trained, tmp_path):
    code, out, _ = run(capsys, "train-text", str(corpus), "--resume", str(trained), "--steps",
                       "2", "--sample-chars", "0")
    assert code == 0 and f"resumed {trained} at step 2; saving back to it" in out
    assert load_checkpoint(trained).step == 4 and f"saved {trained} at step 4" in out
    elsewhere = tmp_path / "elsewhere.npz"
    code, out, _ = run(capsys, "train-text", str(corpus), "--resume", str(trained), "--steps",
                       "1", "--sample-chars", "0", "--save", str(elsewhere))
    assert code == 0 and "saving back" not in out
    assert (load_checkpoint(trained).step, load_checkpoint(elsewhere).step) == (4, 5)


def test_resume_onto_another_runs_checkpoint_needs_overwrite(capsys, corpus, trained,
                                                             checkpoint):
    fails(capsys, "train-text", str(corpus), "--resume", str(trained), *ONE_STEP[-4:],
          "--save", str(checkpoint), match=f"--save {checkpoint} (step 0) is another run's")
    assert load_checkpoint(checkpoint).step == 0
    code, _, err = run(capsys, "train-text", str(corpus), "--resume", str(trained),
                       *ONE_STEP[-4:], "--save", str(checkpoint), "--overwrite")
    assert code == 0 and load_checkpoint(checkpoint).step == 3, err


def test_a_read_only_checkpoint_resumed_without_save_is_refused_before_training(
        capsys, corpus, trained):
    trained.chmod(0o444)
    fails(capsys, "train-text", str(corpus), "--resume", str(trained), "--steps", "1",
          match="the file is read-only; give --save PATH to save elsewhere")


def run_cli(*argv: str, timeout: float = 60, **kwargs) -> subprocess.CompletedProcess:
    """``python -m dualtape.cli ARGV`` in a process of its own, within ``timeout`` seconds (a
    blocked open of a FIFO fails the test instead of hanging the suite)."""
    return subprocess.run([sys.executable, "-m", "dualtape.cli", *argv], capture_output=True,
                          text=True, timeout=timeout, **kwargs)


def one_line(err: str, match: str) -> None:
    assert err.endswith("\n") and err.count("\n") == 1 and match in err, err


@pytest.mark.parametrize("kind", ["fifo", "device"])
@pytest.mark.parametrize("where", ["sample", "resume", "save"])
def test_a_fifo_or_a_device_as_a_checkpoint_is_one_line_and_never_blocks(corpus, tmp_path, kind,
                                                                         where):
    path = "/dev/zero"
    if kind == "fifo":
        path = str(tmp_path / "fifo")
        os.mkfifo(path)
    argv = {"sample": ["sample", path],
            "resume": ["train-text", str(corpus), "--resume", path, "--steps", "1"],
            "save": ["train-text", str(corpus), *ONE_STEP, "--save", path]}[where]
    done = run_cli(*argv)
    assert done.returncode == 1 and done.stdout == ""
    one_line(done.stderr, "a FIFO" if kind == "fifo" else "a character device")
    assert "not a regular file" in done.stderr


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_fifo_or_a_device_as_the_corpus_is_one_line_and_never_blocks(tmp_path, kind):
    path = "/dev/zero"
    if kind == "fifo":
        path = str(tmp_path / "fifo")
        os.mkfifo(path)
    done = run_cli("train-text", path, *ONE_STEP, timeout=30)
    assert done.returncode == 1 and done.stdout == ""
    one_line(done.stderr, "a FIFO" if kind == "fifo" else "a character device")
    assert "not a regular file" in done.stderr


@pytest.mark.parametrize("flag, spelling", [
    *[(f, s) for f in ("--save", "--resume") for s in ("same", "relative", "symlink")],
    ("--resume", "hard link")])  # a hard link needs the checkpoint to exist
def test_a_log_that_is_the_checkpoint_is_refused_before_training(capsys, corpus, trained,
                                                                  tmp_path, monkeypatch,
                                                                  spelling, flag):
    monkeypatch.chdir(tmp_path)
    model = trained if flag == "--resume" else tmp_path / "new.npz"
    log = {"same": str(model), "relative": os.path.relpath(model),
           "symlink": str(tmp_path / "link.npz"), "hard link": str(tmp_path / "hard.npz")}[spelling]
    if spelling == "symlink":
        Path(log).symlink_to(model)
    if spelling == "hard link":
        os.link(model, log)
    before = model.read_bytes() if model.exists() else None
    fails(capsys, "train-text", str(corpus), *ONE_STEP, flag, str(model), "--log", log,
          match="is the checkpoint")
    assert (model.read_bytes() if model.exists() else None) == before


@pytest.mark.parametrize("flag", ["--save", "--resume", "--save through a link"])
def test_a_second_run_on_a_locked_checkpoint_is_refused_naming_the_holder(trained, corpus,
                                                                          tmp_path, flag):
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(trained)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        before = trained.read_bytes()
        given = str(trained)
        if flag.endswith("link"):
            given = str(tmp_path / "link.npz")
            os.symlink(trained, given)
        argv = ["--resume", given] if flag == "--resume" else ["--save", given, "--overwrite"]
        done = run_cli("train-text", str(corpus), *ONE_STEP, *argv)
        assert done.returncode == 1 and done.stdout == "", done.stdout
        one_line(done.stderr, f"is in use by another train-text run (PID {holder.pid}")
        assert trained.read_bytes() == before
    finally:
        holder.kill()
        holder.wait()
    done = run_cli("train-text", str(corpus), *ONE_STEP, "--resume", str(trained))
    assert done.returncode == 0, done.stderr  # the lock went with its process


def snapshot(folder: Path) -> dict[str, tuple[int, int, bytes | str]]:
    """Every entry of ``folder`` by name: its mode, its mtime and its bytes (a link: where it
    points; a FIFO or a folder: nothing read)."""
    def content(entry: Path) -> bytes | str:
        if entry.is_symlink():
            return os.readlink(entry)
        return entry.read_bytes() if entry.is_file() else ""
    return {e.name: (e.lstat().st_mode, e.lstat().st_mtime_ns, content(e))
            for e in folder.iterdir()}


POETRY_LOCK = b'# This file is automatically @generated by Poetry.\n[[package]]\nname = "x"\n'


@pytest.mark.parametrize("content", [POETRY_LOCK, b"", b"1" * 300, b"12 34\n", b"\n\n"],
                         ids=["poetry", "empty of another file", "long", "two numbers",
                              "two lines"])
def test_a_file_at_the_lock_name_that_is_not_a_lock_is_refused_and_left_as_it_is(
        capsys, corpus, tmp_path, content):
    foreign = tmp_path / "poetry.lock"
    if content:
        foreign.write_bytes(content)
    else:  # an empty file that is another's too (a hard link): writing it changes that one
        (tmp_path / "elsewhere").write_bytes(content)
        os.link(tmp_path / "elsewhere", foreign)
    before = snapshot(tmp_path)
    fails(capsys, "train-text", str(corpus), *ONE_STEP, "--save", str(tmp_path / "poetry"),
          match=f"cannot lock checkpoint {tmp_path / 'poetry'}: {foreign}: it ")
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("kind", ["link to a file", "dangling link", "link to /dev/null",
                                  "FIFO", "folder"])
def test_a_link_fifo_or_folder_at_the_lock_name_is_refused_in_one_line(corpus, tmp_path, kind):
    lock = tmp_path / "model.npz.lock"
    target = tmp_path / "precious.txt"
    if kind == "link to a file":
        target.write_text("keep me\n")
        lock.symlink_to(target)
    elif kind.endswith("link"):
        lock.symlink_to(target)
    elif kind == "link to /dev/null":
        lock.symlink_to("/dev/null")
    elif kind == "FIFO":
        os.mkfifo(lock)
    else:
        lock.mkdir()
    before = snapshot(tmp_path)
    done = run_cli("train-text", str(corpus), *ONE_STEP, "--save", str(tmp_path / "model.npz"),
                   timeout=30)
    assert done.returncode == 1 and done.stdout == "", done.stdout
    what = {"FIFO": "a FIFO", "folder": "a folder"}.get(kind, "a symbolic link")
    one_line(done.stderr, f"{lock}: it is {what}, not a regular file; it was left as it is")
    assert snapshot(tmp_path) == before


def test_a_lock_that_cannot_be_made_refuses_the_run_rather_than_run_unlocked(capsys, corpus,
                                                                             tmp_path):
    model = tmp_path / f"{'m' * 251}.npz"  # a name that fits, its lock's does not
    fails(capsys, "train-text", str(corpus), *ONE_STEP, "--save", str(model),
          match=f"cannot create {model}.lock: File name too long; choose another --save")
    assert not model.exists()


@pytest.mark.parametrize("content", [b"", b"4242\n", b"4242"],
                         ids=["empty", "former format", "former format cut short"])
def test_an_empty_lock_file_or_one_of_the_former_format_is_taken(capsys, corpus, tmp_path,
                                                                 content):
    lock = tmp_path / "model.npz.lock"
    lock.write_bytes(content)
    code, _, err = run(capsys, "train-text", str(corpus), *ONE_STEP,
                       "--save", str(tmp_path / "model.npz"))
    assert code == 0, err
    assert lock.read_text() == f"dualtape train-text lock, PID {os.getpid()}\n"


NEIGHBOURS = {
    "model.npz.lock.bak": b"dualtape train-text lock, PID 1\n", "model.lock": b"[[package]]\n",
    "model.npz.log": b"step,seconds\n", "model.npz.log.jsonl": b"",
    "model.npz.step1.abcdefgh.npz": b"not a checkpoint", "model.npz.tmp": b"x",
    "model.npz.partial": b"", "model.stateful.npz": b"",
    ".model.npz.dualtape-partial.otherhost.1.abcdefgh": b"PK\x03\x04 another host's",
}
"""Files beside a checkpoint with names a run might be tempted by; none is its to touch."""
RUN_FILES = {"model.npz", "model.npz.lock", "model.npz.log.csv"}
"""What a run that saves ``model.npz`` writes beside it (docs/train-text.md's list)."""


def test_a_run_changes_nothing_beside_the_checkpoint_but_its_listed_files(capsys, corpus,
                                                                          tmp_path):
    for name, content in NEIGHBOURS.items():
        (tmp_path / name).write_bytes(content)
    os.symlink(tmp_path / "model.npz.tmp", tmp_path / "model.npz.link")
    before = snapshot(tmp_path)
    model = str(tmp_path / "model.npz")
    for argv in (["--save", model, "--save-every", "1"], ["--resume", model]):
        code, _, err = run(capsys, "train-text", str(corpus), *SMALL, "--steps", "2",
                           "--sample-chars", "0", *argv)
        assert code == 0, err
        after = snapshot(tmp_path)
        assert set(after) == set(before) | RUN_FILES
        assert {name: after[name] for name in before} == before


@pytest.mark.parametrize("error", [OSError(21, "Is a directory"), ValueError("bad member")])
def test_whatever_io_raises_while_reading_a_checkpoint_is_one_line(capsys, checkpoint,
                                                                   monkeypatch, error):
    def refuses(*args, **kwargs):
        raise error

    monkeypatch.setattr(text_checkpoint, "load_with_extra", refuses)
    fails(capsys, "sample", str(checkpoint), match=str(error.args[-1]))


# --- failed saves ----------------------------------------------------------------------------


def failing_saves(monkeypatch, refused: set[str], error: Exception | None = None) -> None:
    """``text_train.save`` fails with ``error`` (a full disk) for the paths in ``refused``."""
    real = text_train.save

    def save(net, path, **kwargs):
        if str(path) in refused:
            raise error or OSError(28, "No space left on device", str(path))
        real(net, path, **kwargs)

    monkeypatch.setattr(text_train, "save", save)


@pytest.mark.parametrize("error", [None, ValueError("No space left: io refuses the file")],
                         ids=["OSError", "ValueError"])
def test_a_failed_periodic_save_warns_and_training_goes_on(tmp_path, monkeypatch, error):
    target = str(tmp_path / "run.npz")
    failing_saves(monkeypatch, {target}, error)
    trainer = TextTrainer.new(TEXT, TINY, resolve_backend("numpy"))
    recorder = Recorder()
    result = run_training(trainer, RunLimits(steps=4, save=target, save_every=2,
                                             sample_chars=0), recorder)
    warnings = [m for m in recorder.messages if m.startswith("warning: cannot write")]
    assert result.steps == 4 and len(warnings) == 3 and "No space left" in warnings[0]
    [fallback] = tmp_path.glob("run.step4.*.npz")  # a random part: no name to plant
    assert f"saved {fallback} at step 4" in recorder.messages
    assert load_checkpoint(fallback).step == 4 and not Path(target).exists()


def test_when_every_save_fails_the_error_names_each_try(tmp_path, monkeypatch):
    target = tmp_path / "run.npz"
    tried = []

    def save(net, path, **kwargs):
        tried.append(str(path))
        raise OSError(28, "No space left on device", str(path))

    monkeypatch.setattr(text_train, "save", save)
    trainer = TextTrainer.new(TEXT, TINY, resolve_backend("numpy"))
    with pytest.raises(TextError, match="nothing was saved") as info:
        run_training(trainer, RunLimits(steps=1, save=str(target), sample_chars=0), Recorder())
    assert len(tried) == 3 and all(p in str(info.value) for p in tried)
    assert tried[0] == str(target) and Path(tried[1]).parent == tmp_path
    assert not Path(tried[2]).parent.exists()  # the empty private folder is removed


@pytest.mark.parametrize("earlier", ["periodic-save", "old-file", "nothing"])
def test_a_failed_final_save_says_what_is_kept(capsys, corpus, trained, tmp_path, monkeypatch,
                                               earlier):
    def no_room(self, path, warn):
        raise TextError(f"cannot write checkpoint {path}: No space left on device; nothing "
                        "was saved")

    monkeypatch.setattr(TextTrainer, "save_or_fall_back", no_room)
    target = trained if earlier == "old-file" else tmp_path / "new.npz"
    code, _, err = run(capsys, "train-text", str(corpus), *ONE_STEP[:-4], "--steps", "3",
                       "--sample-chars", "0", "--save", str(target), "--overwrite",
                       *(["--save-every", "2"] if earlier == "periodic-save" else []))
    kept = {"periodic-save": f"; the last checkpoint written is {target} (step 2)",
            "old-file": f"; {target} (step 2) was left as it was", "nothing": ""}[earlier]
    one_line(err, f"No space left on device; nothing was saved{kept}\n")


def test_the_final_save_comes_before_the_final_sample(capsys, tmp_path, monkeypatch, corpus):
    def interrupted_sample(*args, **kwargs):
        raise KeyboardInterrupt  # a second Ctrl-C while the last sample is drawn

    monkeypatch.setattr(TextTrainer, "sample", interrupted_sample)
    target = tmp_path / "run.npz"
    code, out, _ = run(capsys, "train-text", str(corpus), *SMALL, "--steps", "3",
                       "--sample-every", "0", "--save", str(target))
    assert code == 130 and f"aborted at step 3; saved {target} at step 3" in out
    assert load_checkpoint(target).step == 3


# --- a diverging run keeps what it had -------------------------------------------------------


def test_a_diverging_resumed_run_never_writes_nan_over_the_checkpoint(capsys, corpus, tmp_path):
    # The tester's run: --resume m.npz --rate 1e30 --clip 0 --save-every 1 --save m.npz.
    good = tmp_path / "m.npz"
    assert run(capsys, "train-text", str(corpus), *SMALL, "--steps", "30", "--sample-chars", "0",
               "--save", str(good))[0] == 0
    before = good.read_bytes()
    code, _, err = run(capsys, "train-text", "--resume", str(good), "--rate", "1e30", "--clip",
                       "0", "--save-every", "1", "--save", str(good), "--sample-chars", "0",
                       "--steps", "20")
    # its first step leaves finite weights near 1e27, which the loss check at the save sees
    one_line(err, f"nats per character (more than 100 x ln {len(load_checkpoint(good).vocab)} = ")
    assert code == 1 and good.read_bytes() == before
    assert err.rstrip().endswith(f"{good} (step 30) was left as it was")


def test_a_run_that_diverges_before_its_first_save_leaves_the_file_as_it_was(capsys, corpus,
                                                                           trained):
    before = trained.read_bytes()
    code, _, err = run(capsys, "train-text", "--resume", str(trained), "--rate", "1e30",
                       "--clip", "0", "--save-every", "2", "--log-every", "1000",
                       "--sample-chars", "0", "--steps", "20")
    assert code == 1 and trained.read_bytes() == before
    one_line(err, f"the parameters hold NaN or infinity at step 4; lower --rate (now 1e+30) or "
             f"--clip (now 0); {trained} (step 2) was left as it was")


def nan_after_step(when: int, monkeypatch) -> None:
    """Every trainer's parameters turn NaN in its ``when``-th step."""
    real = TextTrainer.step

    def step(self):
        real(self)
        if self.step_count == when:
            self.net.layers[0].params["b"] = self.net.layers[0].params["b"] * np.nan

    monkeypatch.setattr(TextTrainer, "step", step)


@pytest.mark.parametrize("overwrite", [False, True], ids=["new-file", "overwrite"])
def test_a_diverged_run_names_the_checkpoint_it_kept(capsys, corpus, trained, tmp_path,
                                                     monkeypatch, overwrite):
    target = trained if overwrite else tmp_path / "new.npz"
    nan_after_step(3, monkeypatch)
    code, out, err = run(capsys, "train-text", str(corpus), *SMALL, "--sample-chars", "0",
                         "--save-every", "2", "--save", str(target),
                         *(["--overwrite"] if overwrite else []))
    assert code == 1 and load_checkpoint(target).step == 2
    one_line(err, f"at step 4; lower --rate (now 0.5) or --clip (now 1); saved {target} at "
             "step 2")


def test_a_diverged_run_that_saved_nothing_says_so(capsys, corpus, tmp_path, monkeypatch):
    nan_after_step(1, monkeypatch)
    code, _, err = run(capsys, "train-text", str(corpus), *ONE_STEP, "--save",
                       str(tmp_path / "new.npz"))
    assert code == 1 and not (tmp_path / "new.npz").exists()
    one_line(err, "at step 1; lower --rate (now 0.5) or --clip (now 1); nothing was saved")


# --- other failures during a run save first --------------------------------------------------


@pytest.mark.parametrize("failure, message", [
    (RuntimeError("planted bug"), "the run failed at step 2: RuntimeError: planted bug"),
    (FloatingPointError("sample: the network gives no usable probabilities (NaN?)"),
     "the run failed at step 2: FloatingPointError: sample: the network gives no usable"),
], ids=["bug", "nan-sample"])
def test_a_periodic_sample_that_fails_saves_first_and_is_one_line(capsys, corpus, tmp_path,
                                                                  monkeypatch, failure, message):
    def fails_to_sample(*args, **kwargs):
        raise failure

    monkeypatch.setattr(TextTrainer, "sample", fails_to_sample)
    target = tmp_path / "run.npz"
    code, out, err = run(capsys, "train-text", str(corpus), *SMALL, "--sample-every", "2",
                         "--save", str(target))
    assert code == 1 and load_checkpoint(target).step == 2 and f"saved {target}" in out
    one_line(err, f"{message}")
    assert err.rstrip().endswith(f"; saved {target} at step 2")


def test_running_out_of_memory_mid_run_saves_what_was_trained(capsys, corpus, tmp_path,
                                                              monkeypatch):
    real = TextTrainer.step

    def step(self):
        if self.step_count == 2:
            raise MemoryError
        real(self)

    monkeypatch.setattr(TextTrainer, "step", step)
    target = tmp_path / "run.npz"
    code, _, err = run(capsys, "train-text", str(corpus), *SMALL, "--sample-chars", "0",
                       "--save", str(target))
    assert code == 1 and load_checkpoint(target).step == 2
    one_line(err, f"out of memory at step 2; use a smaller --hidden, --batch or --seq-len; saved "
             f"{target} at step 2")


def test_ctrl_c_while_stopping_for_sigterm_aborts_with_sigterms_status(capsys, corpus, tmp_path,
                                                                       monkeypatch):
    class TermAfterTwo(console.StopRequest):
        def __call__(self):
            self.calls = getattr(self, "calls", 0) + 1
            if self.calls == 3:
                self.signal(signal.SIGTERM)
            return super().__call__()

    def ctrl_c(*args, **kwargs):
        raise KeyboardInterrupt  # the impatient second signal, during the final sample

    monkeypatch.setattr(text_cli, "StopRequest", TermAfterTwo)
    monkeypatch.setattr(TextTrainer, "sample", ctrl_c)
    target = tmp_path / "run.npz"
    code, out, _ = run(capsys, "train-text", str(corpus), *SMALL, "--save", str(target))
    assert code == 143 and f"aborted at step 2; saved {target} at step 2" in out


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


@pytest.mark.parametrize("signum, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130),
                                          (signal.SIGHUP, 129)],
                         ids=["sigterm", "sigint", "sighup"])
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


# --- a lost stdout (real processes) ----------------------------------------------------------


def train_command(corpus: Path, target: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "dualtape.cli", "train-text", str(corpus), *SMALL,
            "--log-every", "1", "--sample-chars", "0", "--save", str(target), *extra]


def into_head(command: list[str], head: str) -> subprocess.CompletedProcess:
    """``command | head ...`` in bash; its status is the command's, not head's."""
    line = f"{shlex.join(command)} | head {head}; exit ${{PIPESTATUS[0]}}"
    return subprocess.run(["bash", "-c", line], capture_output=True, text=True, timeout=60,
                          errors="replace")


def test_a_closed_pipe_stops_training_saves_and_exits_74(corpus, tmp_path):
    target = tmp_path / "run.npz"
    done = into_head(train_command(corpus, target, "--time-limit", "20"), "-1")
    assert done.returncode == console.OUTPUT_LOST, done.stderr
    assert done.stdout.startswith("corpus: ") and done.stdout.count("\n") == 1
    step = load_checkpoint(target).step
    one_line(done.stderr, f"dualtape train-text: stdout was lost (Broken pipe); stopped at step "
             f"{step}, saved {target} at step {step}")


def test_a_full_disk_under_stdout_stops_training_saves_and_exits_74(corpus, tmp_path):
    target = tmp_path / "run.npz"
    with open("/dev/full", "w") as full:
        done = subprocess.run(train_command(corpus, target), stdout=full, stderr=subprocess.PIPE,
                              text=True, timeout=60)
    assert done.returncode == console.OUTPUT_LOST, done.stderr
    one_line(done.stderr, "stdout was lost (No space left on device); stopped at step 0, saved "
             f"{target} at step 0")  # the first header line already failed
    assert load_checkpoint(target).step == 0


def on_terminal(argv: list[str], hang_up_after: bytes | None = None) -> tuple[int, bytes, str]:
    """Run ``argv`` with a pseudo-terminal as stdin and stdout: its status, what it printed
    there and its stderr. With ``hang_up_after``, the terminal closes once that was printed."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=subprocess.PIPE)
    os.close(slave)
    shown = b""
    try:
        while hang_up_after is None or hang_up_after not in shown:
            ready, _, _ = select.select([master], [], [], 60)
            chunk = os.read(master, 4096) if ready else b""
            if not chunk:
                break
            shown += chunk
    except OSError:  # EIO: the program ended and closed the terminal
        pass
    finally:
        os.close(master)
    _, err = proc.communicate(timeout=60)
    return proc.returncode, shown, err.decode()


def test_a_terminal_that_hangs_up_stops_training_and_saves(corpus, tmp_path):
    target = tmp_path / "run.npz"
    code, shown, err = on_terminal(train_command(corpus, target, "--time-limit", "20"),
                                   hang_up_after=b"training: ")
    assert code == console.OUTPUT_LOST, err
    step = load_checkpoint(target).step
    one_line(err, f"stdout was lost (Input/output error); stopped at step {step}, saved {target}")


def test_time_limit_inf_on_a_terminal_is_one_line_and_a_bar_runs(corpus):
    argv = [sys.executable, "-m", "dualtape.cli", "train-text", str(corpus), *ONE_STEP]
    code, shown, err = on_terminal([*argv, "--time-limit", "inf"])
    assert code == 1 and shown == b""
    one_line(err, "dualtape train-text: error: --time-limit must be positive and finite (leave "
             "it out for no limit), got inf")
    code, shown, err = on_terminal([*argv, "--time-limit", "1e300"])
    assert code == 0 and b"stopped (step limit) at step 1" in shown, err


def test_sample_stops_when_its_pipe_closes_and_exits_0(checkpoint):
    command = [sys.executable, "-m", "dualtape.cli", "sample", str(checkpoint), "--chars",
               str(10**9)]
    done = into_head(command, "-c 20")
    assert done.returncode == 0 and len(done.stdout.encode("utf-8", "replace")) >= 16
    assert done.stderr == ""


def test_sample_into_a_full_disk_is_one_line_and_exits_74(checkpoint):
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "dualtape.cli", "sample", str(checkpoint)],
                              stdout=full, stderr=subprocess.PIPE, text=True, timeout=60)
    assert done.returncode == console.OUTPUT_LOST
    one_line(done.stderr, "dualtape sample: error: cannot write the text: No space left on device")


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

    monkeypatch.setattr(text_checkpoint, "load_with_extra", no_memory)
    fails(capsys, "sample", str(checkpoint), match="does not fit in memory")


@pytest.mark.parametrize("config", [
    TrainConfig(hidden=[80, 80], seed=1),
    TrainConfig(hidden=[64], batch=64, seq_len=20, optimizer="adam", rate=0.01, seed=1),
    TrainConfig(hidden=[48], batch=128, seq_len=60, dtype="float64", seed=1),
    TrainConfig(hidden=[256], batch=16, seq_len=30, seed=1),
    TrainConfig(hidden=[80, 80], cell="lstm", seed=1),
    TrainConfig(hidden=[80, 80], cell="gru", seed=1),
    TrainConfig(hidden=[80, 80, 80], cell="lstm", dropout=0.2, seed=1),
    TrainConfig(hidden=[48, 48], batch=128, seq_len=60, dtype="float64", cell="gru",
                dropout=0.5, seed=1),
], ids=["default", "adam", "float64-long", "wide", "lstm", "gru", "lstm-dropout",
        "gru-dropout-float64"])
def test_the_memory_estimate_covers_a_measured_step_within_three_times(config):
    # Measured on numpy: 1.4x (wide) to 2.5x (gru-dropout-float64) the traced peak of two
    # steps. A step of another trainer first, so the compiled loops' one-time loading (numba's
    # own objects, about 28 MB in a fresh process) is not traced; then no array kept from it
    # (spare: the second traced step reuses the first's, as training does).
    corpus_text = read_corpus(None)
    TextTrainer.new(corpus_text, config, resolve_backend("numpy")).step()
    spare.clear()
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


def test_a_corpus_over_the_size_cap_is_refused(capsys, corpus, tmp_path):
    big = tmp_path / "big.txt"
    with open(big, "wb") as f:
        f.truncate(65 * 10**6)  # sparse: a regular file that takes no room
    fails(capsys, "train-text", str(big), *ONE_STEP, match="larger than 64 MB")
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
