"""``dt.tape_report`` and ``dualtape tape``: the sizes against the tapes' own arrays on every
backend, against what numpy (tracemalloc) and CuPy (its memory pool, where a GPU is) measure
held, the measured peak of a training call against the peak of a real one (the seed network, the
main job's model, the digits network; full and checkpointed tapes, within 10%), and bad input
refused in one line."""

from __future__ import annotations

import copy
import gc
import io
import os
import string
import tracemalloc

import numpy as np
import pytest

import dualtape as dt
from dualtape import spare
from dualtape.backend import free_memory, resolve_backend
from dualtape.benchmarks.digits import conv_net
from dualtape.call_peak import _lines, _measured, checked_loss, probe_steps, zeros_input
from dualtape.checkpointing import segment_length
from dualtape.cli import main
from dualtape.meters import PoolMeter, TracedMeter, traced_peak
from dualtape.recurrent import _GRADIENT_BUFFERS
from dualtape.stack import stack_forward
from dualtape.tape_memory import least_bytes, probe_bytes
from dualtape.tape_report import _arrays, _Entry, _fit, _nbytes
from dualtape.text.config import TrainConfig
from dualtape.text.model import build_text_network
from dualtape.text.tape import training_call
from dualtape.text.trainer import TextTrainer


def seed_network() -> dt.RecurrentNetwork:
    return dt.RecurrentNetwork([dt.LSTM(40, 512, seed=1), dt.LSTM(512, 40, seed=2)])


def main_job_model() -> dt.RecurrentNetwork:
    return build_text_network(57, [80, 80], seed=1)  # train-text's default layers, vocab 57


def held(run):
    """``(result, bytes)``: what ``run()`` returns, and the numpy memory it still holds (not
    the spare arrays nobody uses: ``spare.clear``)."""
    gc.collect()
    spare.clear()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        result = run()
        gc.collect()
        spare.clear()
        return result, tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


def pool_held(run):
    """``(result, bytes)``: what ``run()`` returns, and the bytes of CuPy's default memory
    pool it still holds (blocks rounded up to 512 bytes, as the pool allocates them), after
    one call whose result is dropped (cuBLAS's workspace and the kernels' one-time buffers
    come from the pool too)."""
    import cupy

    pool = cupy.get_default_memory_pool()
    run()
    gc.collect()
    cupy.cuda.Device().synchronize()
    before = pool.used_bytes()
    result = run()
    gc.collect()
    cupy.cuda.Device().synchronize()
    return result, pool.used_bytes() - before


def measured_held(backend):
    """The memory meter of ``backend``: tracemalloc on numpy, the pool on CuPy; the others
    skip (neither sees their allocations)."""
    if backend.name not in ("numpy", "cupy"):
        pytest.skip("tracemalloc sees numpy's memory and CuPy's pool CuPy's; not "
                    f"{backend.name}'s")
    return held if backend.name == "numpy" else pool_held


def training_peak(backend, call) -> int:
    """The peak of what ``call()`` allocates and holds at once, after a first call (the kept
    gradient buffers, compiled code): tracemalloc on numpy, the memory pool on CuPy."""
    measured_held(backend)  # the others skip
    call()
    with (TracedMeter() if backend.name == "numpy" else PoolMeter()) as meter:
        call()
        return meter.peak


def array_bytes(tape) -> int:
    """The bytes of a tape's arrays, each block of memory once."""
    spans = {}
    for _, a in _arrays(tape, ""):
        spans[id(a)] = a
    return sum(_nbytes(a) for a in spans.values())


def test_the_seed_network_table():
    report = dt.tape_report(seed_network(), seq_len=50, batch=1)
    layer0 = report.layers[0]
    assert [(f.path, f.shape, f.dtype, f.bytes) for f in layer0.fields] == [
        ("xs", (50, 1, 40), "float32", 8000), ("cells", (51, 1, 512), "float32", 104448),
        ("gates", (50, 1, 2048), "float32", 409600)]
    assert report.tape_bytes == 664608 == sum(layer.bytes for layer in report.layers)
    assert (report.every, report.segments, report.recompute_steps) == (8, 7, 48)
    assert report.param_bytes == 4 * report.param_count == report.optimizer_bytes
    assert dt.tape_report(seed_network(), seq_len=50, batch=1, optimizer="adam"
                          ).optimizer_bytes == 2 * report.param_bytes
    assert dt.tape_report(seed_network(), seq_len=50, batch=1, optimizer=dt.SGD(0.1)
                          ).optimizer_bytes == 0
    text = str(report)
    assert "LSTMSequenceTape" in text and "409,600" in text and "48 forward steps" in text


@pytest.mark.parametrize("steps", [1, 3, 7, 50])
@pytest.mark.parametrize("policy", ["sqrt", 4])
def test_sizes_equal_the_tapes_arrays(backend, steps, policy):
    """The scaled sizes equal those of the tapes forward_sequence makes, full and
    checkpointed, on every backend, with ids, Dropout and shared memory in the stack."""
    net = dt.RecurrentNetwork([dt.Embedding(11, 6, seed=1), dt.LSTM(6, 8, seed=2),
                               dt.Dropout(0.5, seed=3), dt.GRU(8, 5, seed=4),
                               dt.FullyConnected(5, 11, seed=5), dt.Relu(),
                               dt.FullyConnected(11, 11, seed=6), dt.Softmax()])
    ids = dt.asarray(np.zeros((steps, 3), dtype=np.int64))
    mask_state = net.layers[2].rng.bit_generator.state
    report = dt.tape_report(net, seq_len=steps, batch=3, tape=policy)
    assert net.layers[2].rng.bit_generator.state == mask_state  # the probes left no trace
    full, _, _ = net.forward_sequence(None, ids)
    shared = [f for layer in report.layers for f in layer.fields if f.shared_with]
    fused = {"parameters"} if 11 < steps * 3 else set()  # the Embedding's weight (stack.fuses)
    assert {f.shared_with for f in shared} == {"layer 3 hs", "layer 5 y", *fused}
    assert ("xs.table" in {f.path for f in report.layers[1].fields}) == bool(fused)
    per_layer = [sum(_nbytes(a) for _, a in _arrays(t, "")) for t in full.tapes]
    assert [layer.bytes + sum(_nbytes_of(f) for f in layer.fields if f.shared_with)
            for layer in report.layers] == per_layer
    kept, _, _ = net.forward_sequence(None, ids, tape=policy)
    assert report.every == kept.every and report.segments == len(kept.states)
    whole = _nbytes(kept.xs) + sum(_nbytes(s) for group in kept.states for s in group)
    last = [sum(_nbytes(a) for path, a in _arrays(t, "")
                if not (k == 0 and path == "ids") and path != "xs.table")
            for k, t in enumerate(kept.last.tapes)]
    last[4] -= _nbytes(kept.last.tapes[4].x)  # the shared fields, once
    last[6] -= _nbytes(kept.last.tapes[6].x)
    assert report.checkpoint_bytes == whole + sum(last)
    assert report.recompute_steps == steps - kept.last.steps


def _nbytes_of(field) -> int:
    return int(np.prod(field.shape)) * np.dtype(field.dtype).itemsize


@pytest.mark.parametrize("name, make, steps, batch", [
    ("seed network", seed_network, 50, 1), ("main job's model", main_job_model, 50, 32)])
def test_within_ten_percent_of_the_memory_held(backend, name, make, steps, batch):
    """The full tape, the checkpointed tape after forward, and held in backward (the kept
    tape plus one recomputed segment), each against what the backend's meter sees held."""
    measure, net = measured_held(backend), make()
    report = dt.tape_report(net, seq_len=steps, batch=batch)
    xs = backend.xp.zeros((steps, batch, net.n_in), dtype=net.dtype)
    _, full = measure(lambda: net.forward_sequence(None, xs)[0])
    kept, checkpointed = measure(lambda: net.forward_sequence(None, xs, tape="sqrt")[0])
    _, segment = measure(lambda: stack_forward(net.layers, backend.xp, kept.states[0],
                                               kept.xs[: kept.every, ...])[0])
    assert report.tape_bytes == pytest.approx(full, rel=0.1), name
    assert report.checkpoint_bytes == pytest.approx(checkpointed, rel=0.1), name
    assert report.checkpoint_peak_bytes == pytest.approx(checkpointed + segment, rel=0.1), name
    assert report.checkpoint_bytes < report.tape_bytes / 4


@pytest.mark.parametrize("name, make, batch", [
    ("seed network", seed_network, 1), ("main job's model", main_job_model, 32)])
@pytest.mark.parametrize("tape", ["full", "sqrt"])
def test_a_training_calls_peak_within_ten_percent_of_a_real_one(backend, name, make, batch,
                                                                 tape):
    """At T = 200 the report probes (16, 32, 48 steps; 3, 4 and 5 segments of 15) and scales;
    the real call is ``train_recurrent`` with momentum on random data at T, its optimizer step
    included. The main job's checkpointed call peaks in its loss (about 5 arrays of (T, B, 57)),
    which overtakes its backward pass only past 9 segments: the probes see the loss's line
    apart from the backward pass's."""
    net, steps = make(), 200
    report = dt.tape_report(net, seq_len=steps, batch=batch, tape=tape)
    assert _GRADIENT_BUFFERS.get(net) is None  # the probes ran on a copy
    rng = np.random.default_rng(3)
    xs = dt.asarray(rng.uniform(-1, 1, (steps, batch, net.n_in)).astype(np.float32))
    if report.loss == "cross_entropy":
        targets = dt.asarray(rng.integers(0, net.n_out, (steps, batch)))
    else:
        targets = dt.asarray(rng.uniform(-1, 1, (steps, batch, net.n_out)).astype(np.float32))
    optimizer = dt.SGD(1e-6, momentum=0.9)
    real = training_peak(backend, lambda: dt.train_recurrent(net, xs, targets, optimizer,
                                                             loss=report.loss, tape=tape))
    found = report.call_peak_bytes if tape == "full" else report.checkpoint_call_peak_bytes
    assert found == pytest.approx(real, rel=0.1), name
    assert "probes of" in report.call_peak_by and "approximate" not in report.call_peak_by
    kept = sum(g.nbytes for group in dt.recurrent.gradient_buffers(net) if group
               for g in group.values())
    assert report.kept_gradient_bytes == kept == report.param_bytes  # LSTMs and the top layer
    total = report.training_peak_bytes if tape == "full" else \
        report.checkpoint_training_peak_bytes
    assert total == report.param_bytes + report.optimizer_bytes + kept + found


def test_a_short_sequence_is_measured_at_its_length(backend):
    measured_held(backend)  # the others skip
    net = seed_network()
    report = dt.tape_report(net, seq_len=20, batch=1)
    xs = dt.asarray(np.zeros((20, 1, 40), dtype=np.float32))
    real = training_peak(backend, lambda: dt.backpropagate_sequence(net, xs, xs))
    assert report.call_peak_bytes == pytest.approx(real, rel=0.01)
    assert "one backpropagate_sequence at 20" in report.call_peak_by
    assert "one call at 20" in report.call_peak_by  # 4 segments of 5: measured too


def test_the_peak_is_said_not_measured_where_no_meter_sees_it(backend):
    report = dt.tape_report(seed_network(), seq_len=5, batch=1)
    if backend.name in ("numpy", "cupy"):
        assert report.call_peak_bytes > report.tape_bytes
        assert dt.tape_report(seed_network(), seq_len=5, batch=1, peak=False
                              ).call_peak_bytes is None
    else:
        assert report.call_peak_bytes is None and report.training_peak_bytes is None
        assert report.call_peak_by.startswith(f"not measured: {backend.name}'s allocations")
        assert f"one training call's peak: not measured: {backend.name}" in str(report)


def test_the_peak_is_not_measured_inside_a_trace():
    tracemalloc.start()
    try:
        report = dt.tape_report(seed_network(), seq_len=5, batch=1)
    finally:
        tracemalloc.stop()
    assert report.call_peak_bytes is None and "already tracing" in report.call_peak_by


def test_probes_off_a_line_are_said_to_be_approximate():
    line = [(100 + 10 * x, 50, 7) for x in (1, 2, 3)]
    assert _lines([1, 2, 3], line, 10, "steps") == (200, "probes of 1, 2, 3 steps scaled to 10")
    bent = [(100, 50, 7), (200, 50, 7), (210, 50, 7)]  # the first probe 90 off a line at 190
    peak, how = _lines([1, 2, 3], bent, 10, "steps")
    assert peak == 280 and "approximate: its first probe lies 90% off the line" in how
    # the largest phase at x wins, though another led at every probe
    assert _lines([1, 2, 3], [(90, 10 + 40 * x, 0) for x in (1, 2, 3)], 10, "")[0] == 410


def test_the_digits_network_within_ten_percent_of_the_memory_held(backend):
    measure, net = measured_held(backend), conv_net(1, "float32")
    report = dt.tape_report(net, (32, 1, 8, 8))  # examples/digits.py's minibatch
    x = backend.xp.zeros((32, 1, 8, 8), dtype=backend.xp.float32)
    tapes, measured = measure(lambda: net.forward(x)[0])
    assert report.tape_bytes == pytest.approx(measured, rel=0.1)
    assert report.tape_bytes == sum(layer.bytes for layer in report.layers)
    report = dt.tape_report(net, (32, 1, 8, 8), loss="softmax_cross_entropy")
    labels = backend.xp.asarray(np.arange(32) % 10)
    optimizer = dt.Adam()
    real = training_peak(backend, lambda: dt.train(net, x, labels, optimizer,
                                                   loss="softmax_cross_entropy"))
    assert report.call_peak_bytes == pytest.approx(real, rel=0.1)
    assert report.kept_gradient_bytes == 0  # a Network's gradients are made in each call
    assert report.layers[5].fields[0].shared_with == "layer 3 y"  # the Relu's output, once
    assert report.segments == 0 and "tape=" not in str(report)


def test_a_network_on_every_backend(backend):
    net = dt.Network([dt.FullyConnected(4, 3, seed=1), dt.Tanh(), dt.FullyConnected(3, 2, seed=2)])
    x = dt.asarray(np.zeros((5, 4), dtype=np.float32))
    report = dt.tape_report(net, x)
    assert report.backend == backend.name
    quick = dt.tape_report(net, x, peak=False)
    assert quick == dt.tape_report(net, batch=5, peak=False) == dt.tape_report(net, (5, 4),
                                                                              peak=False)
    assert (quick.tape_bytes, quick.layers) == (report.tape_bytes, report.layers)
    tapes, _ = net.forward(x)
    assert report.tape_bytes == 5 * 4 * 4 + 5 * 3 * 4  # the Tanh's y is the next layer's x
    assert report.tape_bytes == array_bytes(tapes)  # each array object once


@pytest.mark.parametrize("call, error, words", [
    (lambda: dt.tape_report(dt.Network([dt.Tanh()]), (2, 3), seq_len=4), ValueError,
     "a Network has no sequence"),
    (lambda: dt.tape_report(seed_network(), seq_len=-1, batch=1), ValueError, "seq_len"),
    (lambda: dt.tape_report(seed_network(), seq_len=5, batch=0), ValueError, "batch"),
    (lambda: dt.tape_report(seed_network(), seq_len=5), ValueError, "needs batch"),
    (lambda: dt.tape_report(seed_network(), seq_len=5, batch=True), ValueError, "batch"),
    (lambda: dt.tape_report(seed_network(), seq_len=5, batch=1, tape="half"), ValueError,
     "'full', 'sqrt' or a number"),
    (lambda: dt.tape_report(seed_network(), seq_len=5, batch=1, tape=0), ValueError, "got 0"),
    (lambda: dt.tape_report(seed_network(), (5, 1, 7)), ValueError, "takes"),
    (lambda: dt.tape_report(seed_network(), (5, 1, 40), seq_len=6), ValueError, "disagrees"),
    (lambda: dt.tape_report(seed_network(), seq_len=5, batch=1, optimizer="rmsprop"),
     ValueError, "optimizer must be"),
    (lambda: dt.tape_report([dt.Tanh()], (2, 3)), TypeError, "Network or RecurrentNetwork"),
    (lambda: dt.tape_report(conv_net(1, "float32"), batch=2), ValueError, "free axes"),
    (lambda: dt.tape_report(seed_network(), seq_len=5, batch=1, loss="hinge"), ValueError,
     "loss must be one of squared_error"),
    (lambda: dt.tape_report(seed_network(), seq_len=5, batch=1, peak="no"), TypeError,
     "peak must be True or False"),
    (lambda: dt.tape_report(main_job_model(), seq_len=5, batch=1,
                            loss="softmax_cross_entropy"), ValueError, "takes logits"),
])
def test_bad_input_is_refused_in_one_line(call, error, words):
    with pytest.raises(error, match=words) as caught:
        call()
    assert "\n" not in str(caught.value) and str(caught.value).startswith("tape_report: ")


def test_the_command(tmp_path, capsys):
    seed, digits = tmp_path / "seed.npz", tmp_path / "digits.npz"
    dt.save(seed_network(), seed)
    dt.save(conv_net(1, "float32"), digits)
    text = tmp_path / "text.npz"
    dt.save(main_job_model(), text, extra={"vocabulary": "train-text's"})
    assert main(["tape", str(seed), "--seq-len", "50", "--batch", "1"]) == 0
    out = capsys.readouterr().out
    sizes = str(dt.tape_report(seed_network(), seq_len=50, batch=1, peak=False))
    assert sizes.rsplit("\n", 1)[0] in out  # all but the line saying the peak is not measured
    assert "one training call's peak (loss squared_error), measured" in out
    assert main(["tape", str(text), "--seq-len", "50", "--batch", "32", "--optimizer",
                 "adam", "--tape", "10"]) == 0
    assert "Adam, 2 slots" in capsys.readouterr().out
    assert main(["tape", str(digits), "--batch", "32", "--shape", "1,8,8", "--loss",
                 "softmax_cross_entropy"]) == 0
    assert "(loss softmax_cross_entropy)" in capsys.readouterr().out
    for argv, words in [
        ([str(tmp_path / "none.npz"), "--seq-len", "5"], "cannot read"),
        ([str(tmp_path), "--seq-len", "5"], "not a regular file"),
        ([__file__, "--seq-len", "5"], "not a dualtape file"),
        ([str(seed), "--seq-len", "-2"], "--seq-len must be an integer >= 1"),
        ([str(seed), "--seq-len", "5", "--batch", "two"], "--batch must be"),
        ([str(seed), "--seq-len", "5", "--tape", "root"], "full, sqrt or an integer"),
        ([str(text), "--seq-len", "5", "--loss", "softmax_cross_entropy"], "takes logits"),
        ([str(seed)], "give --seq-len"),
        ([str(digits), "--seq-len", "4"], "drop --seq-len"),
        ([str(digits)], "--shape"),
        ([str(seed), "--seq-len", "5", "--plot", str(tmp_path / "no" / "a.png")],
         "cannot write"),
    ]:
        assert main(["tape", *argv]) == 1, argv
        captured = capsys.readouterr()
        assert captured.out == "" and captured.err.count("\n") == 1, argv
        assert captured.err.startswith("dualtape tape: error: ") and words in captured.err


def test_the_plot(tmp_path, capsys, monkeypatch):
    seed, picture = tmp_path / "seed.npz", tmp_path / "tape.png"
    dt.save(seed_network(), seed)
    pytest.importorskip("matplotlib")
    assert main(["tape", str(seed), "--seq-len", "20", "--plot", str(picture)]) == 0
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    capsys.readouterr()
    monkeypatch.setattr("importlib.util.find_spec", lambda name, *a: None)
    assert main(["tape", str(seed), "--seq-len", "20", "--plot", str(picture)]) == 1
    assert "needs matplotlib" in capsys.readouterr().err


@pytest.mark.parametrize("steps", [2, 9])
def test_ids_in_place_of_one_hot_rows(backend, steps):
    """A shape of no example axes feeds a first recurrent layer ids, as train-text does: the
    sizes are those of the tapes a forward pass on ids makes, and the inputs are int64."""
    net = dt.RecurrentNetwork([dt.LSTM(11, 6, seed=1), dt.GRU(6, 5, seed=2),
                               dt.FullyConnected(5, 11, seed=3)])
    report = dt.tape_report(net, (steps, 3), tape=4, loss="softmax_cross_entropy")
    ids = dt.asarray(np.zeros((steps, 3), dtype=np.int64))
    full, _, _ = net.forward_sequence(None, ids)
    assert report.input_shape == (steps, 3)
    assert report.layers[0].fields[0].shape == (steps, 3)
    assert report.layers[0].fields[0].dtype == "int64"
    assert [layer.bytes + sum(_nbytes_of(f) for f in layer.fields if f.shared_with)
            for layer in report.layers] == [sum(_nbytes(a) for _, a in _arrays(t, ""))
                                            for t in full.tapes]
    assert report.input_bytes == steps * 3 * 8
    assert dt.tape_report(net, (steps, 3, 11), peak=False).layers[0].fields[0].dtype == \
        "float32"  # one-hot rows, when the example axis is given


def text_checkpoint(path, **config) -> TextTrainer:
    """A train-text checkpoint at ``path`` (after one step); its trainer."""
    text = "".join(np.random.default_rng(0).choice(list(string.ascii_letters + " ,."), 6000))
    trainer = TextTrainer.new(text, TrainConfig(seed=1, **config), resolve_backend("numpy"))
    trainer.step()
    trainer.save(str(path))
    return trainer


def test_a_train_text_checkpoint_is_reported_as_train_text_calls_it(tmp_path):
    """Not the saved network (one-hot rows into a final Softmax, its probabilities scored by
    cross_entropy: over by the one-hot input and the Softmax's tape) but the call a step
    makes: the layers before Softmax fed ids, softmax_cross_entropy on their logits, at the
    checkpoint's windows and with its optimizer; its peak is a real step's."""
    trainer = text_checkpoint(tmp_path / "model.npz", hidden=[32, 32], seq_len=40, batch=8)
    call = training_call(str(tmp_path / "model.npz"))
    assert call.ids and call.loss == "softmax_cross_entropy"
    assert (call.seq_len, call.batch) == (40, 8) and type(call.optimizer) is dt.SGD
    assert [layer.kind for layer in call.net.layers] == ["LSTM", "LSTM", "FullyConnected"]
    report = dt.tape_report(call.net, (40, 8), loss=call.loss, optimizer=call.optimizer)
    trainer.step()
    real = traced_peak(trainer.step)  # the optimizer's step and the clipping included
    assert report.call_peak_bytes == pytest.approx(real, rel=0.02)
    saved = dt.tape_report(trainer.net, (40, 8, len(trainer.vocab)))
    assert saved.call_peak_bytes > 1.03 * real and saved.tape_bytes > 1.2 * report.tape_bytes


def test_the_command_on_a_train_text_checkpoint(tmp_path, capsys):
    path = tmp_path / "model.npz"
    trainer = text_checkpoint(path, hidden=[8, 8], seq_len=12, batch=3, dropout=0.5,
                              optimizer="adam", rate=0.01)
    assert main(["tape", str(path)]) == 0
    first, rest = capsys.readouterr().out.split("\n", 1)
    assert first == (f"{path} is a train-text checkpoint: this is the call train-text makes, "
                     "the layers before its Softmax fed the windows' symbol ids, their logits "
                     "scored by softmax_cross_entropy (trained on windows of 12 x batch 3 with "
                     "Adam)")
    logits = dt.RecurrentNetwork(trainer.net.layers[:-1])
    sizes = str(dt.tape_report(logits, (12, 3), optimizer="adam", peak=False))
    assert rest.startswith(sizes.rsplit("\n", 1)[0])  # all but the peak's line
    assert "(loss softmax_cross_entropy)" in rest and "Adam, 2 slots" in rest
    assert "    mask " in rest  # the Dropout is on, as in training
    assert main(["tape", str(path), "--seq-len", "5", "--batch", "2", "--optimizer", "none",
                 "--loss", "squared_error"]) == 0
    out = capsys.readouterr().out
    assert "seq_len 5, batch 2, input (5, 2)" in out and "(none, 0 slots)" in out
    assert "(loss squared_error)" in out
    damaged = tmp_path / "damaged.npz"
    dt.save(trainer.net, damaged, extra={"text_format": 1})
    assert main(["tape", str(damaged)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"dualtape tape: error: {damaged}: ") and err.count("\n") == 1


def text_logits() -> dt.RecurrentNetwork:
    return dt.RecurrentNetwork(main_job_model().layers[:-1])  # as train-text calls it


@pytest.mark.parametrize("name, make, shape, tape, largest", [
    ("ids into the main job's logits", text_logits, (200, 32), "sqrt", 48),
    ("one-hot rows, long segments", lambda: dt.RecurrentNetwork([dt.LSTM(4, 8, seed=1)]),
     (1000, 1, 4), 400, 1000),
    ("Embedding, GRU, Dropout, StandardLSTM", lambda: dt.RecurrentNetwork([
        dt.Embedding(50, 16, seed=1), dt.GRU(16, 32, seed=2), dt.Dropout(0.3, seed=3),
        dt.StandardLSTM(32, 24, seed=4), dt.FullyConnected(24, 50, seed=5), dt.Softmax()]),
     (300, 8), "full", 54),
    ("wide rows into a narrow cell: the input is most", lambda: dt.RecurrentNetwork(
        [dt.LSTM(300, 2, seed=1)]), (2000, 1, 300), "full", 135),
    ("the same in long segments: the inputs kept", lambda: dt.RecurrentNetwork(
        [dt.LSTM(300, 2, seed=1)]), (2000, 1, 300), 500, 2000),
    ("few steps: the parameters are most", seed_network, (48, 1, 40), "full", 48),
    ("the digits network", lambda: conv_net(1, "float32"), (256, 1, 8, 8), "full", None),
    ("a fully-connected network", lambda: dt.Network([
        dt.FullyConnected(100, 300, seed=1), dt.Tanh(), dt.FullyConnected(300, 10, seed=2),
        dt.Softmax()]), (512, 100), "full", None),
])
def test_the_estimate_bounds_what_the_probes_hold(name, make, shape, tape, largest):
    """What ``dualtape tape`` checks against the free memory before measuring: never below
    what the report's calls hold at their largest (its peak, the network's copy and the kept
    gradients), and at most 2.5 times it; ``largest``: the steps of the call that holds most
    (the full tape's longest probe, or a checkpointed call of long segments)."""
    net = make()
    recurrent = isinstance(net, dt.RecurrentNetwork)
    loss = checked_loss(net, "softmax_cross_entropy" if name.startswith("ids") else None)
    every = segment_length(tape, shape[0]) if recurrent else None
    calls = [(t, "full") for t in probe_steps(shape[0])] if recurrent else [(shape[0], None)]
    if every:
        calls += [(t, every) for t in probe_steps(shape[0], every)]
    probe, numpy = copy.deepcopy(net), resolve_backend("numpy")
    held = max(max(_measured(TracedMeter, probe, numpy, (t, *shape[1:]), policy, loss))
               + zeros_input(net, numpy, (t, *shape[1:])).nbytes  # made before the meter
               for t, policy in calls)
    held += sum(p.nbytes for group in net.params for p in group.values()) * (
        2 if recurrent else 1)  # the copy, and a sequence's kept gradients
    need = probe_bytes(net, shape, tape)
    assert held <= need.bytes <= 2.5 * held, name
    assert need.steps == largest


def test_the_command_refuses_a_report_the_machine_cannot_hold(tmp_path, capsys, monkeypatch):
    """Before the report's probes run: sizes no machine holds (their input alone, known from
    the shape and dtype, refused before even a tiny probe allocates an example of it), and,
    with the free memory made 1 MiB, reports of a few MiB (the estimate); each one line giving
    the need, the call and what there is, and the options that make it smaller."""
    path, conv = tmp_path / "model.npz", tmp_path / "conv.npz"
    text_checkpoint(path, hidden=[8], seq_len=12, batch=3)
    dt.save(dt.Network([dt.Convolution(1, 4, (3, 3), seed=1), dt.Relu()]), conv)

    def refused(model, *argv: str, need: str) -> str:
        assert main(["tape", str(model), *argv]) == 1
        out, err = capsys.readouterr()
        assert out == "" and err.count("\n") == 1 and "Traceback" not in err
        assert err.startswith(f"dualtape tape: error: measuring this report needs {need} ")
        return err

    err = refused(path, "--batch", str(10**12), need="more than")
    assert "(a training call on 12 steps x batch 1,000,000,000,000: its input alone)" in err
    assert err.endswith("GiB available; give a smaller --seq-len, --batch or --tape\n")
    err = refused(conv, "--shape", "1,1000000,1000000", need="more than")  # 4 TB an example
    assert "(a training call on batch 1: its input alone)" in err
    assert err.endswith("give a smaller --batch or --shape\n")
    monkeypatch.setattr("dualtape.tape_command.free_memory", lambda backend: 2**30)
    err = refused(path, "--seq-len", str(10**12), "--tape", "full", need="about")
    assert "(a training call on 3,000,000 steps x batch 3: its tape and temporaries)" in err
    assert "but this machine has 1.0 GiB available" in err  # the probes', not T's
    monkeypatch.setattr("dualtape.tape_command.free_memory", lambda backend: 2**20)
    err = refused(path, "--seq-len", str(10**12), need="more than")  # 5 segments of 10**6
    assert "(a training call on 5,000,000 steps x batch 3: its input alone)" in err
    refused(path, "--seq-len", "2000", "--batch", "64", need="about")
    err = refused(conv, "--shape", "1,64,64", "--batch", "64", need="about")  # its input 1 MiB
    assert "(a training call on batch 64: its tape and temporaries)" in err
    monkeypatch.setattr("dualtape.tape_command.free_memory", lambda backend: None)
    assert main(["tape", str(path), "--seq-len", "20", "--batch", "2"]) == 0  # not told: run


def test_the_least_is_the_largest_calls_input(tmp_path):
    net, ids = seed_network(), text_logits()
    assert least_bytes(net, (50, 3, 40), "full") == (48 * 3 * 40 * 4, 48)  # probes to 48
    assert least_bytes(net, (1000, 3, 40), 400) == (1000 * 3 * 40 * 4, 1000)  # 3 segments
    assert least_bytes(ids, (10, 7), "sqrt") == (10 * 7 * 8, 10)  # int64 ids
    assert least_bytes(conv_net(1, "float64"), (5, 1, 8, 8)) == (5 * 64 * 8, None)
    with pytest.raises(ValueError, match="takes 40 features"):
        least_bytes(net, (10, 2, 39))


def test_the_command_on_an_embedding_first_network(tmp_path, capsys):
    """Its input, ids, has no example axes: nothing free to give with --shape."""
    path = tmp_path / "emb.npz"
    dt.save(dt.RecurrentNetwork([dt.Embedding(50, 16, seed=1), dt.LSTM(16, 8, seed=2)]), path)
    assert main(["tape", str(path), "--seq-len", "20", "--batch", "2"]) == 0
    assert "seq_len 20, batch 2, input (20, 2)" in capsys.readouterr().out


def test_the_free_memory_is_the_available_memory_else_the_free_pages(monkeypatch):
    """What the refusal compares with on the CPU: Linux's MemAvailable; elsewhere the free
    pages sysconf counts; None where neither can be read."""
    numpy, real, opened = resolve_backend("numpy"), os.path.exists, open
    meminfo = "MemTotal:  900 kB\nMemFree:  10 kB\nMemAvailable:  50 kB\nCached:  40 kB\n"
    monkeypatch.setattr(os.path, "exists", lambda path: path == "/proc/meminfo" or real(path))
    monkeypatch.setattr("builtins.open", lambda path, *a, **k: io.StringIO(meminfo)
                        if path == "/proc/meminfo" else opened(path, *a, **k))
    assert free_memory(numpy) == 50 * 1024  # the page cache it may take back counted
    monkeypatch.setattr(os.path, "exists", lambda path: path != "/proc/meminfo" and real(path))
    monkeypatch.setattr(os, "sysconf", {"SC_AVPHYS_PAGES": 1000, "SC_PAGE_SIZE": 4096}.get)
    assert free_memory(numpy) == 4_096_000
    monkeypatch.setattr(os, "sysconf", {}.__getitem__)  # not a name this system knows
    assert free_memory(numpy) is None


def test_a_tape_not_affine_in_the_steps_is_not_scaled():
    """Sizes from 1 and 2 steps that the third probe contradicts (a tape growing as T²) are not
    extrapolated: the report then measures one pass at T instead."""
    def entries(rows: int) -> tuple[list[str], list[_Entry]]:
        return ["SquareTape"], [_Entry(0, "x", (rows, 4), "float32", 4, None)]

    assert _fit([entries(1), entries(2), entries(3)]) is not None
    assert _fit([entries(1), entries(4), entries(9)]) is None
    assert _fit([entries(1), entries(2), (["Other"], entries(3)[1])]) is None
