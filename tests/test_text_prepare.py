"""train-text's run assembly (text/prepare.py) in this process, without training: each option
rule at its bound and its whole message, the checkpoint destination's cases, a new and a resumed
configuration, and the corpus a checkpoint names (issue 52: recorded absolute)."""

from __future__ import annotations

import argparse
import dataclasses
import math
from pathlib import Path

import pytest

import dualtape
from dualtape import cli
from dualtape.backend import BackendUnavailable
from dualtape.text import prepare as assembly
from dualtape.text import threads
from dualtape.text.config import DEFAULT_RATES
from dualtape.text.model import MAX_CORPUS_MB, TextError, fingerprint
from dualtape.text.prepare import DEFAULT_VALID, prepare

from .test_text import SMALL, TEXT, _rewrite, corpus

__all__ = ["corpus"]  # the fixture, shared with test_text


def parsed(*argv: str) -> argparse.Namespace:
    """``dualtape train-text ARGV`` as the command line parses it."""
    return cli.build_parser().parse_args(["train-text", *argv])


def refusal(args: argparse.Namespace) -> str:
    """The ``TextError`` message ``prepare(args)`` refuses with."""
    with pytest.raises(TextError) as refused:
        prepare(args)
    return str(refused.value)


@pytest.fixture
def saved(tmp_path, corpus) -> Path:
    """A train-text checkpoint of ``corpus`` at step 0 (its fingerprint recorded)."""
    trainer = prepare(parsed(str(corpus), *SMALL, "--save", str(tmp_path / "m.npz"))).trainer
    path = tmp_path / "m.npz"
    trainer.save(path)
    return path


@pytest.mark.parametrize("option, value, need", [
    ("log_every", 0, "positive"),
    ("threads", "0", threads.REQUIREMENT),
    *((name, -1, "0 or more") for name in ("steps", "sample_every", "save_every",
                                           "valid_every")),
    *(("time_limit", v, "positive and finite (leave it out for no limit)")
      for v in (0, math.inf, math.nan)),
    *(("sample_chars", v, "from 0 to 100,000") for v in (-1, 100_001)),
    *((name, v, "positive and finite") for name in ("temperature", "max_corpus_mb")
      for v in (0.0, math.inf)),
    *((name, "", "a path") for name in ("save", "resume", "log")),
])
def test_each_run_option_is_refused_past_its_bound_by_its_flag(corpus, option, value, need):
    args = parsed(str(corpus), *SMALL)
    setattr(args, option, value)
    flag = "--" + option.replace("_", "-")
    assert refusal(args) == f"{flag} must be {need}, got {value}"


def test_the_run_options_at_their_bounds_are_taken():
    args = parsed("corpus.txt")
    for option, value in {"log_every": 1, "steps": 0, "sample_every": 0, "save_every": 0,
                          "valid_every": 0, "time_limit": 1e-9, "temperature": 1e-9,
                          "max_corpus_mb": 1e-9, "threads": "1"}.items():
        setattr(args, option, value)
    for chars in (0, 100_000):
        args.sample_chars = chars
        assert assembly._check_run_args(args) is None


def test_threads_as_a_number_needs_threadpoolctl(corpus, monkeypatch):
    monkeypatch.setattr(threads, "threadpoolctl_installed", lambda: False)
    assert refusal(parsed(str(corpus), *SMALL, "--threads", "2")) == (
        "--threads needs threadpoolctl: pip install threadpoolctl")
    assert prepare(parsed(str(corpus), *SMALL, "--threads", "auto")).text == TEXT


def test_a_backend_that_cannot_run_here_is_one_line(corpus, monkeypatch):
    def unavailable(name, device=None):
        raise BackendUnavailable(f"backend {name!r} needs its library")

    monkeypatch.setattr(dualtape.backend, "resolve_backend", unavailable)
    assert refusal(parsed(str(corpus), *SMALL)) == "backend 'numpy' needs its library"


@pytest.mark.parametrize("options, message", [
    (["--seq-len", "0"], "--seq-len must be "),
    (["--dropout", "0.5"], "--dropout 0.5 needs two recurrent layers or more (it goes between "
     "them) but --hidden 8 has one; give sizes such as 80,80 or leave --dropout out"),
    (["--stateful", "--cell", "LSTM"], "--stateful needs a cell whose state stays bounded, and "
     "Grenade's LSTM has no tanh on its cell: carried from window to window its outputs grow "
     "without limit (measured: loss 1,023 nats/char at step 100); use --cell lstm or gru, or "
     "random windows"),
])
def test_a_configuration_that_cannot_train_is_refused_by_its_flag(corpus, options, message):
    assert refusal(parsed(str(corpus), *SMALL, *options)).startswith(message)


@pytest.mark.parametrize("options", [["--dropout", "0.5", "--hidden", "8,8"],
                                     ["--stateful", "--cell", "lstm"], ["--dropout", "0"]])
def test_the_configurations_beside_those_refused_are_taken(corpus, options):
    assert prepare(parsed(str(corpus), *SMALL, *options)).trainer.config.hidden[0] == 8


def test_a_new_run_takes_the_options_given_and_the_defaults_of_the_rest(corpus):
    adam = prepare(parsed(str(corpus), *SMALL, "--optimizer", "adam", "--hidden", "8,6",
                          "--clip", "0.5", "--valid", "0"))
    config = adam.trainer.config
    assert (config.hidden, config.optimizer, config.clip, config.seq_len) == ([8, 6], "adam",
                                                                             0.5, 8)
    assert (config.rate, config.valid, config.seed) == (DEFAULT_RATES["adam"], 0, 4)
    assert config.corpus == str(corpus.resolve()) and config.corpus_sha256 == fingerprint(TEXT)
    assert (adam.text, adam.note, adam.before) == (TEXT, None, None)
    sgd = prepare(parsed(str(corpus), *SMALL[:-2], "--rate", "0.25"))
    assert (sgd.trainer.config.rate, sgd.trainer.config.valid) == (0.25, DEFAULT_VALID)
    assert DEFAULT_RATES["sgd"] != DEFAULT_RATES["adam"]
    assert isinstance(sgd.trainer.config.seed, int)


def test_a_corpus_given_relative_is_recorded_absolute(corpus, monkeypatch):
    monkeypatch.chdir(corpus.parent)
    config = prepare(parsed(corpus.name, *SMALL)).trainer.config
    assert config.corpus == str(corpus.resolve()) and Path(config.corpus).is_absolute()


def test_the_built_in_corpus_is_recorded_as_none_without_a_fingerprint():
    prepared = prepare(parsed(*SMALL))
    assert prepared.trainer.config.corpus is None
    assert prepared.trainer.config.corpus_sha256 is None and len(prepared.text) > 1000


def test_a_corpus_over_the_size_cap_is_refused_by_the_cap_given(corpus):
    assert "--max-corpus-mb" in refusal(parsed(str(corpus), *SMALL, "--max-corpus-mb",
                                               "0.0001"))
    assert MAX_CORPUS_MB * 1e6 > len(TEXT)


@pytest.mark.parametrize("resume", [False, True])
def test_a_destination_that_is_not_a_checkpoint_or_cannot_be_written_is_named_by_its_flag(
        tmp_path, resume):
    notes = tmp_path / "notes.npz"
    notes.write_text("my notes")
    flag = "--resume (which saves back to it)" if resume else "--save"
    with pytest.raises(TextError) as refused:
        assembly._check_save_path(str(notes), str(notes) if resume else None, False)
    assert str(refused.value) == (f"{flag} {notes} exists and is not a dualtape file; refusing "
                                  "to overwrite it (choose another path)")
    away = tmp_path / "gone" / "m.npz"
    hint = "; give --save PATH to save elsewhere" if resume else ""
    with pytest.raises(TextError) as refused:
        assembly._check_save_path(str(away), str(away) if resume else None, False)
    assert str(refused.value) == f"cannot write checkpoint {away}: its folder does not exist{hint}"


def test_another_runs_checkpoint_is_replaced_only_with_overwrite_and_named_with_its_step(
        corpus, saved, tmp_path):
    assert assembly._check_save_path(str(tmp_path / "new.npz"), None, False) is None
    assert refusal(parsed(str(corpus), *SMALL, "--save", str(saved))) == (
        f"--save {saved} (step 0) is another run's checkpoint; refusing to replace it: choose "
        f"another path, continue it with --resume {saved}, or pass --overwrite")
    prepared = prepare(parsed(str(corpus), *SMALL, "--save", str(saved), "--overwrite"))
    assert prepared.before == f"{saved} (step 0)"
    plain = tmp_path / "plain.npz"
    with dualtape.use_backend("numpy"):
        dualtape.save(dualtape.Network([dualtape.FullyConnected(2, 2, seed=0)]), plain)
    assert assembly._check_save_path(str(plain), None, True) == str(plain)  # no step recorded


def test_a_resume_saves_back_or_where_save_says_and_notes_which(saved, tmp_path):
    back = prepare(parsed("--resume", str(saved), "--backend", "numpy"))
    assert back.note == (f"resumed {saved} at step 0; saving back to it (--save PATH saves "
                         "elsewhere)")
    assert back.before == f"{saved} (step 0)" and back.text == TEXT
    elsewhere = tmp_path / "other.npz"
    moved = prepare(parsed("--resume", str(saved), "--save", str(elsewhere)))
    assert (moved.note, moved.before) == (f"resumed {saved} at step 0", None)
    link = tmp_path / "link.npz"
    link.symlink_to(saved)  # the checkpoint resumed, under another name: saved over
    assert prepare(parsed("--resume", str(saved), "--save", str(link))).before == (
        f"{link} (step 0)")


def test_a_resume_keeps_the_architecture_and_takes_the_tunable_options(saved):
    stored = prepare(parsed("--resume", str(saved))).trainer.config
    again = prepare(parsed("--resume", str(saved), "--hidden", "8", "--seq-len", "5", "--rate",
                           "0.5", "--seed", "9"))
    config = again.trainer.config
    assert (config.hidden, config.seq_len, config.rate, config.seed) == ([8], 5, 0.5, 9)
    assert dataclasses.replace(config, seq_len=stored.seq_len, rate=stored.rate,
                               seed=stored.seed) == stored
    unchanged = prepare(parsed("--resume", str(saved))).trainer.config
    assert unchanged == stored and unchanged.seed == 4


@pytest.mark.parametrize("options, message", [
    (["--hidden", "9"], "--hidden 9 does not match the checkpoint ([8])"),
    (["--valid", "0.2"], f"--valid 0.2 does not match the checkpoint ({DEFAULT_VALID})"),
    (["--annotate-capitals"], "--annotate-capitals True does not match the checkpoint (False)"),
])
def test_a_resume_that_changes_the_architecture_is_refused_by_its_flag(saved, options,
                                                                      message):
    assert refusal(parsed("--resume", str(saved), *options)) == (
        f"{message}; leave it out when resuming")


def test_a_resume_reads_the_recorded_corpus_only_when_it_is_still_that_text(saved, corpus,
                                                                           tmp_path):
    other = tmp_path / "other.txt"
    other.write_text(TEXT.upper())
    assert prepare(parsed(str(other), "--resume", str(saved))).text == TEXT.upper()
    corpus.write_text(TEXT + "more")
    assert refusal(parsed("--resume", str(saved))) == (
        f"{corpus.resolve()} is not the text the checkpoint was trained on (it changed, or the "
        "checkpoint was edited); give the text as FILE")
    corpus.unlink()
    assert refusal(parsed("--resume", str(saved))) == (
        f"the checkpoint's corpus {corpus.resolve()} is gone; give the text as FILE")
    corpus.mkdir()
    assert refusal(parsed("--resume", str(saved))) == (
        f"the checkpoint names {corpus.resolve()} as its corpus but records no fingerprint of "
        "a regular file there; give the text as FILE")


def test_a_checkpoint_of_the_built_in_corpus_resumes_on_it(tmp_path):
    model = tmp_path / "built-in.npz"
    new = prepare(parsed(*SMALL))
    new.trainer.save(model)
    resumed = prepare(parsed("--resume", str(model)))
    assert resumed.trainer.config.corpus is None and resumed.text == new.text


@pytest.mark.skipif(not Path("/sys").is_dir(), reason="needs a folder that refuses new files")
def test_a_folder_that_refuses_a_new_file_is_found_before_training():
    with pytest.raises(TextError) as refused:  # sysfs: even root cannot create a file there
        assembly._check_save_path("/sys/m.npz", None, False)
    assert str(refused.value).startswith("cannot write checkpoint /sys/m.npz: ")


def test_a_dualtape_file_whose_header_has_no_extra_is_named_without_a_step(saved):
    _rewrite(saved, lambda header, arrays: header.pop("extra"))
    assert assembly._check_save_path(str(saved), None, True) == str(saved)


def test_a_resume_onto_another_runs_checkpoint_takes_overwrite_and_the_cap(saved, corpus,
                                                                          tmp_path):
    other = tmp_path / "other.npz"
    saved_bytes = saved.read_bytes()
    other.write_bytes(saved_bytes)
    assert "--overwrite" in refusal(parsed("--resume", str(saved), "--save", str(other)))
    assert prepare(parsed("--resume", str(saved), "--save", str(other),
                          "--overwrite")).before == f"{other} (step 0)"
    assert "--max-corpus-mb" in refusal(parsed("--resume", str(saved), "--max-corpus-mb",
                                               "0.0001"))


def test_a_resume_draws_from_the_checkpoints_generators_unless_given_a_seed(saved):
    def windows(*options: str) -> dict:
        return prepare(parsed("--resume", str(saved), *options)).trainer.window_rng \
            .bit_generator.state

    kept = windows()
    assert windows() == kept
    assert windows("--seed", "9") != kept


def test_a_new_runs_random_seeds_differ_and_spread():
    seeds = [assembly._new_config(parsed("corpus.txt")).seed for _ in range(4)]
    assert len(set(seeds)) == 4 and max(seeds) >= 2**16  # fails once in 2**60 by chance


def test_a_resume_loads_the_checkpoint_onto_the_backend_asked(saved, backend):
    trainer = prepare(parsed("--resume", str(saved), "--backend", backend.name)).trainer
    assert trainer.backend.name == backend.name
    assert all(type(p) is type(backend.xp.asarray(0.0)) for g in trainer.net.params
               for p in g.values())
