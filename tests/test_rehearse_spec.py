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


def rehearsed(monkeypatch, config: TrainConfig) -> tuple[int, TextTrainer]:
    """``main`` on ``command``'s spec of a run of ``config``: its status and the child's
    trainer after the rehearsal."""
    run = TextTrainer.new(TEXT, config, resolve_backend("numpy"))
    real_trainer, seen = rehearse.TextTrainer, []
    monkeypatch.setattr(rehearse, "TextTrainer", lambda *given: seen.append(
        real_trainer(*given)) or seen[-1])
    monkeypatch.setattr(compile_ahead, "mark", lambda *where: None)
    return rehearse.main(rehearse.command(run, None, False)[3:]), seen[-1]


def test_the_rehearsal_is_the_same_every_time(monkeypatch):
    """The same run rehearses the same symbols and weights, so a failure it reports can be
    run again."""
    config = TrainConfig(hidden=[8], seq_len=8, batch=2)
    first, second = (rehearsed(monkeypatch, config)[1] for _ in range(2))
    assert first.ids.tolist() == second.ids.tolist()
    assert first.held_ids is None and second.held_ids is None
    for mine, theirs in zip(first.net.params, second.net.params, strict=True):
        for name in mine:
            assert mine[name].tolist() == theirs[name].tolist()


def test_a_run_whose_rate_diverges_still_rehearses(monkeypatch, capsys):
    """The rehearsal compiles; it steps at its own tiny rate, never the run's (1e30 makes the
    run's own second step NaN)."""
    config = TrainConfig(hidden=[8], seq_len=8, batch=2, rate=1e30, clip=0.0)
    status, child = rehearsed(monkeypatch, config)
    assert (status, capsys.readouterr().err) == (0, "")
    assert child.optimizer.rate <= 1e-6


def test_a_run_holding_out_a_small_fraction_still_rehearses(monkeypatch, capsys):
    """The child's held-out text is its own (``spec["held"]``), never split from its short
    training text: 1% of 80 symbols would hold out fewer than a loss needs."""
    config = TrainConfig(hidden=[8], seq_len=8, batch=2, valid=0.01)
    status, child = rehearsed(monkeypatch, config)
    assert (status, capsys.readouterr().err) == (0, "")
    assert child.held_ids is not None
