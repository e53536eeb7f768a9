"""``prepare_distributed`` and ``_runner`` (text/distributed.py) as rank r of 2 or 3, in this
process, through a fake communicator: what each rank does (its stdout, the lock, the shared
seed, the GPU, its windows and streams), says (the error rank 0 raises, the note) and leaves to
rank 0 (writing, sampling, the time limit). The real ``mpiexec`` runs (tests/test_distributed.py)
are child processes, which mutation testing cannot see."""

from __future__ import annotations

import contextlib
import os
import secrets
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import dualtape
from dualtape import cli, distributed
from dualtape.backend import to_numpy
from dualtape.text import distributed as text_distributed
from dualtape.text.console import StopRequest
from dualtape.text.loop import RunLimits, RunResult
from dualtape.text.model import TextError
from dualtape.text.prepare import prepare
from dualtape.text.trainer import DivergedError

from .test_distributed import FakeComm
from .test_text import TEXT

ROOTS = 0.5
"""The value of every parameter rank 0 broadcasts to the others."""
RUN = ["--hidden", "8", "--seq-len", "8", "--batch", "2", "--seed", "5", "--sample-chars", "0"]


class Ranks(FakeComm):
    """``FakeComm`` as rank ``rank`` of ``size``, with rank 0's broadcasts (its seed is
    ``seed``, its parameters all ``ROOTS``) and ``Abort``, recording both."""

    def __init__(self, rank: int, size: int, seed: int = 12345, gathered=None):
        super().__init__(size=size, rank=rank, gathered=gathered)
        self.seed, self.sent, self.aborted = seed, [], None
        self.wire: list[tuple[int, str]] = []  # each reduced buffer's size and dtype

    def bcast(self, value, root):
        self.sent.append((value, root))
        return self.seed

    def Bcast(self, buffer, root):
        self.sent.append(("parameters", root))
        if self.rank != root:
            buffer[...] = ROOTS

    def Allreduce(self, sendbuf, recvbuf, op) -> None:
        self.wire.append((recvbuf.size, recvbuf.dtype.name))
        super().Allreduce(sendbuf, recvbuf, op)

    def Abort(self, code: int) -> None:
        self.aborted = code


@pytest.fixture
def world(monkeypatch):
    """``world(rank, size, ...)``: that rank's communicator as mpi4py's COMM_WORLD; stdout
    restored afterwards (the files the module opens closed) and ``mpiexec``'s pipe taking
    recorded (``world.piped``)."""
    monkeypatch.setattr(sys, "stdout", sys.stdout)
    opened = []
    monkeypatch.setattr(text_distributed, "open", lambda *given: opened.append(open(*given))
                        or opened[-1], raising=False)
    piped: list[bool] = []
    monkeypatch.setattr(text_distributed, "write_into_mpiexecs_pipe", lambda: piped.append(True))

    def at(rank: int, size: int, **kwargs) -> Ranks:
        comm = Ranks(rank, size, **kwargs)
        monkeypatch.setattr(distributed, "mpi_module", lambda: SimpleNamespace(
            IN_PLACE="in place", SUM="sum", MAX="max", COMM_WORLD=comm))
        return comm

    at.piped = piped
    yield at
    for file in opened:
        file.close()


@pytest.fixture
def corpus(tmp_path) -> Path:
    path = tmp_path / "corpus.txt"
    path.write_text(TEXT, encoding="utf-8")
    return path


def parsed(corpus: Path, *options: str):
    return cli.build_parser().parse_args(["train-text", str(corpus), *RUN, *options])


def on_rank(args) -> tuple:
    """``prepare_distributed(args)``: what it prepared, and its runner."""
    return text_distributed.prepare_distributed(args, contextlib.ExitStack())


def refusal(args) -> str:
    with pytest.raises(TextError) as refused:
        on_rank(args)
    return str(refused.value)


def quiet_exit(args) -> int:
    with pytest.raises(SystemExit) as ended:
        on_rank(args)
    return ended.value.code


def states(rngs) -> list:
    return [rng.bit_generator.state for rng in rngs]


@pytest.mark.parametrize("rank, size", [(0, 2), (1, 2), (2, 3)])
def test_each_rank_takes_rank_0s_model_and_draws_its_own_windows_and_masks(
        world, corpus, backend, rank, size):
    options = ["--backend", backend.name, "--hidden", "8,8,8", "--dropout", "0.2"]
    alone = prepare(parsed(corpus, *options)).trainer  # what a single process draws
    comm = world(rank, size)
    prepared, run = on_rank(parsed(corpus, *options))
    trainer = prepared.trainer
    for group, own in zip(trainer.net.params, alone.net.params, strict=True):
        for name, value in group.items():
            assert type(value) is type(own[name])  # still on the backend asked
            want = np.full(value.shape, ROOTS) if rank else to_numpy(own[name])
            np.testing.assert_array_equal(to_numpy(value), want)
    assert isinstance(trainer.optimizer, distributed.DataParallel)
    assert trainer.optimizer.comm is comm
    assert type(trainer.optimizer.optimizer) is type(alone.optimizer)

    def jumped(rngs):
        return [rng.bit_generator.jumped(rank).state if rank else rng.bit_generator.state
                for rng in rngs]

    assert states([trainer.window_rng]) == jumped([alone.window_rng])
    assert len(trainer.dropout_rngs) == 2
    assert states(trainer.dropout_rngs) == jumped(alone.dropout_rngs)
    assert prepared.note == f"distributed: {size} ranks x batch 2 = global batch {2 * size}"
    assert comm.sent == [("parameters", 0)]  # the seed was given: not broadcast
    assert callable(run)


@pytest.mark.parametrize("rank", [0, 1, 2])
def test_rank_0_alone_writes_on_stdout_through_mpiexecs_pipe_and_locks(
        world, corpus, tmp_path, monkeypatch, rank):
    locks = []
    monkeypatch.setattr(text_distributed, "hold_run_lock", lambda *given: locks.append(given))
    world(rank, 3)
    before = sys.stdout
    save = str(tmp_path / "m.npz")
    held = contextlib.ExitStack()
    text_distributed.prepare_distributed(parsed(corpus, "--save", save), held)
    if rank == 0:
        assert (sys.stdout, world.piped, locks) == (before, [True], [(save, None, held)])
    else:
        assert (sys.stdout.name, sys.stdout.mode, world.piped, locks) == (os.devnull, "w", [],
                                                                           [])


def test_a_resume_without_save_locks_the_resumed_checkpoint(world, corpus, monkeypatch):
    locks = []
    monkeypatch.setattr(text_distributed, "hold_run_lock", lambda *given: locks.append(given))
    monkeypatch.setattr(text_distributed, "prepare", lambda args: prepare(parsed(corpus)))
    world(0, 2)
    args = parsed(corpus)
    args.resume = "m.npz"
    held = contextlib.ExitStack()
    text_distributed.prepare_distributed(args, held)
    assert locks == [(None, "m.npz", held)]


@pytest.mark.parametrize("rank", [0, 1])
def test_a_new_run_without_a_seed_takes_rank_0s_random_one(world, corpus, monkeypatch, rank):
    drawn = []
    monkeypatch.setattr(secrets, "randbelow", lambda n: drawn.append(n) or 77)
    comm = world(rank, 2, seed=31337)
    args = parsed(corpus)
    args.seed = None
    on_rank(args)
    assert args.seed == 31337
    assert comm.sent[0] == ((77, 0) if rank == 0 else (None, 0))
    assert drawn == ([2**31] if rank == 0 else [])


def test_a_given_seed_or_a_resumed_run_keeps_its_own(world, corpus, monkeypatch):
    monkeypatch.setattr(text_distributed, "prepare", lambda args: prepare(parsed(corpus)))
    for seed, resume in ((5, None), (None, "m.npz"), (5, "m.npz")):
        comm = world(1, 2)
        args = parsed(corpus)
        args.seed, args.resume = seed, resume
        on_rank(args)
        assert args.seed == seed and comm.sent == [("parameters", 0)]


@pytest.mark.parametrize("backend_option, gpu, chosen", [
    ("auto", True, True), ("auto", False, False), ("numpy", True, False),
])
def test_the_gpu_is_chosen_by_local_rank_only_for_a_backend_that_may_be_cupy(
        world, corpus, monkeypatch, backend_option, gpu, chosen):
    picked = []
    monkeypatch.setattr(text_distributed, "_has_gpu", lambda: gpu)
    monkeypatch.setattr(distributed, "select_gpu", picked.append)
    comm = world(1, 2)
    on_rank(parsed(corpus, "--backend", backend_option))
    assert picked == ([comm] if chosen else [])


def test_cupy_asked_picks_the_gpu_before_preparing(world, corpus, monkeypatch):
    picked = []
    monkeypatch.setattr(text_distributed, "_has_gpu", lambda: True)
    monkeypatch.setattr(distributed, "select_gpu", picked.append)
    monkeypatch.setattr(text_distributed, "prepare", lambda args: picked.append("prepare") or (
        prepare(parsed(corpus))))
    comm = world(0, 2)
    on_rank(parsed(corpus, "--backend", "cupy"))
    assert picked == [comm, "prepare"]


def test_a_gpu_is_there_when_cupy_can_run(monkeypatch):
    for found, gpu in ((["numpy", "cupy"], True), (["numpy", "torch"], False)):
        monkeypatch.setattr(dualtape.backend, "available_backends", lambda found=found: found)
        assert text_distributed._has_gpu() is gpu


@pytest.mark.parametrize("failure, message", [
    (TextError("the corpus is empty"), "the corpus is empty"),
    (MemoryError("cannot allocate"), "MemoryError: cannot allocate"),
])
def test_a_rank_that_fails_to_prepare_stops_every_rank(world, corpus, monkeypatch, failure,
                                                       message):
    def failing(args):
        raise failure

    monkeypatch.setattr(text_distributed, "prepare", failing)
    world(0, 2)
    assert refusal(parsed(corpus)) == message
    world(1, 2)
    assert quiet_exit(parsed(corpus)) == 1


def test_a_lock_held_elsewhere_is_rank_0s_refusal(world, corpus, monkeypatch):
    def locked(*given):
        raise TextError("m.npz is locked by process 7")

    monkeypatch.setattr(text_distributed, "hold_run_lock", locked)
    world(0, 3)
    assert refusal(parsed(corpus)) == "m.npz is locked by process 7"


def test_rank_0_names_the_first_rank_that_failed(world, corpus):
    errors = [None, None, "out of memory"]
    world(0, 3, gathered=lambda value: errors if value is None else [value] * 3)
    assert refusal(parsed(corpus)) == "rank 2: out of memory"


@pytest.mark.parametrize("rank", [0, 1])
def test_rank_0_names_a_rank_whose_settings_differ_from_its_own(world, corpus, rank):
    def gathered(value):
        if isinstance(value, dict):  # rank 1 runs --batch 3
            return [value, {**value, "--batch": 3}, value]
        return [value] * 3

    world(rank, 3, gathered=gathered)
    if rank:
        assert quiet_exit(parsed(corpus)) == 1
    else:
        assert refusal(parsed(corpus)) == (
            "rank 1: its --batch is 3 but rank 0's is 2; every rank must run the same command")


def test_the_note_follows_prepares_own(world, corpus, monkeypatch):
    real = prepare(parsed(corpus))._replace(note="resumed from m.npz at step 4")
    monkeypatch.setattr(text_distributed, "prepare", lambda args: real)
    world(0, 3)
    assert on_rank(parsed(corpus))[0].note == (
        "resumed from m.npz at step 4; distributed: 3 ranks x batch 2 = global batch 6")


@pytest.mark.parametrize("rank", [0, 1, 2])
def test_stateful_ranks_read_their_streams_of_all_ranks(world, corpus, rank):
    world(rank, 3)
    trainer = on_rank(parsed(corpus, "--cell", "lstm", "--stateful"))[0].trainer
    assert (trainer.stream_first, trainer.stream_count) == (2 * rank, 6)


def test_streams_too_many_for_the_text_at_all_ranks_are_refused(world, corpus):
    options = ["--cell", "lstm", "--stateful", "--batch", "20"]
    prepare(parsed(corpus, *options))  # one process fits
    world(0, 3)
    assert refusal(parsed(corpus, *options)).startswith(
        "--stateful reads 60 streams of at least 9 symbols each")
    world(1, 3)
    assert quiet_exit(parsed(corpus, *options)) == 1


# ``_runner``: the loop itself is recorded, its stop function called by hand.

class Recorder:
    """``run_training``'s stand-in: keeps what it is given, then raises ``failure`` or ends
    with a reason of "steps" at 10 characters per second."""

    def __init__(self, failure: BaseException | None = None):
        self.failure, self.given = failure, None

    def __call__(self, trainer, limits, reporter, stop):
        self.given = SimpleNamespace(limits=limits, reporter=reporter, stop=stop)
        if self.failure is not None:
            raise self.failure
        return RunResult("steps", 4, 2.0, 1.0, 10.0)


def running(monkeypatch, world, rank, size, limits=None, failure=None, stop=None,
            others=lambda buffer: np.zeros_like(buffer)):
    """Run ``_runner`` as rank ``rank`` of ``size`` with the loop recorded: its result (or
    None when it raised), the recorder, the communicator and the stop request."""
    recorder = Recorder(failure)
    monkeypatch.setattr(text_distributed, "run_training", recorder)
    comm = world(rank, size)
    comm.others = others
    stop = stop or StopRequest()
    limits = limits or RunLimits(steps=4, sample_chars=7, save="m.npz", writes=True)
    result = text_distributed._runner(comm)("trainer", limits, "reporter", stop)
    return result, recorder, comm, stop


@pytest.mark.parametrize("rank, size", [(0, 2), (1, 2), (2, 3)])
def test_only_rank_0_samples_and_writes_and_the_speed_counts_every_rank(
        monkeypatch, world, rank, size):
    limits = RunLimits(steps=4, time_limit=60, sample_chars=7, save="m.npz", writes=True)
    result, recorder, comm, _ = running(monkeypatch, world, rank, size, limits)
    own = recorder.given.limits
    assert (own.steps, own.save, own.time_limit) == (4, "m.npz", None)
    assert (own.writes, own.sample_chars) == ((True, 7) if rank == 0 else (False, 0))
    reporter = recorder.given.reporter
    assert (type(reporter), reporter.reporter, reporter.size) == (
        text_distributed.GlobalSpeed, "reporter", size)
    assert (result.reason, result.steps, result.chars_per_second) == ("steps", 4, 10.0 * size)
    assert recorder.given.stop() is False
    assert comm.wire == [(1, "int64")]


@pytest.mark.parametrize("rank, seconds, stops", [
    (0, 2.5, False), (0, 3.0, True), (0, 4.0, True), (1, 4.0, False), (2, 4.0, False),
])
def test_rank_0s_seconds_of_training_decide_the_time_limit(monkeypatch, world, rank, seconds,
                                                           stops):
    clock = SimpleNamespace(training=lambda: seconds)
    limits = RunLimits(steps=4, time_limit=3, sample_chars=0, clock=clock)
    _, recorder, _, stop = running(monkeypatch, world, rank, 3, limits)
    assert recorder.given.stop() is stops
    assert stop.status is None


def test_a_time_limit_reached_ends_with_reason_time_and_no_stop_request(monkeypatch, world):
    clock = SimpleNamespace(training=lambda: 9.0)
    limits = RunLimits(steps=4, time_limit=3, sample_chars=0, clock=clock)
    recorder = Recorder()

    def run_training(trainer, limits, reporter, stop):
        recorder(trainer, limits, reporter, stop)
        assert stop() is True
        return RunResult("steps", 2, 2.0, 1.0, 10.0)

    monkeypatch.setattr(text_distributed, "run_training", run_training)
    comm = world(0, 2)
    stop = StopRequest()
    result = text_distributed._runner(comm)("trainer", limits, "reporter", stop)
    assert (result.reason, stop.status) == ("time", None)


def test_no_time_limit_never_stops(monkeypatch, world):
    clock = SimpleNamespace(training=lambda: 1e9)
    limits = RunLimits(steps=4, sample_chars=0, clock=clock)
    _, recorder, _, _ = running(monkeypatch, world, 0, 2, limits)
    assert recorder.given.stop() is False


@pytest.mark.parametrize("own, theirs, code", [(143, 0, 143), (None, 143, 143),
                                               (129, 143, 143), (None, 1, 1)])
def test_the_highest_stop_code_of_any_rank_is_agreed_and_exited_with(monkeypatch, world, own,
                                                                     theirs, code):
    stop = StopRequest()
    if own is not None:
        stop.ask(own, "SIGTERM")

    def run_training(trainer, limits, reporter, stop_requested):
        assert stop_requested() is True
        return RunResult("steps", 2, 2.0, 1.0, 10.0)

    monkeypatch.setattr(text_distributed, "run_training", run_training)
    comm = world(2, 3)
    comm.others = lambda buffer: np.array([theirs])
    result = text_distributed._runner(comm)("trainer", RunLimits(sample_chars=0), "r", stop)
    assert result.reason == ("time" if code == 1 else "interrupted")
    if own is not None:
        assert (stop.status, stop.cause) == (own, "SIGTERM")  # its own request is kept
    elif code == 1:
        assert stop.status is None
    else:
        assert (stop.status, stop.cause) == (code, "another rank asked to stop")


@pytest.mark.parametrize("rank", [0, 1, 2])
def test_a_divergence_stops_rank_0_with_the_error_and_the_others_quietly(monkeypatch, world,
                                                                         rank):
    failure = DivergedError("the loss is NaN at step 3")
    if rank == 0:
        with pytest.raises(DivergedError, match="the loss is NaN at step 3"):
            running(monkeypatch, world, rank, 3, failure=failure)
    else:
        with pytest.raises(SystemExit) as ended:
            running(monkeypatch, world, rank, 3, failure=failure)
        assert ended.value.code == 1 and ended.value.__suppress_context__
    assert text_distributed.distributed.mpi_module().COMM_WORLD.aborted is None


@pytest.mark.parametrize("failure, asked, code", [
    (RuntimeError("the sample failed"), None, 1),
    (KeyboardInterrupt("again"), None, 130),
    (KeyboardInterrupt("again"), 143, 143),
    (MemoryError("out"), 143, 1),
])
def test_an_error_on_one_rank_aborts_every_rank_and_says_so(monkeypatch, world, capsys,
                                                            failure, asked, code):
    stop = StopRequest()
    if asked is not None:
        stop.ask(asked, "SIGTERM")
    with pytest.raises(type(failure)):
        running(monkeypatch, world, 2, 3, failure=failure, stop=stop)
    assert distributed.mpi_module().COMM_WORLD.aborted == code
    assert capsys.readouterr().err == (
        f"dualtape train-text: error on rank 2: {type(failure).__name__}: {failure}; "
        "stopping every rank\n")
