"""text/distributed.py's small parts in this process: which rank raises what when a rank fails,
how a difference between ranks is worded, the global speed's held-out loss, the communicator's
refusals and the settings the ranks compare."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from dualtape import cli, distributed
from dualtape.text.distributed import (
    GlobalSpeed,
    _communicator,
    _difference,
    _raise_on_rank_0,
    shared_settings,
)
from dualtape.text.model import TextError
from dualtape.text.prepare import prepare

from .test_text import SMALL, TEXT


def rank(r: int) -> SimpleNamespace:
    """A communicator stand-in that says it is rank ``r``."""
    return SimpleNamespace(Get_rank=lambda: r)


@pytest.mark.parametrize("errors, message", [
    (["its own", "another"], "its own"),
    ([None, "another", "a third"], "rank 1: another"),
    ([None, None, "a third"], "rank 2: a third"),
])
def test_rank_0_raises_the_first_error_naming_the_rank_it_came_from(errors, message):
    with pytest.raises(TextError) as raised:
        _raise_on_rank_0(rank(0), errors)
    assert str(raised.value) == message


@pytest.mark.parametrize("r", [1, 2])
def test_the_other_ranks_exit_quietly_with_status_1(r):
    with pytest.raises(SystemExit) as ended:
        _raise_on_rank_0(rank(r), [None, "another", None])
    assert ended.value.code == 1


@pytest.mark.parametrize("r", [0, 1])
def test_no_error_on_any_rank_goes_on(r):
    assert _raise_on_rank_0(rank(r), [None, None]) is None


def test_a_difference_names_what_differs_with_both_values():
    assert _difference({"--batch": 2, "step": 0}, {"--batch": 2, "step": 0}) is None
    assert _difference({"--batch": 3}, {"--batch": 2, "step": 0}) == (
        "its --batch is 3 but rank 0's is 2; every rank must run the same command")
    assert _difference({"--batch": 2}, {"--batch": 2, "step": 0}) == (
        "its step is None but rank 0's is 0; every rank must run the same command")


def test_the_global_speed_counts_every_rank_and_passes_the_held_out_loss():
    readings = []
    reporter = SimpleNamespace(progress=lambda *reading: readings.append(reading))
    GlobalSpeed(reporter, 3).progress(7, 1.5, 100.0, 1.25)
    GlobalSpeed(reporter, 3).progress(8, 1.5, 100.0)
    assert readings == [(7, 1.5, 300.0, 1.25), (8, 1.5, 300.0, None)]


def test_the_communicator_needs_mpi4py_and_the_launchers_mpi(monkeypatch):
    monkeypatch.setattr(distributed, "mpi_module", lambda: None)
    with pytest.raises(TextError) as refused:
        _communicator()
    assert str(refused.value) == "--distributed needs mpi4py: pip install 'dualtape[mpi]'"
    world = SimpleNamespace(Get_size=lambda: 1)
    monkeypatch.setattr(distributed, "mpi_module", lambda: SimpleNamespace(COMM_WORLD=world))
    monkeypatch.setenv("PMI_SIZE", "2")
    with pytest.raises(TextError) as refused:
        _communicator()
    assert str(refused.value) == (
        "mpiexec started 2 processes but mpi4py sees 1: mpi4py uses another MPI than this "
        "mpiexec; run the mpiexec of the MPI it was built with")
    monkeypatch.setenv("PMI_SIZE", "1")
    assert _communicator() is world


def test_the_settings_shared_name_the_backend_vocabulary_step_and_model(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(TEXT)
    args = cli.build_parser().parse_args(["train-text", str(corpus), *SMALL, "--backend", "auto"])
    prepared = prepare(args)
    trainer = prepared.trainer
    shared = shared_settings(args, trainer, prepared.text)
    # the backend as resolved: "auto" may be CuPy on one host and numpy on another
    assert (shared["--backend"], shared["step"]) == (trainer.backend.name, 0) != ("auto", 0)
    assert shared["vocabulary"] == "".join(trainer.vocab.symbols)
    before = shared["model digest (weights, optimizer state, generators)"]
    trainer.net.params[0][next(iter(trainer.net.params[0]))][...] += 1
    after = shared_settings(args, trainer, prepared.text)
    assert after["model digest (weights, optimizer state, generators)"] != before
    trainer.optimizer.steps += 1  # the same state's names, another value
    later = shared_settings(args, trainer, prepared.text)
    assert later["model digest (weights, optimizer state, generators)"] != after[
        "model digest (weights, optimizer state, generators)"]
