"""train-text's stateful streams (``--stateful``) and held-out split (``--valid``)."""

from __future__ import annotations

import dataclasses
import math
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dualtape
from dualtape.backend import resolve_backend
from dualtape.io import load_with_extra, save
from dualtape.text import trainer as trainer_module
from dualtape.text.checkpoint import load_checkpoint
from dualtape.text.loop import RunLimits, run_training
from dualtape.text.model import TextError, random_windows, windows_at
from dualtape.text.record import TrainingLog, bits_per_char, read_log
from dualtape.text.split import split_held_out
from dualtape.text.streams import (
    StreamPosition,
    advance,
    check_streams,
    layout,
    stream_starts,
)
from dualtape.text.trainer import TextTrainer

from .conftest import np64
from .test_text import TEXT, TINY, Recorder, _losses, fails, run

STATEFUL = dataclasses.replace(TINY, cell="lstm", stateful=True)


def numpy_trainer(config, text: str = TEXT) -> TextTrainer:
    return TextTrainer.new(text, config, resolve_backend("numpy"))


# --- the streams ------------------------------------------------------------------------------


def _windows_of_epoch(length, seq_len, count, epoch):
    position, starts = StreamPosition(epoch), []
    while position.epoch == epoch:
        starts.append(stream_starts(length, seq_len, count, 0, count, position))
        position = advance(length, seq_len, count, position)
    return np.array(starts)  # (windows, streams)


@settings(max_examples=60, deadline=None)
@given(seq_len=st.integers(1, 9), count=st.integers(1, 6), extra=st.integers(0, 80),
       epoch=st.integers(0, 20))
def test_each_stream_reads_its_own_symbols_in_order_within_the_text(seq_len, count, extra,
                                                                      epoch):
    length = count * (seq_len + 1) + seq_len - 1 + extra
    check_streams(length, seq_len, count)
    starts = _windows_of_epoch(length, seq_len, count, epoch)
    where = layout(length, seq_len, count, epoch)
    assert starts.shape == (where.windows, count) and where.windows >= 1
    assert where.offset == epoch % seq_len
    np.testing.assert_array_equal(np.diff(starts, axis=0), seq_len)  # each window continues
    last = starts + seq_len  # the last symbol a window reads (its last target)
    assert starts.min() >= 0 and last.max() < length
    # a stream's symbols never reach the next stream's first: no two streams share a symbol
    np.testing.assert_array_less(last[-1, :-1], starts[0, 1:])


def test_the_window_boundaries_move_each_epoch_and_every_position_is_one_step_on():
    length, seq_len, count = 200, 7, 3
    firsts = [stream_starts(length, seq_len, count, 0, 1, StreamPosition(e))[0] for e in range(8)]
    assert firsts == [0, 1, 2, 3, 4, 5, 6, 0]
    windows = layout(length, seq_len, count, 0).windows
    position = StreamPosition(4, windows - 2)
    assert advance(length, seq_len, count, position) == StreamPosition(4, windows - 1)
    assert advance(length, seq_len, count, StreamPosition(4, windows - 1)) == StreamPosition(5, 0)


def test_a_rank_reads_its_own_streams_of_all_ranks_streams():
    everyone = stream_starts(500, 5, 6, 0, 6, StreamPosition(2, 3))
    np.testing.assert_array_equal(stream_starts(500, 5, 6, 2, 2, StreamPosition(2, 3)),
                                  everyone[2:4])


def test_streams_need_a_whole_window_each_in_every_epoch():
    seq_len, count = 8, 4
    need = count * (seq_len + 1) + seq_len - 1
    check_streams(need, seq_len, count)
    assert layout(need, seq_len, count, seq_len - 1).windows == 1  # the worst offset
    with pytest.raises(TextError, match=f"needs {need} symbols.*has {need - 1}"):
        check_streams(need - 1, seq_len, count)


# --- a stateful trainer ------------------------------------------------------------------------


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_each_window_begins_from_the_state_the_last_one_of_its_stream_ended_in(backend,
                                                                                 monkeypatch,
                                                                                 cell):
    trainer = TextTrainer.new(TEXT, dataclasses.replace(STATEFUL, cell=cell), backend)
    core, seen = trainer._logits, []
    forward = core._forward_sequence

    def recording(xp, states, xs, every=None):
        tape, ends, ys = forward(xp, states, xs, every)
        seen.append(([np64(s) for s in states], [np64(s) for s in ends]))
        return tape, ends, ys

    monkeypatch.setattr(core, "_forward_sequence", recording)
    windows = layout(len(trainer.ids), STATEFUL.seq_len, STATEFUL.batch, 0).windows
    for _ in range(windows + 2):
        trainer.step()
    assert trainer.position == StreamPosition(1, 2)
    if backend.name == "numpy":  # a view would pin the whole tape
        assert all(s.base is None for s in trainer.carried)
    for k, (begun, _) in enumerate(seen):
        if k % windows == 0:  # an epoch's first window begins from the initial state
            assert not any(s.any() for s in begun)
        else:
            for state, previous in zip(begun, seen[k - 1][1], strict=True):
                np.testing.assert_array_equal(state, previous)
                assert previous.any()


def test_a_stateful_step_reads_each_stream_in_turn():
    trainer = numpy_trainer(STATEFUL)
    read = []
    original = trainer._windows

    def windows():
        window, states = original()
        read.append(window)
        return window, states

    trainer._windows = windows
    trainer.step()
    trainer.step()
    np.testing.assert_array_equal(read[1][0], read[0][-1])  # window 2 begins where 1 ended
    starts = stream_starts(len(trainer.ids), STATEFUL.seq_len, STATEFUL.batch, 0,
                           STATEFUL.batch, StreamPosition(0, 1))
    np.testing.assert_array_equal(read[1], windows_at(trainer.ids, starts, STATEFUL.seq_len))


def test_a_step_that_raises_leaves_the_streams_where_they_were(monkeypatch):
    trainer = numpy_trainer(STATEFUL)
    trainer.step()
    position, carried = trainer.position, [np.array(s) for s in trainer.carried]

    def broken(*args, **kwargs):
        raise RuntimeError("planted")

    monkeypatch.setattr(trainer.optimizer, "step", broken)
    with pytest.raises(RuntimeError, match="planted"):
        trainer.step()
    assert trainer.position == position
    for state, kept in zip(trainer.carried, carried, strict=True):
        np.testing.assert_array_equal(state, kept)


def test_a_resumed_stateful_run_continues_its_streams_and_states_exactly(backend, tmp_path):
    first = numpy_trainer(STATEFUL)
    _losses(first, 3)
    first.sample(20, 1.0)  # sampling moves neither the streams nor their states
    first.save(tmp_path / "c.npz")
    expected = _losses(first, 4)
    checkpoint = load_checkpoint(tmp_path / "c.npz", backend)
    assert checkpoint.streams[0] == {"epoch": 0, "window": 3, "count": 4, "seq_len": 8}
    assert len(checkpoint.streams[1]) == 1
    resumed = checkpoint.trainer(checkpoint.vocab.encode(TEXT))
    assert resumed.position == StreamPosition(0, 3)
    assert resumed.net.backend.name == backend.name
    np.testing.assert_allclose(_losses(resumed, 4), expected,
                               rtol=1e-6 if backend.name == "numpy" else 2e-4)


def test_a_resume_with_another_batch_begins_the_epoch_again_from_the_initial_state(tmp_path):
    first = numpy_trainer(STATEFUL)
    _losses(first, 3)
    first.save(tmp_path / "c.npz")
    checkpoint = load_checkpoint(tmp_path / "c.npz")
    resumed = checkpoint.trainer(checkpoint.vocab.encode(TEXT),
                                 dataclasses.replace(STATEFUL, batch=3))
    assert resumed.position == StreamPosition(0, 0) and resumed.carried is None
    same = checkpoint.trainer(checkpoint.vocab.encode(TEXT))
    assert same.position == StreamPosition(0, 3) and same.carried is not None


@pytest.mark.parametrize("past", [0, 1], ids=["the last window", "one past it"])
def test_a_stored_window_past_the_epochs_last_begins_the_epoch_again(tmp_path, past):
    first = numpy_trainer(STATEFUL)
    _losses(first, 3)
    path = tmp_path / "c.npz"
    first.save(path)
    windows = layout(len(first.ids), STATEFUL.seq_len, STATEFUL.batch, 0).windows
    _edit(path, lambda e: e["streams"].update(window=windows - 1 + past))  # as if edited
    checkpoint = load_checkpoint(path)
    resumed = checkpoint.trainer(checkpoint.vocab.encode(TEXT))
    if past:
        assert resumed.position == StreamPosition(0, 0) and resumed.carried is None
    else:
        assert resumed.position == StreamPosition(0, windows - 1)
        assert resumed.carried is not None
    resumed.step()
    assert resumed.position == (StreamPosition(0, 1) if past else StreamPosition(1, 0))


def test_distributed_ranks_share_positions_and_keep_no_carried_states(tmp_path):
    trainer = numpy_trainer(STATEFUL)
    trainer.share_streams(STATEFUL.batch, 2 * STATEFUL.batch)  # rank 1 of 2
    trainer.step()
    extra = trainer.stream_extra()
    assert extra == {"streams": {"epoch": 0, "window": 1, "count": 8, "seq_len": 8}}
    with pytest.raises(TextError, match="--stateful reads 80 streams"):
        trainer.share_streams(0, 80)


def _edit(path, change):
    net, extra = load_with_extra(path)
    change(extra)
    save(net, path, extra=extra)


@pytest.mark.parametrize("change, match", [
    (lambda e: e["streams"].update(window=-1), "streams is"),
    (lambda e: e["streams"].pop("count"), "streams is"),
    (lambda e: e.pop("streams"), "carried states but no stream position"),
    (lambda e: e.update({"stream_state/3": e["stream_state/0"]}), "not numbered"),
    (lambda e: e.update({"stream_state/0": e["stream_state/0"][:1]}), "do not fit"),
    (lambda e: e.update({"stream_state/0": e["stream_state/0"] * np.nan}), "hold NaN"),
    (lambda e: e.update(held_out={"last": [3, -1.0]}), "held_out is"),
    (lambda e: e.update(held_out={"worst": [3, 1.0]}), "held_out is"),
])
def test_damaged_stream_or_held_out_records_are_refused(tmp_path, change, match):
    trainer = numpy_trainer(dataclasses.replace(STATEFUL, valid=0.2))
    _losses(trainer, 2)
    trainer.held_out_loss()
    path = tmp_path / "c.npz"
    trainer.save(path)
    _edit(path, change)
    with pytest.raises(TextError, match=match):
        checkpoint = load_checkpoint(path)
        checkpoint.trainer(checkpoint.vocab.encode(TEXT))


# --- the held-out split ------------------------------------------------------------------------


@pytest.mark.parametrize("stateful", [False, True])
def test_every_training_window_is_cut_from_the_symbols_before_the_held_out_ones(monkeypatch,
                                                                                 stateful):
    config = dataclasses.replace(STATEFUL, stateful=stateful, valid=0.25)
    trainer = numpy_trainer(config)
    ids = trainer.vocab.encode(TEXT)
    cut = len(ids) - round(len(ids) * 0.25)
    np.testing.assert_array_equal(trainer.held_ids, ids[cut:])
    np.testing.assert_array_equal(trainer.ids, ids[:cut])
    sources = []

    def recorded(original):
        def recording(source, *args):
            sources.append(source)
            return original(source, *args)
        return recording

    for name in ("random_windows", "windows_at"):
        monkeypatch.setattr(trainer_module, name, recorded(getattr(trainer_module, name)))
    for _ in range(40):  # two epochs of streams
        trainer.step()
    assert len(sources) == 40 and all(source is trainer.ids for source in sources)


def test_random_windows_stay_inside_the_training_part():
    training, held = split_held_out(np.arange(100), 0.2, 5)
    assert len(training) == 80 and held[0] == 80
    rng = np.random.default_rng(0)
    assert max(random_windows(training, 5, 64, rng).max() for _ in range(50)) == 79


@pytest.mark.parametrize("fraction, seq_len, match", [
    (0.001, 5, "holds out 0, fewer than the 2"),
    (0.01, 5, "holds out 1, fewer than the 2"),
    (0.5, 60, "leaves 50 of the corpus's 100 symbols for training"),
])
def test_a_split_that_leaves_too_little_is_refused(fraction, seq_len, match):
    with pytest.raises(TextError, match=match):
        split_held_out(np.arange(100), fraction, seq_len)


def test_a_uniform_model_scores_ln_v_nats_and_log2_v_bits(backend):
    trainer = TextTrainer.new(TEXT, dataclasses.replace(TINY, valid=0.3), backend)
    for group in trainer.net.params:
        for name in group:
            group[name] = group[name] * 0.0
    nats, size = trainer.held_out_loss(), len(trainer.vocab)
    assert nats == pytest.approx(math.log(size), rel=1e-6)
    assert bits_per_char(nats) == pytest.approx(math.log2(size), rel=1e-6)


def test_the_held_out_loss_is_scored_with_dropout_off(backend):
    config = dataclasses.replace(TINY, hidden=[8, 8], dropout=0.5, valid=0.3)
    trainer = TextTrainer.new(TEXT, config, backend)
    drawn = [rng.bit_generator.state for rng in trainer.dropout_rngs]
    first = trainer.held_out_loss()
    assert trainer.held_out_loss() == first  # no masks: the same reading every time
    assert [rng.bit_generator.state for rng in trainer.dropout_rngs] == drawn


@pytest.mark.parametrize("bits, worse", [(3.999, False), (4.0, False), (4.001, True)])
def test_a_best_held_out_loss_above_log2_v_bits_says_it_is_worse_than_uniform(bits, worse):
    from dualtape.text.cli import _closing

    line, = _closing(None, [5, bits * math.log(2)], 16)
    assert line.startswith(f"best held-out loss: {bits:.3f} bits/char")
    assert ("worse than a uniform guess over its 16 symbols (4.000 bits/char)" in line) == worse


@pytest.mark.parametrize("factors, said", [((0.99, 1.0, 0.5), 0), ((0.5, 1.01, 1.2), 1)])
def test_the_first_held_out_loss_worse_than_uniform_is_explained_once(factors, said):
    trainer = numpy_trainer(dataclasses.replace(TINY, valid=0.3))
    uniform = math.log(len(trainer.vocab))  # nats per character of a uniform guess
    readings = iter(f * uniform for f in factors)
    trainer.held_out_loss = lambda: next(readings)
    recorder = Recorder()
    run_training(trainer, RunLimits(steps=3, valid_every=1, sample_every=0, sample_chars=0),
                 recorder)
    remarks = [m for m in recorder.messages if "worse than a uniform guess" in m]
    assert len(recorder.held_out) == 3 and len(remarks) == said
    if said:
        assert remarks[0].startswith(f"(held-out {1.01 * math.log2(len(trainer.vocab)):.3f} "
                                     f"bits/char: worse than a uniform guess over its "
                                     f"{len(trainer.vocab)} symbols")


def test_the_closing_speed_is_the_characters_over_the_training_seconds_it_prints(capsys,
                                                                                  corpus):
    code, out, _ = run(capsys, "train-text", str(corpus), *SMALL, "--steps", "400",
                       "--sample-every", "100", "--sample-chars", "300")
    line = next(x for x in out.splitlines() if x.startswith("stopped"))
    found = re.search(r": (\d+) steps in ([\d.]+) s of training.*, ([\d,]+) chars/s \(([\d.]+) "
                      "s of wall time with the held-out readings, samples and saves", line)
    assert code == 0 and found, line
    steps, training, speed, wall = (float(x.replace(",", "")) for x in found.groups())
    chars = steps * 8 * 2  # --seq-len 8, --batch 2
    assert 0 < training <= wall
    assert chars / (training + 0.05) <= speed <= chars / max(training - 0.05, 1e-9)  # printed
    # to 0.1 s


def test_the_held_out_loss_reads_every_stream_whole_across_its_chunks(backend, monkeypatch):
    trainer = TextTrainer.new(TEXT, dataclasses.replace(STATEFUL, valid=0.3), backend)
    monkeypatch.setattr(trainer_module, "HELD_OUT_STREAM", 50)
    monkeypatch.setattr(trainer_module, "HELD_OUT_CHUNK", 7)
    _losses(trainer, 5)
    got = trainer.held_out_loss()
    held, core = trainer.held_ids, trainer._logits
    streams = (len(held) - 1) // 50
    span = (len(held) - 1) // streams
    losses = []
    for s in range(streams):  # each stream in one forward pass from the initial state
        ids = held[s * span:(s + 1) * span + 1]
        hot = np.eye(len(trainer.vocab), dtype=np.float32)[ids][:, None, :]
        _, _, ys = core.forward_sequence(None, dualtape.asarray(hot[:-1]))
        ys = np64(ys)
        z = ys[:, 0, :] - ys[:, 0, :].max(axis=1, keepdims=True)
        log_p = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
        losses.append(-log_p[np.arange(span), ids[1:]].mean())
    assert streams > 1 and span > 7
    assert got == pytest.approx(float(np.mean(losses)), rel=1e-5)


def test_the_run_reads_the_held_out_loss_beside_the_loss_and_the_checkpoint_keeps_it(
        tmp_path):
    trainer = numpy_trainer(dataclasses.replace(TINY, valid=0.2))
    recorder = Recorder()
    log = TrainingLog.open(tmp_path / "run.log.csv")
    limits = RunLimits(steps=6, log_every=3, sample_every=0, sample_chars=0,
                       save=str(tmp_path / "c.npz"), valid_every=4, log=log)
    run_training(trainer, limits, recorder)
    log.close()
    # a reading at every --log-every and --valid-every step, and at the end
    assert [step for step, _, _ in recorder.readings] == [3, 4, 6]
    assert [step for step, _ in recorder.held_out] == [4, 6]
    rows = read_log(tmp_path / "run.log.csv").rows
    assert [r.step for r in rows] == [3, 4, 6] and rows[0].valid_loss is None
    assert [r.valid_loss for r in rows[1:]] == pytest.approx([v for _, v in recorder.held_out])
    record = load_checkpoint(tmp_path / "c.npz").held_out
    assert record["last"] == [6, recorder.held_out[-1][1]]
    assert record["best"] == list(min(recorder.held_out, key=lambda r: r[1]))
    resumed = load_checkpoint(tmp_path / "c.npz").trainer(trainer.vocab.encode(TEXT))
    np.testing.assert_array_equal(resumed.held_ids, trainer.held_ids)
    assert resumed.held_out == record


# --- the command line --------------------------------------------------------------------------


SMALL = ["--hidden", "8", "--seq-len", "8", "--batch", "2", "--backend", "numpy", "--seed", "4",
         "--sample-chars", "0"]


def test_stateful_training_from_the_command_line_resumes_and_says_so(capsys, corpus, tmp_path):
    path = str(tmp_path / "c.npz")
    code, out, _ = run(capsys, "train-text", str(corpus), *SMALL, "--cell", "gru", "--stateful",
                       "--steps", "3", "--save", path)
    assert code == 0 and "2 streams read in order (stateful), windows of 8" in out
    assert "held out: the corpus's last 10% (58 symbols)" in out
    assert load_checkpoint(path).config.stateful
    code, out, _ = run(capsys, "train-text", str(corpus), "--resume", path, "--steps", "2",
                       "--sample-chars", "0")
    assert code == 0 and "stateful" in out
    fails(capsys, "train-text", str(corpus), "--resume", path, "--valid", "0.2",
          match="--valid 0.2 does not match the checkpoint")


def test_grenade_lstm_is_refused_stateful_windows(capsys, corpus):
    fails(capsys, "train-text", str(corpus), *SMALL, "--stateful",
          match="--stateful needs a cell whose state stays bounded")


@pytest.mark.parametrize("argv, match", [
    (["--cell", "lstm", "--stateful", "--batch", "80"], "--stateful reads 80 streams"),
    (["--valid", "0.9"], "--valid must be a fraction in [0, 0.5], got 0.9"),
    (["--valid-every", "-1"], "--valid-every must be 0 or more"),
])
def test_stream_and_split_options_are_checked(capsys, corpus, argv, match):
    fails(capsys, "train-text", str(corpus), *SMALL, *argv, match=match)


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text(TEXT, encoding="utf-8")
    return path


def test_the_closing_lines_give_the_best_held_out_loss_of_every_run(capsys, corpus, tmp_path):
    path = str(tmp_path / "c.npz")
    run(capsys, "train-text", str(corpus), *SMALL, "--steps", "4", "--save", path)
    _edit(path, lambda e: e.update(held_out={"last": [4, 3.0], "best": [2, 0.125]}))
    code, out, _ = run(capsys, "train-text", str(corpus), "--resume", path, "--steps", "2",
                       "--sample-chars", "0")
    assert code == 0 and load_checkpoint(path).held_out["last"][0] == 6
    assert f"best held-out loss: {bits_per_char(0.125):.3f} bits/char (0.125 nats) at step 2" \
        in out
