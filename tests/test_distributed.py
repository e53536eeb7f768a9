"""dualtape.distributed: single-process behaviour on every backend, and real MPI runs.

The MPI tests start ``mpiexec -n 2`` (marker ``mpi``; skipped with the reason when mpiexec or
mpi4py is missing) with a timeout each, so a hang fails the test instead of blocking the suite.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import dualtape
from dualtape import distributed
from dualtape.text.prepare import DEFAULT_VALID, prepare
from dualtape.text.record import read_log

from . import mpi_worker
from .helpers import HOLD_LOCK, assert_params_equal, host_params

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT = 60  # seconds per MPI run; the runs take about 1 s each


class FakeComm:
    """A communicator of ``size`` ranks in one process: the other ranks send ``others``
    (a function of the buffer this rank sends) and gather ``gathered`` (a function of the
    value this rank gathers: the list every rank receives)."""

    def __init__(self, others=lambda buffer: buffer, size: int = 2, gathered=None, rank: int = 0):
        self.others, self.size, self.rank = others, size, rank
        self.gathered = gathered or (lambda value: [value] * size)
        self.reduced: list[int] = []  # the length of every buffer reduced
        self.gathers = 0

    def Get_size(self) -> int:
        return self.size

    def Get_rank(self) -> int:
        return self.rank

    def Allreduce(self, sendbuf, recvbuf, op) -> None:
        assert sendbuf == "in place" and op in ("sum", "max")
        self.reduced.append(recvbuf.size)
        if op == "max":
            np.maximum(recvbuf, self.others(recvbuf.copy()), out=recvbuf)
        else:
            recvbuf += (self.size - 1) * self.others(recvbuf.copy())

    def allgather(self, value):
        self.gathers += 1
        return self.gathered(value)


@pytest.fixture
def fake_mpi(monkeypatch):
    """mpi4py's constants, without mpi4py."""
    monkeypatch.setattr(distributed, "mpi_module", lambda: SimpleNamespace(
        IN_PLACE="in place", SUM="sum", MAX="max", COMM_WORLD=None))


def xor_problem(dtype: str = "float64"):
    x = np.array([[0, 0], [0, 1], [1, 0], [1, 1]], dtype=dtype)
    t = np.array([[0], [1], [1], [0]], dtype=dtype)
    net = dualtape.Network([dualtape.FullyConnected(2, 3, seed=1, dtype=dtype), dualtape.Tanh(),
                            dualtape.FullyConnected(3, 1, seed=2, dtype=dtype), dualtape.Logit()])
    return net, dualtape.asarray(x), dualtape.asarray(t)


def test_importing_dualtape_never_imports_mpi4py():
    code = "import sys, dualtape, dualtape.distributed; print('mpi4py' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_without_mpi4py_everything_is_one_process(backend, monkeypatch):
    monkeypatch.setattr(distributed, "mpi_module", lambda: None)
    assert (distributed.rank(), distributed.world_size(), distributed.local_rank()) == (0, 1, 0)
    net, x, t = xor_problem()
    alone, _, _ = xor_problem()
    distributed.broadcast_parameters(net)
    wrapped = distributed.DataParallel(dualtape.SGD(0.5, momentum=0.9))
    plain = dualtape.SGD(0.5, momentum=0.9)
    for _ in range(3):
        assert dualtape.train(net, x, t, wrapped) == dualtape.train(alone, x, t, plain)
    assert_params_equal(host_params(net), host_params(alone))
    assert wrapped.state_dict().keys() == plain.state_dict().keys()


def test_with_one_mpi_rank_everything_is_one_process(backend):
    pytest.importorskip("mpi4py", reason="mpi4py is not installed (pip install 'dualtape[mpi]')")
    assert (distributed.rank(), distributed.world_size()) == (0, 1)
    net, x, t = xor_problem()
    alone, _, _ = xor_problem()
    wrapped, plain = distributed.DataParallel(dualtape.Adam(0.01)), dualtape.Adam(0.01)
    for _ in range(3):
        assert dualtape.train(net, x, t, wrapped) == dualtape.train(alone, x, t, plain)
    assert_params_equal(host_params(net), host_params(alone))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_gradients_travel_in_one_buffer_and_come_back_in_place(backend, fake_mpi, dtype):
    # Two ranks with equal gradients average to the same gradient: the packing round trip
    # on this backend must give the plain optimizer's result, to rounding.
    comm = FakeComm()
    net, x, t = xor_problem(dtype)
    alone, _, _ = xor_problem(dtype)
    wrapped = distributed.DataParallel(dualtape.SGD(0.5, 0.9, 0.01), comm)
    plain = dualtape.SGD(0.5, 0.9, 0.01)
    for _ in range(3):
        np.testing.assert_allclose(dualtape.train(net, x, t, wrapped),
                                   dualtape.train(alone, x, t, plain), rtol=1e-6)
    count = sum(int(np.prod(p.shape)) for group in net.params for p in group.values())
    assert comm.reduced == [2, count] * 3  # per call: [loss, input finite], then all gradients
    for got, want in zip(host_params(net), host_params(alone), strict=True):
        for key in want:
            np.testing.assert_allclose(got[key], want[key], rtol=1e-5 if dtype == "float32"
                                       else 1e-12)
    assert dualtape.backend.backend_of(net.params[0]["W"]) == backend


def test_gradients_are_averaged_over_the_ranks(fake_mpi):
    # The other rank sends zero gradients: the update is that of half the gradient.
    comm = FakeComm(others=lambda buffer: np.zeros_like(buffer) if buffer.size > 2 else buffer)
    net, x, t = xor_problem()
    tapes, y = net.forward(x)
    grads, _ = net.backward(tapes, (y - t) / 4)
    halves = [{k: g / 2 for k, g in group.items()} for group in grads]
    expected = [dict(group) for group in net.params]
    dualtape.SGD(0.5).step(expected, halves)
    dualtape.train(net, x, t, distributed.DataParallel(dualtape.SGD(0.5), comm))
    for got, want in zip(net.params, expected, strict=True):
        for key in want:
            np.testing.assert_allclose(got[key], want[key], rtol=1e-12)


def test_a_nan_on_another_rank_stops_this_one_before_any_update(backend, fake_mpi):
    comm = FakeComm(others=lambda buffer: np.array([buffer[0], 0.0]))  # its input holds NaN
    net, x, t = xor_problem()
    before = host_params(net)
    with pytest.raises(FloatingPointError, match="another process's input holds NaN"):
        dualtape.train(net, x, t, distributed.DataParallel(dualtape.SGD(0.5), comm))
    assert_params_equal(host_params(net), before)
    assert comm.reduced == [2]  # no gradient was sent


def test_bad_arguments_are_refused_with_one_line(fake_mpi):
    net, _, _ = xor_problem()
    for root in (2, -1, 0.0, True, None):
        with pytest.raises(ValueError, match=r"root must be a rank in \[0, 2\)"):
            distributed.broadcast_parameters(net, root=root, comm=FakeComm())
    with pytest.raises(ValueError, match=r"root must be a rank in \[0, 1\), got 1"):
        distributed.broadcast_parameters(net, root=1, comm=FakeComm(size=1))
    wrapped = distributed.DataParallel(dualtape.SGD(0.1))
    for optimizer, what in ((None, "not None"), (wrapped, "not another DataParallel")):
        with pytest.raises(TypeError, match=f"wraps an optimizer such as SGD or Adam, {what}"):
            distributed.DataParallel(optimizer)


def test_ranks_with_different_networks_are_refused(fake_mpi):
    net, x, t = xor_problem()
    layouts = [[(0, "W", (3, 2), "float64")], [(0, "W", (4, 2), "float64")]]
    comm = FakeComm(gathered=lambda value: layouts if isinstance(value, list) else [value] * 2)
    with pytest.raises(ValueError, match="rank 1 has arrays .* every rank must build the same"):
        dualtape.train(net, x, t, distributed.DataParallel(dualtape.SGD(0.5), comm))
    with pytest.raises(ValueError, match="rank 1 has arrays"):
        distributed.broadcast_parameters(net, comm=comm)


def as_rank_1(theirs):
    """What ``allgather`` returns when rank 1 holds ``theirs`` for an optimizer's settings
    (every other gather agrees)."""
    def gathered(value):
        return [value, theirs] if isinstance(value, dict) else [value, value]
    return gathered


@pytest.mark.parametrize("theirs, how", [
    (dualtape.SGD(0.2, momentum=0.9), "rank 1 wraps SGD with base_rate=0.2, rate=0.2 where rank 0 "
     "has base_rate=0.5, rate=0.5"),
    (dualtape.SGD(0.5), "rank 1 wraps SGD with momentum=0.0 where rank 0 has momentum=0.9"),
    (dualtape.Adam(0.5), "rank 1 wraps Adam but rank 0 wraps SGD"),
    ("steps", "rank 1 wraps SGD with steps=3 where rank 0 has steps=0"),
], ids=["rate", "momentum", "kind", "steps"])
def test_ranks_wrapping_different_optimizers_are_refused_at_the_first_step(fake_mpi, theirs, how):
    if theirs == "steps":  # a rank that loaded another state
        theirs = dualtape.SGD(0.5, momentum=0.9)
        theirs.steps = 3
    comm = FakeComm(gathered=as_rank_1(distributed.optimizer_settings(theirs)))
    net, x, t = xor_problem()
    before = host_params(net)
    with pytest.raises(ValueError, match=re.escape(f"DataParallel: {how}; every rank must wrap "
                                                   "the same optimizer with the same settings")):
        dualtape.train(net, x, t, distributed.DataParallel(dualtape.SGD(0.5, momentum=0.9),
                                                           comm))
    assert_params_equal(host_params(net), before)


def test_the_optimizers_are_compared_once(fake_mpi):
    comm = FakeComm()
    net, x, t = xor_problem()
    wrapped = distributed.DataParallel(dualtape.Adam(0.01), comm)
    for _ in range(3):
        dualtape.train(net, x, t, wrapped)
    assert comm.gathers == 2  # the layout and the optimizer, at the first step


def test_optimizer_settings_are_the_kind_and_its_public_numbers():
    assert distributed.optimizer_settings(dualtape.SGD(0.1, 0.9, 0.01)) == {
        "kind": "SGD", "momentum": 0.9, "rate": 0.1, "base_rate": 0.1, "regulariser": 0.01,
        "steps": 0}
    assert set(distributed.optimizer_settings(dualtape.Adam(0.01))) == {
        "kind", "rate", "base_rate", "beta1", "beta2", "eps", "steps"}


def mpiexec() -> str:
    """The mpiexec next to this Python (the mpich wheel's) or on PATH; skips without one."""
    pytest.importorskip("mpi4py", reason="mpi4py is not installed (pip install 'dualtape[mpi]')")
    beside = Path(sys.executable).with_name("mpiexec")
    found = str(beside) if beside.exists() else shutil.which("mpiexec")
    if found is None:
        pytest.skip("no mpiexec here (pip install 'dualtape[mpi]' brings MPICH's)")
    return found


def run_ranks(args: list[str], ranks: int = 2, **kwargs) -> subprocess.CompletedProcess:
    """``mpiexec -n ranks python args`` from the repository root, within ``TIMEOUT``."""
    return subprocess.run([mpiexec(), "-n", str(ranks), sys.executable, *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=TIMEOUT, **kwargs)


def run_worker(case: str, out: Path, *options: str) -> list[dict[str, np.ndarray]]:
    done = run_ranks(["-m", "tests.mpi_worker", case, str(out), *options])
    assert done.returncode == 0, done.stderr
    return [dict(np.load(out / f"rank{r}.npz")) for r in range(2)]


def params_of(result: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {k: v for k, v in result.items() if "/" in k}


@pytest.mark.mpi
@pytest.mark.parametrize("kind", ["feedforward", "recurrent"])
@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_two_ranks_equal_one_process_on_both_batches(tmp_path, kind, optimizer):
    ranks = run_worker("equivalence", tmp_path, kind, optimizer)
    net = mpi_worker.make_net(kind, seed=1)
    together = slice(0, 2 * mpi_worker.PER_RANK)
    losses = mpi_worker.train_steps(net, mpi_worker.make_optimizer(optimizer), kind, together)
    expected = mpi_worker.flat_params(net)
    for result in ranks:
        assert int(result["size"]) == 2
        np.testing.assert_allclose(result["losses"], losses, rtol=1e-13)
        assert params_of(result).keys() == expected.keys()
        for key, value in expected.items():
            np.testing.assert_allclose(result[key], value, rtol=1e-12, atol=1e-15)
    for key in expected:  # and the ranks agree exactly
        np.testing.assert_array_equal(ranks[0][key], ranks[1][key])


@pytest.mark.mpi
def test_broadcast_gives_every_rank_the_roots_parameters(tmp_path):
    ranks = run_worker("broadcast", tmp_path)
    root = mpi_worker.flat_params(mpi_worker.make_net("feedforward", seed=11))
    own = mpi_worker.flat_params(mpi_worker.make_net("feedforward", seed=10))
    assert any(not np.array_equal(root[k], own[k]) for k in root)  # rank 0 really changed
    for result in ranks:
        for key, value in root.items():
            np.testing.assert_array_equal(result[key], value)


@pytest.mark.mpi
def test_nan_on_one_rank_raises_on_every_rank_and_updates_nothing(tmp_path):
    ranks = run_worker("nan", tmp_path)
    assert str(ranks[0]["message"]).startswith("train: another process's input holds NaN")
    assert str(ranks[1]["message"]).startswith("train: the input holds NaN")
    assert all(bool(result["unchanged"]) for result in ranks)
    for key in params_of(ranks[0]):  # the next step ran in step on both ranks
        np.testing.assert_array_equal(ranks[0][key], ranks[1][key])


@pytest.mark.mpi
def test_a_rank_wrapping_another_optimizer_is_named_on_every_rank(tmp_path):
    ranks = run_worker("optimizers", tmp_path)
    expected = ("DataParallel: rank 1 wraps SGD with rate=0.2 where rank 0 has rate=0.1; every "
                "rank must wrap the same optimizer with the same settings")
    assert [str(result["message"]) for result in ranks] == [expected, expected]
    assert all(bool(result["unchanged"]) for result in ranks)


@pytest.mark.mpi
def test_an_exception_on_one_rank_ends_every_rank_under_mpi4py(tmp_path):
    done = run_ranks(["-m", "mpi4py", "-m", "tests.mpi_worker", "crash", str(tmp_path)])
    assert done.returncode != 0
    assert "planned failure on rank 1" in done.stderr
    assert not list(tmp_path.iterdir())  # rank 0 never finished its step


TEXT_RUN = ["train-text", "--hidden", "8", "--seq-len", "8", "--batch", "3", "--backend",
            "numpy", "--seed", "5", "--dtype", "float64", "--sample-chars", "0",
            "--log-every", "2"]


def test_train_text_on_one_rank_is_the_plain_run(capsys, tmp_path):
    pytest.importorskip("mpi4py", reason="mpi4py is not installed (pip install 'dualtape[mpi]')")
    from dualtape import cli

    for name, extra in (("plain", []), ("distributed", ["--distributed"])):
        assert cli.main([*TEXT_RUN, "--steps", "4", "--save", str(tmp_path / name), *extra]) == 0
    out = capsys.readouterr().out
    assert "distributed: 1 ranks x batch 3 = global batch 3" in out
    plain, one_rank = (dualtape.load(tmp_path / name) for name in ("plain", "distributed"))
    assert_params_equal(host_params(one_rank), host_params(plain))


def test_train_text_distributed_needs_mpi4py(capsys, monkeypatch):
    from dualtape import cli

    monkeypatch.setattr(distributed, "mpi_module", lambda: None)
    assert cli.main([*TEXT_RUN, "--steps", "1", "--distributed"]) == 1
    assert "--distributed needs mpi4py: pip install 'dualtape[mpi]'" in capsys.readouterr().err


def test_train_text_refuses_an_mpiexec_of_another_mpi(capsys, monkeypatch):
    pytest.importorskip("mpi4py", reason="mpi4py is not installed (pip install 'dualtape[mpi]')")
    from dualtape import cli

    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "4")  # launched as 4, but mpi4py sees 1 rank
    assert cli.main([*TEXT_RUN, "--steps", "1", "--distributed"]) == 1
    assert "mpiexec started 4 processes but mpi4py sees 1" in capsys.readouterr().err


class Silent:
    """A reporter that keeps what it is told."""

    def __init__(self):
        self.speeds: list[float] = []

    def advance(self) -> None:
        pass

    def progress(self, step: int, loss: float, chars_per_second: float,
                 valid_loss: float | None = None) -> None:
        self.speeds.append(chars_per_second)

    def text(self, message: str) -> None:
        pass

    def warn(self, message: str) -> None:
        pass


@pytest.mark.parametrize(("code", "reason"), [(143, "interrupted"), (1, "time")])
def test_every_rank_stops_after_the_step_another_rank_asks_to(fake_mpi, code, reason):
    from dualtape.text.config import TrainConfig
    from dualtape.text.console import StopRequest
    from dualtape.text.distributed import _runner
    from dualtape.text.loop import RunLimits
    from dualtape.text.trainer import TextTrainer

    asks = iter([0, 0, 0, code])  # the other rank asks to stop before the fourth step
    comm = FakeComm(others=lambda buffer: np.array([next(asks)]))
    trainer = TextTrainer.new("abcdefghij" * 10, TrainConfig(hidden=[8], seq_len=8, batch=2),
                              dualtape.backend.resolve_backend("numpy"))
    stop = StopRequest()
    result = _runner(comm)(trainer, RunLimits(steps=10, log_every=1, sample_chars=0),
                           Silent(), stop)
    assert (result.reason, result.steps, trainer.step_count) == (reason, 3, 3)
    assert stop.status == (code if reason == "interrupted" else None)  # exits as the other does


@pytest.mark.parametrize(("rank", "steps"), [(0, 3), (1, 10)])
def test_the_time_limit_is_read_on_rank_0s_seconds_of_training(fake_mpi, monkeypatch, rank,
                                                                steps):
    """An injected clock: a step takes 1 s, rank 0's sample 5 s. Rank 0, which alone samples
    and saves, stops the ranks when its steps reach the limit, its samples left out; another
    rank (whose time waits for rank 0's samples) never decides alone."""
    from dualtape.text.config import TrainConfig
    from dualtape.text.console import StopRequest
    from dualtape.text.distributed import _runner
    from dualtape.text.loop import RunLimits, TrainingClock
    from dualtape.text.trainer import TextTrainer

    wall = [0.0]

    def taking(seconds, action):
        def run(*args):
            wall[0] += seconds
            return action(*args)
        return run

    comm = FakeComm(others=lambda buffer: np.zeros_like(buffer), rank=rank)
    trainer = TextTrainer.new("abcdefghij" * 10, TrainConfig(hidden=[8], seq_len=8, batch=2),
                              dualtape.backend.resolve_backend("numpy"))
    monkeypatch.setattr(trainer, "step", taking(1.0, trainer.step))
    monkeypatch.setattr(trainer, "sample", taking(5.0, trainer.sample))
    limits = RunLimits(steps=10, time_limit=3, log_every=100, sample_every=1, sample_chars=4,
                       clock=TrainingClock(lambda: wall[0]))
    result = _runner(comm)(trainer, limits, Silent(), StopRequest())
    assert (result.steps, result.reason) == (steps, "time" if rank == 0 else "steps")


def test_a_rank_that_does_not_write_stops_at_the_save_point_where_the_model_diverged(
        fake_mpi, tmp_path, monkeypatch):
    from dualtape.text.config import TrainConfig
    from dualtape.text.console import StopRequest
    from dualtape.text.distributed import _runner
    from dualtape.text.loop import RunLimits
    from dualtape.text.trainer import TextTrainer

    comm = FakeComm(others=lambda buffer: np.zeros_like(buffer), rank=1)
    trainer = TextTrainer.new("abcdefghij" * 10, TrainConfig(hidden=[8], seq_len=8, batch=2),
                              dualtape.backend.resolve_backend("numpy"))
    real = trainer.step

    def step():  # the parameters turn NaN in the third step, between two loss reads
        real()
        if trainer.step_count == 3:
            trainer.net.layers[0].params["b"] = trainer.net.layers[0].params["b"] * np.nan

    monkeypatch.setattr(trainer, "step", step)
    limits = RunLimits(steps=10, log_every=100, sample_chars=0, save=str(tmp_path / "m.npz"),
                       save_every=2)
    with pytest.raises(SystemExit) as ended:
        _runner(comm)(trainer, limits, Silent(), StopRequest())
    assert ended.value.code == 1 and trainer.step_count == 4
    assert not (tmp_path / "m.npz").exists()  # rank 0 writes, not this one


def shared(corpus: Path, *options: str):
    """``prepare`` for ``train-text TEXT_RUN... CORPUS options``, and a function giving what
    its rank must share with the others (``shared_settings``) as it is now."""
    from dualtape import cli
    from dualtape.text.distributed import shared_settings

    args = cli.build_parser().parse_args([*TEXT_RUN, str(corpus), *options])
    prepared = prepare(args)
    return prepared.trainer, lambda: shared_settings(args, prepared.trainer, prepared.text)


@pytest.fixture
def corpus(tmp_path) -> Path:
    path = tmp_path / "corpus.txt"
    path.write_text("The cat sat on the mat. The dog sat on the log. " * 12, encoding="utf-8")
    return path


@pytest.mark.parametrize("option, value", [
    ("--hidden", "9"), ("--dtype", "float32"), ("--optimizer", "adam"), ("--rate", "0.1"),
    ("--momentum", "0.5"), ("--l2", "0"), ("--clip", "2"), ("--seq-len", "7"), ("--batch", "4"),
    ("--seed", "6"), ("--steps", "7"), ("--time-limit", "5"), ("--log-every", "3"),
    ("--save-every", "2"), ("--backend", "array_api_strict"), ("--cell", "gru"),
    ("--valid", "0.2"), ("--valid-every", "3"), ("--sample-every", "3"),
    ("--stateful", None),
])
def test_every_option_the_ranks_share_is_compared(corpus, option, value):
    from dualtape.text.distributed import _difference

    base = ["--cell", "lstm"] if option == "--stateful" else []  # Grenade's is never stateful
    reference = shared(corpus, *base)[1]()
    assert _difference(reference, reference) is None
    given = [option] if value is None else [option, value]
    assert _difference(shared(corpus, *base, *given)[1](), reference).startswith(
        f"its {option} is ")


def test_every_option_of_the_parser_must_agree_or_is_listed_as_free_to_differ(corpus):
    from dualtape import cli
    from dualtape.text.distributed import MAY_DIFFER

    parser = cli.build_parser()
    commands = next(a for a in parser._actions if a.choices and "train-text" in a.choices)
    options = {a.dest for a in commands.choices["train-text"]._actions}
    compared = {key[2:].replace("-", "_") for key in shared(corpus)[1]() if key[:2] == "--"}
    assert options <= compared | set(MAY_DIFFER)
    assert not compared & set(MAY_DIFFER)
    assert set(MAY_DIFFER) <= options | {"command", "run"}  # no stale name


def test_the_ranks_must_share_the_dropout_and_draw_its_masks_apart(corpus):
    from dualtape.text.distributed import _difference

    reference = shared(corpus, "--hidden", "8,8")[1]()
    trainer, settings = shared(corpus, "--hidden", "8,8", "--dropout", "0.2")
    assert _difference(settings(), reference).startswith("its --dropout is ")
    masks = trainer.dropout_rngs[0].bit_generator.state
    trainer.dropout_rngs[0].random()  # the generators are in the model's digest
    assert trainer.dropout_rngs[0].bit_generator.state != masks
    assert _difference(settings(), shared(corpus, "--hidden", "8,8", "--dropout", "0.2")[1]())


def test_the_ranks_must_save_alike_train_on_one_text_and_resume_one_state(corpus, tmp_path):
    from dualtape.text.distributed import _difference

    trainer, settings = shared(corpus)
    reference = settings()
    theirs = shared(corpus, "--save", str(tmp_path / "m.npz"))[1]()
    assert _difference(theirs, reference).startswith("its saving (--save or --resume) is True "
                                                     "but rank 0's is False")
    other = tmp_path / "other.txt"
    other.write_text(corpus.read_text() + " ")
    assert _difference(shared(other)[1](), reference).startswith("its corpus's SHA-256 is ")
    trainer.optimizer.state[(0, "W")] = {"m": trainer.net.layers[0].params["W"] * 0}
    assert _difference(settings(), reference).startswith("its model digest (weights, "
                                                         "optimizer state, generators) is ")



def test_the_reported_speed_counts_every_rank():
    from dualtape.text.distributed import GlobalSpeed

    reporter = Silent()
    GlobalSpeed(reporter, size=3).progress(step=10, loss=2.0, chars_per_second=1000.0)
    assert reporter.speeds == [3000.0]


@pytest.mark.mpi
def test_two_ranks_train_text_then_resume_on_one(tmp_path):
    checkpoint = tmp_path / "model.npz"
    done = run_ranks(["-m", "dualtape.cli", *TEXT_RUN, "--steps", "6", "--distributed",
                      "--save", str(checkpoint)])
    assert done.returncode == 0, done.stderr
    assert "windows of 8 x batch 3" in done.stdout
    assert "distributed: 2 ranks x batch 3 = global batch 6" in done.stdout
    assert done.stdout.count("stopped (step limit) at step 6") == 1  # only rank 0 prints
    assert done.stdout.count("step      2  loss") == 1
    # no temporary left; rank 0 held the lock; the log beside the checkpoint has its rows alone
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.npz", "model.npz.lock",
                                                          "model.npz.log.csv"]
    assert [row.step for row in read_log(f"{checkpoint}.log.csv").rows] == [2, 4, 6]
    assert (tmp_path / "model.npz.log.csv").read_text().count("\n") == 4
    resumed = subprocess.run(
        [sys.executable, "-m", "dualtape.cli", "train-text", "--resume", str(checkpoint),
         "--steps", "2", "--sample-chars", "0", "--save", str(checkpoint)],
        capture_output=True, text=True, timeout=TIMEOUT, cwd=ROOT)
    assert resumed.returncode == 0, resumed.stderr
    assert "resumed" in resumed.stdout and "stopped (step limit) at step 8" in resumed.stdout
    # back on two ranks, until a time limit: the ranks must agree on the step to stop after
    again = run_ranks(["-m", "dualtape.cli", "train-text", "--resume", str(checkpoint),
                       "--time-limit", "1", "--sample-chars", "0", "--distributed"])
    assert again.returncode == 0, again.stderr
    assert "resumed" in again.stdout and again.stdout.count("stopped (time limit) at step") == 1


@pytest.mark.mpi
@pytest.mark.parametrize("flag", ["--save", "--resume"])
def test_a_distributed_run_on_a_locked_checkpoint_is_refused_on_every_rank(tmp_path, flag):
    checkpoint = tmp_path / "model.npz"
    made = run_ranks(["-m", "dualtape.cli", *TEXT_RUN, "--steps", "2", "--save",
                      str(checkpoint)], ranks=1)
    assert made.returncode == 0, made.stderr
    before = checkpoint.read_bytes()
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(checkpoint)], cwd=ROOT,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        given = [*TEXT_RUN, "--save", str(checkpoint), "--overwrite"] if flag == "--save" \
            else ["train-text", "--resume", str(checkpoint)]
        done = run_ranks(["-m", "dualtape.cli", *given, "--steps", "2", "--distributed"])
    finally:
        holder.kill()
        holder.wait()
    assert done.returncode == 1 and done.stdout == "", done.stdout
    assert done.stderr.count("\n") == 1, done.stderr
    assert f"is in use by another train-text run (PID {holder.pid}" in done.stderr
    assert checkpoint.read_bytes() == before


def launch_then_leave(options: list[str], checkpoint: Path) -> tuple[int, list[str], str]:
    """``mpiexec -n 2 ... train-text OPTIONS --save CHECKPOINT | head``: read stdout up to the
    second reading, close it (the reader leaves), wait; the exit status, the lines read and
    stderr."""
    with subprocess.Popen([mpiexec(), *options, "-n", "2", sys.executable, "-m", "dualtape.cli",
                           *TEXT_RUN, "--log-every", "1", "--steps", "100000", "--distributed",
                           "--save", str(checkpoint)], cwd=ROOT, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True) as launched:
        lines = []
        while not lines or "step      2 " not in lines[-1] and lines[-1]:
            lines.append(launched.stdout.readline())
        launched.stdout.close()
        _, err = finish(launched)
    return launched.returncode, lines, err


def finish(launched: subprocess.Popen) -> tuple[str, str]:
    """``launched.communicate()`` within ``TIMEOUT``, killing it past that (no hung test)."""
    try:
        return launched.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        launched.kill()
        raise


def test_outside_mpiexec_stdout_is_left_as_it_is():
    from dualtape.text.mpiexec_pipe import write_into_mpiexecs_pipe

    before = os.fstat(1)
    assert write_into_mpiexecs_pipe() is False
    assert (os.fstat(1).st_dev, os.fstat(1).st_ino) == (before.st_dev, before.st_ino)


@pytest.mark.mpi
def test_a_reader_that_leaves_mpiexec_stops_the_run_which_saves_and_says_so(tmp_path):
    checkpoint = tmp_path / "model.npz"
    code, lines, err = launch_then_leave([], checkpoint)
    assert code == 74, err  # rank 0's stdout lost, as a single process's: not mpiexec killed
    step = dualtape.load_with_extra(checkpoint)[1]["step"]
    assert step >= 2 and err.count("\n") == 1
    assert err == (f"dualtape train-text: stdout was lost (Broken pipe); stopped at step {step}, "
                   f"saved {checkpoint} at step {step}\n")
    assert [row.step for row in read_log(f"{checkpoint}.log.csv").rows] == [*range(1, step + 1)]


@pytest.mark.mpi
def test_a_reader_slower_than_rank_0_makes_it_wait_not_stop(tmp_path):
    with subprocess.Popen([mpiexec(), "-n", "2", sys.executable, "-m", "dualtape.cli",
                           *TEXT_RUN, "--log-every", "1", "--steps", "2000", "--valid", "0",
                           "--distributed"], cwd=ROOT, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True) as launched:
        time.sleep(3)  # 2,000 readings overfill the pipe (64 KiB) meanwhile
        out, err = finish(launched)
    assert launched.returncode == 0, err
    assert len(re.findall(r"^step +\d+  loss", out, re.M)) == 2000


@pytest.mark.mpi
def test_output_that_mpiexec_is_told_to_shape_stays_relayed(tmp_path):
    code, lines, _ = launch_then_leave(["-prepend-rank"], tmp_path / "model.npz")
    assert lines[-1].startswith("[0] step      2 ")  # mpiexec's prefix: relayed by it
    assert code != 0  # mpiexec then dies of SIGPIPE, as docs/distributed.md says


def run_two_commands(first: list[str], second: list[str]) -> subprocess.CompletedProcess:
    """Rank 0 runs ``python first`` and rank 1 ``python second`` (one MPMD launch)."""
    return subprocess.run([mpiexec(), "-n", "1", sys.executable, *first, ":", "-n", "1",
                           sys.executable, *second], cwd=ROOT, capture_output=True, text=True,
                          timeout=TIMEOUT)


@pytest.mark.mpi
@pytest.mark.parametrize("rank_0, rank_1, message", [
    ([], ["--hidden", "9"], "rank 1: its --hidden is [9] but rank 0's is [8]; every rank must "
     "run the same command"),
    ([], ["--log-every", "3"], "rank 1: its --log-every is 3 but rank 0's is 2; every rank must"),
    (["--seq-len", "100000000"], [], "the corpus has"),
    ([], ["--seq-len", "100000000"], "rank 1: the corpus has"),
], ids=["architecture", "loop", "rank-0-fails", "rank-1-fails"])
def test_ranks_that_differ_or_fail_at_start_are_refused_in_one_line(rank_0, rank_1, message):
    base = ["-m", "dualtape.cli", *TEXT_RUN, "--steps", "2", "--distributed"]
    done = run_two_commands([*base, *rank_0], [*base, *rank_1])
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and message in done.stderr, done.stderr


@pytest.mark.mpi
def test_two_ranks_train_on_rank_0s_windows_and_the_stream_jumped_once(tmp_path, monkeypatch):
    from dualtape.text import trainer as text_train
    from dualtape.text.config import TrainConfig

    checkpoint = tmp_path / "model.npz"
    done = run_ranks(["-m", "dualtape.cli", *TEXT_RUN, "--clip", "0", "--steps", "4",
                      "--distributed", "--save", str(checkpoint)])
    assert done.returncode == 0, done.stderr
    # One process with both ranks' windows side by side (the loss and gradient of the mean
    # over 6 windows are the mean of the ranks' means over 3; no clipping).
    streams = [np.random.default_rng([5, 1])]
    streams.append(np.random.Generator(streams[0].bit_generator.jumped(1)))
    real = text_train.random_windows
    monkeypatch.setattr(text_train, "random_windows", lambda ids, seq_len, batch, rng: (
        np.concatenate([real(ids, seq_len, batch // 2, r) for r in streams], axis=1)))
    config = TrainConfig(hidden=[8], seq_len=8, batch=6, seed=5, dtype="float64", clip=0.0,
                         valid=DEFAULT_VALID)
    _same_as_alone(checkpoint, config)


def _same_as_alone(checkpoint: Path, config, steps: int = 4) -> None:
    """The distributed run's saved weights are those of one process training ``config``."""
    from dualtape.text.model import read_corpus
    from dualtape.text.trainer import TextTrainer

    alone = TextTrainer.new(read_corpus(None), config, dualtape.backend.resolve_backend("numpy"))
    for _ in range(steps):
        alone.step()
    saved = host_params(dualtape.load(checkpoint, backend="numpy"))
    for got, want in zip(saved, host_params(alone.net), strict=True):
        for key in want:
            np.testing.assert_allclose(got[key], want[key], rtol=1e-10, atol=1e-13)


@pytest.mark.mpi
def test_two_stateful_ranks_read_the_streams_one_process_reads_at_their_global_batch(tmp_path):
    from dualtape.text.config import TrainConfig

    checkpoint = tmp_path / "model.npz"
    done = run_ranks(["-m", "dualtape.cli", *TEXT_RUN, "--clip", "0", "--steps", "25",
                      "--cell", "gru", "--stateful", "--distributed", "--save", str(checkpoint)])
    assert done.returncode == 0, done.stderr
    # rank r read streams 3r .. 3r + 2 of 6 and carried their states from step to step
    config = TrainConfig(hidden=[8], cell="gru", seq_len=8, batch=6, seed=5, dtype="float64",
                         clip=0.0, valid=DEFAULT_VALID, stateful=True)
    _same_as_alone(checkpoint, config, steps=25)


@pytest.mark.mpi
def test_two_ranks_diverging_between_loss_reads_stop_together_at_a_save_point(tmp_path):
    done = run_ranks(["-m", "dualtape.cli", *TEXT_RUN, "--dtype", "float32", "--rate", "1e30",
                      "--clip", "0", "--save-every", "2", "--log-every", "1000", "--steps", "50",
                      "--distributed", "--save", str(tmp_path / "m.npz")])
    assert done.returncode == 1
    assert done.stderr.count("the parameters hold NaN or infinity at step 2;") == 1, done.stderr
    assert done.stderr.count("\n") == 1 and "nothing was saved" in done.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["m.npz.lock"]  # rank 0's lock alone


@pytest.mark.mpi
def test_a_diverging_two_rank_run_stops_every_rank_with_one_message(tmp_path):
    done = run_ranks(["-m", "dualtape.cli", *TEXT_RUN, "--steps", "6", "--distributed",
                      "--rate", "1e30", "--dtype", "float32", "--log-every", "1",
                      "--save", str(tmp_path / "m.npz")])
    assert done.returncode == 1
    assert done.stderr.count("training diverged: the loss is nan") == 1, done.stderr
    assert "nothing was saved" in done.stderr
    # no checkpoint; the log keeps the readings before the divergence, from rank 0 alone
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.npz.lock", "m.npz.log.csv"]
    assert [row.step for row in read_log(tmp_path / "m.npz.log.csv").rows] == [1, 2]
