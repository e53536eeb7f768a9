"""``overlap_gradients``: a training call's weight-gradient products on a second thread
(``kernels.overlap``): the same bits as without, handed over only where asked for (numpy,
fast paths on, a backward pass into gradient buffers), every product finished before the call
returns, errors raised, the caller's flush bits kept, and a forked child's own worker."""

from __future__ import annotations

import multiprocessing
import threading
import time

import numpy as np
import pytest

import dualtape
from dualtape.kernels import cpu_path, flush, overlap
from dualtape.kernels.overlap import matmul_later, overlapping

from .helpers import assert_params_equal, host_params


@pytest.fixture(autouse=True)
def any_size(monkeypatch):
    """Every product handed over, whatever its size (these tests' products are small)."""
    monkeypatch.setattr(overlap, "HAND_OVER_FROM", 0)
    monkeypatch.setattr(overlap, "HAND_OVER_ROWS", 0)


@pytest.fixture
def handed(monkeypatch):
    """The threads the handed-over products ran on, with the shapes of their arrays."""
    seen, right = [], overlap._run

    def recording(call, args, control):
        seen.append((threading.current_thread().name,
                     {a.shape for a in args if isinstance(a, np.ndarray)}))
        right(call, args, control)

    monkeypatch.setattr(overlap, "_run", recording)
    return seen


def text_net(dtype: str, embedding: bool = False, cell: str = "LSTM"
             ) -> dualtape.RecurrentNetwork:
    kind = getattr(dualtape, cell)
    first = [dualtape.Embedding(7, 4, seed=3, dtype=dtype), kind(4, 6, seed=1, dtype=dtype)] \
        if embedding else [kind(7, 6, seed=1, dtype=dtype)]
    return dualtape.RecurrentNetwork([*first, kind(6, 5, seed=2, dtype=dtype),
                                      dualtape.FullyConnected(5, 7, seed=4, dtype=dtype)])


def train(net, on: bool, steps: int = 3, tape: str | int = "full") -> list[float]:
    rng = np.random.default_rng(0)
    optimizer, losses = dualtape.Adam(0.01), []
    with dualtape.overlap_gradients(on):
        for _ in range(steps):
            ids = dualtape.asarray(rng.integers(0, 7, (9, 4)))
            labels = dualtape.asarray(rng.integers(0, 7, (9, 4)))
            losses.append(dualtape.train_recurrent(net, ids, labels, optimizer, tape=tape,
                                                   loss="softmax_cross_entropy")[0])
    return losses


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("case", ["full tape", "checkpointed", "embedding"])
def test_training_with_the_products_overlapped_gives_the_same_bits(backend, handed, dtype,
                                                                    case):
    embedding, tape = case == "embedding", 4 if case == "checkpointed" else "full"
    overlapped, plain = text_net(dtype, embedding), text_net(dtype, embedding)
    assert train(overlapped, True, tape=tape) == train(plain, False, tape=tape)
    assert_params_equal(host_params(overlapped), host_params(plain))
    if backend.name != "numpy":
        assert handed == []
        return
    # per call: the top layer's W and the LSTMs' U blocks and (but the first's, from ids) W;
    # the worker runs them, and the caller those it has not begun when the pass ends (at these
    # sizes, often all: which is a matter of timing)
    assert handed and {name for name, _ in handed} <= {"dualtape-gradients_0",
                                                       threading.current_thread().name}
    assert any((7, 5) in shapes for _, shapes in handed)  # the FullyConnected weight's


@pytest.mark.parametrize("cell", ["StandardLSTM", "GRU"])
def test_the_standard_cells_weight_gradients_are_overlapped_with_the_same_bits(
        backend, handed, cell):
    """Their products into the gradient buffers (torch's W_ih, W_hh) are handed over too."""
    overlapped, plain = text_net("float32", cell=cell), text_net("float32", cell=cell)
    assert train(overlapped, True) == train(plain, False)
    assert_params_equal(host_params(overlapped), host_params(plain))
    gates = 4 if cell == "StandardLSTM" else 3
    if backend.name == "numpy" and cpu_path()[0] == "compiled":  # the cells' fast loops
        assert any((gates * 5, 5) in shapes for _, shapes in handed)  # the second's W_hh
    elif backend.name != "numpy":
        assert handed == []


def test_off_by_default_and_where_the_fast_paths_are_off(handed, monkeypatch):
    train(text_net("float64"), False)
    with dualtape.overlap_gradients():
        with dualtape.overlap_gradients(False):
            train(text_net("float64"), False)
        monkeypatch.setenv("DUALTAPE_FUSED", "0")
        net = text_net("float64")
        rng = np.random.default_rng(0)
        dualtape.train_recurrent(net, dualtape.asarray(rng.integers(0, 7, (9, 4))),
                                 dualtape.asarray(rng.integers(0, 7, (9, 4))),
                                 dualtape.SGD(0.1), loss="softmax_cross_entropy")
    assert handed == []
    with pytest.raises(TypeError, match="on must be True or False, got 1"):
        with dualtape.overlap_gradients(1):
            pass


def test_nothing_is_handed_over_outside_a_backward_pass_or_for_other_arrays(handed):
    a, out = np.ones((3, 2)), np.zeros((2, 2))
    with dualtape.overlap_gradients():
        assert matmul_later(a.T, a, out) is False  # no scope
        with overlapping():
            assert matmul_later(a.T, a, [[0.0, 0.0]] * 2) is False
            assert matmul_later(a.T, a, out) is True
    assert (out == 3).all() and len(handed) == 1


def test_small_products_and_those_of_few_rows_are_not_handed_over(monkeypatch, handed):
    monkeypatch.setattr(overlap, "HAND_OVER_FROM", 24)  # multiply-adds
    monkeypatch.setattr(overlap, "HAND_OVER_ROWS", 3)
    with dualtape.overlap_gradients(), overlapping():
        assert not matmul_later(np.ones((2, 3)), np.ones((3, 3)), np.zeros((2, 3)))  # 18
        assert not matmul_later(np.ones((9, 2)), np.ones((2, 9)), np.zeros((9, 9)))  # rows
        assert matmul_later(np.ones((2, 3)), np.ones((3, 4)), np.zeros((2, 4)))  # 24, 3 rows
    assert len(handed) == 1


def test_the_scope_ends_only_when_every_product_has_finished(monkeypatch):
    right = overlap._run

    def slow(call, args, control):
        time.sleep(0.2)
        right(call, args, control)

    monkeypatch.setattr(overlap, "_run", slow)
    outs = [np.zeros((2, 2)) for _ in range(3)]
    with dualtape.overlap_gradients(), overlapping():
        for out in outs:
            matmul_later(np.ones((2, 3)), np.ones((3, 2)), out)
        assert not outs[-1].any()  # still running
    assert all((out == 3).all() for out in outs)


@pytest.mark.parametrize("failing", [0, 2], ids=["the worker's", "the caller's"])
def test_an_error_in_a_product_is_raised_after_all_have_finished(monkeypatch, failing):
    """The first product goes to the worker, the last is taken back by the caller."""
    outs = [np.zeros((2, 2)) for _ in range(3)]
    right = overlap._run

    def one_fails(call, args, control):
        out = args[2]
        time.sleep(0.1)
        if out is outs[failing]:
            raise MemoryError("planted")
        right(call, args, control)

    monkeypatch.setattr(overlap, "_run", one_fails)
    with pytest.raises(MemoryError, match="planted"):
        with dualtape.overlap_gradients(), overlapping():
            for out in outs:
                matmul_later(np.ones((2, 3)), np.ones((3, 2)), out)
    assert all((out == 3).all() for k, out in enumerate(outs) if k != failing)


def test_the_caller_runs_what_the_worker_has_not_begun(monkeypatch):
    """The worker takes the first product, the caller the others from the last."""
    ran, right, started = [], overlap._run, threading.Event()

    def recording(call, args, control):
        out = args[2]
        ran.append((threading.current_thread().name, int(out[0, 0])))
        started.set()
        time.sleep(1.0 if len(ran) == 1 else 0)  # the caller takes the rest meanwhile
        right(call, args, control)

    monkeypatch.setattr(overlap, "_run", recording)
    outs = [np.full((2, 2), k, float) for k in range(4)]
    with dualtape.overlap_gradients(), overlapping():
        for out in outs:
            matmul_later(np.ones((2, 3)), np.ones((3, 2)), out)
        started.wait(5)
    here = threading.current_thread().name
    assert ran == [("dualtape-gradients_0", 0), (here, 3), (here, 2), (here, 1)]
    assert all((out == 3).all() for out in outs)


def test_an_error_of_the_pass_itself_wins_drops_what_is_not_begun_and_waits(monkeypatch):
    right, started = overlap._run, threading.Event()

    def slow_failing(call, args, control):
        started.set()
        time.sleep(1.0)  # the pass fails meanwhile
        right(call, args, control)
        raise MemoryError("the product's")

    monkeypatch.setattr(overlap, "_run", slow_failing)
    begun, queued = np.zeros((2, 2)), np.zeros((2, 2))
    with pytest.raises(KeyError, match="the pass's"):
        with dualtape.overlap_gradients(), overlapping():
            matmul_later(np.ones((2, 3)), np.ones((3, 2)), begun)
            matmul_later(np.ones((2, 3)), np.ones((3, 2)), queued)
            started.wait(5)
            raise KeyError("the pass's")
    assert (begun == 3).all() and not queued.any()  # waited for, and dropped


@pytest.mark.skipif(flush.unavailable() is not None, reason=f"{flush.unavailable()}")
def test_the_worker_computes_with_the_callers_flush_bits():
    tiny = np.finfo(np.float32).tiny
    a, b = np.full((1, 1), tiny, np.float32), np.full((1, 1), 0.25, np.float32)
    assert (a @ b)[0, 0] != 0  # a subnormal product, unflushed
    for flushing, expected in ((True, 0.0), (False, float((a @ b)[0, 0]))):
        out = np.full((1, 1), np.nan, np.float32)
        with dualtape.overlap_gradients(), (flush.flushed() if flushing else
                                            flush.under_control(None)):
            with overlapping():
                assert matmul_later(a, b, out)
                overlap._PENDING.get()[0][0].result()  # the worker's, not taken back
        assert float(out[0, 0]) == expected


def _train_in_child(queue) -> None:
    queue.put(train(text_net("float64"), True, steps=1))


@pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(),
                    reason="no fork on this system")
def test_a_forked_child_starts_its_own_worker():
    train(text_net("float64"), True, steps=1)  # the parent's worker exists
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_train_in_child, args=(queue,))
    child.start()
    got = queue.get(timeout=60)
    child.join(60)
    assert child.exitcode == 0 and got == train(text_net("float64"), False, steps=1)
