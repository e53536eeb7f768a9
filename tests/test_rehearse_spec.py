"""What the compile-ahead child rehearses (text/rehearse.py), in this process: the loops it
warms, the network, threads and held-out text it runs with. Numba compiles per argument type,
so the rehearsal must pass the run's dtype, cell, dropout and held-out reading; whether the run
then compiles nothing is tested in fresh processes (test_compile_ahead.py)."""

from __future__ import annotations

import contextlib

import pytest

from dualtape.backend import resolve_backend
from dualtape.kernels import compile_ahead, numba_lstm, numba_standard_lstm_gru
from dualtape.text import rehearse
from dualtape.text.config import TrainConfig
from dualtape.text.trainer import TextTrainer

TEXT = "the quick brown fox jumps over the lazy dog " * 40


@pytest.mark.parametrize("cell, module", [("LSTM", numba_lstm),
                                          ("StandardLSTM", numba_standard_lstm_gru),
                                          ("GRU", numba_standard_lstm_gru)])
def test_warm_up_compiles_the_cells_own_loops_for_the_dtype(monkeypatch, cell, module):
    warmed = []
    for loops in (numba_lstm, numba_standard_lstm_gru):
        monkeypatch.setattr(loops, "warm_up", lambda dtype, loops=loops: warmed.append(
            (loops, dtype)) or 1.5)
    assert rehearse.warm_up(cell, "float64") == 1.5
    assert warmed == [(module, "float64")]


@pytest.mark.parametrize("options", [
    {"cell": "GRU", "optimizer": "adam", "valid": 0.1, "dtype": "float32"},
    {"cell": "StandardLSTM", "hidden": [8, 8], "dropout": 0.5, "dtype": "float64"},
    {"seq_len": 1, "batch": 1}])  # the fewest symbols: the child's text must hold a window
def test_the_child_runs_the_runs_network_threads_and_held_out_text(monkeypatch, options):
    config = TrainConfig(**{"hidden": [8], "seq_len": 8, "batch": 2, **options})
    run = TextTrainer.new(TEXT, config, resolve_backend("numpy"))
    seen: dict = {}
    real_trainer = rehearse.TextTrainer

    def trainer(net, vocab, cfg, optimizer, ids):
        seen["trainer"] = real_trainer(net, vocab, cfg, optimizer, ids)
        return seen["trainer"]

    @contextlib.contextmanager
    def threads(n, overlap=False):
        seen["threads"] = (n, overlap)
        yield

    monkeypatch.setattr(rehearse, "TextTrainer", trainer)
    monkeypatch.setattr(rehearse, "limited_threads", threads)
    monkeypatch.setattr(rehearse, "warm_up", lambda *where: seen.setdefault("warm_up", where))
    monkeypatch.setattr(compile_ahead, "mark", lambda *where: None)
    assert rehearse.main(rehearse.command(run, 3, True)[3:]) == 0
    child = seen["trainer"]
    assert seen["warm_up"] == (config.cell, config.dtype) and seen["threads"] == (3, True)
    assert [type(layer).__name__ for layer in child.net.layers] == [
        type(layer).__name__ for layer in run.net.layers]
    assert {str(p.dtype) for group in child.net.params for p in group.values()} == {
        config.dtype}
    assert [getattr(layer, "rate", None) for layer in child.net.layers] == [
        getattr(layer, "rate", None) for layer in run.net.layers]
    assert (child.held_ids is None) == (run.held_ids is None)
