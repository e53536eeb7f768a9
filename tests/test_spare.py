"""``dualtape.spare``: a kept array is handed out again only once nothing refers to it (so what
a caller keeps of one call, a tape, a state, an output or a view, survives the next call on
every backend), small ones and those past the cap are not kept, and unused shapes make room
for new ones."""

from __future__ import annotations

import sys
import threading

import numpy as np
import pytest

import dualtape
from dualtape import GRU, LSTM, FullyConnected, RecurrentNetwork, StandardLSTM, spare
from dualtape.backend import to_numpy

F32 = np.dtype("float32")
BIG = (64, 1024)  # 256 KiB in float32: kept


@pytest.fixture(autouse=True)
def empty_spares():
    """Each test starts and ends with nothing kept."""
    spare.clear()
    yield
    spare.clear()


def address(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def test_a_kept_array_is_handed_out_again_once_nothing_refers_to_it():
    a = spare.empty(BIG, F32)
    first = address(a)
    b = spare.empty(BIG, F32)
    assert address(b) != first  # a is in use
    del a
    c = spare.empty(BIG, F32)
    assert address(c) == first and c.shape == BIG and c.dtype == F32 and c.flags.c_contiguous
    view = c[1:]
    del c
    assert address(spare.empty(BIG, F32)) not in (first, address(b))  # the view holds it
    del view
    assert address(spare.empty(BIG, F32)) == first
    assert spare._HELD[0] == 3 * 64 * 1024 * 4


def test_the_count_of_an_unused_array_is_read_as_empty_reads_it():
    assert spare._free_count() == spare._FREE


def test_small_arrays_and_arrays_past_the_cap_are_not_kept(monkeypatch):
    small = spare.empty((4, 1024), F32)  # 16 KiB
    assert small.base is None and small.dtype == F32 and spare._HELD[0] == 0
    at_least = spare.empty((spare.MIN_BYTES // 4,), F32)
    assert at_least.base is not None and spare._HELD[0] == spare.MIN_BYTES
    spare.clear()
    monkeypatch.setattr(spare, "CAP_BYTES", 200 << 10)
    large = spare.empty(BIG, F32)  # 256 KiB > the cap
    assert large.base is None and large.dtype == F32 and spare._HELD[0] == 0
    assert not spare._KEPT
    monkeypatch.setattr(spare, "CAP_BYTES", 256 << 10)
    assert spare.empty(BIG, F32).base is not None  # the cap itself fits


def test_unused_shapes_make_room_for_a_new_one_and_used_ones_do_not(monkeypatch):
    f64 = np.dtype("float64")
    monkeypatch.setattr(spare, "CAP_BYTES", 600 << 10)
    held = spare.empty(BIG, F32)  # 256 KiB
    unused = spare.empty((16, 1024), f64)  # 128 KiB
    del unused
    new = spare.empty((16, 4096), F32)  # 256 KiB: the unused float64 one goes
    assert new.base is not None and list(spare._KEPT) == [(BIG, F32), ((16, 4096), F32)]
    assert spare._HELD[0] == 512 << 10
    again = spare.empty((32, 1024), F32)  # no room: held and new are in use
    assert again.base is None and again.dtype == F32 and spare._HELD[0] == 512 << 10
    assert held.base is not None


def test_room_is_made_only_as_far_as_needed(monkeypatch):
    """Kept arrays nobody uses stay while the new one fits beside them, to the byte."""
    monkeypatch.setattr(spare, "CAP_BYTES", 768 << 10)  # three of BIG
    unused = spare.empty(BIG, F32)
    held = spare.empty(BIG, F32)
    del unused
    other = spare.empty((16, 4096), F32)  # 256 KiB more: exactly the cap
    assert other.base is not None and spare._HELD[0] == 768 << 10
    assert len(spare._KEPT[BIG, F32]) == 2 and held.base is not None


def test_threads_never_share_an_array():
    """Many threads take, fill and check arrays of one shape at a short switch interval: an
    array handed to two of them at once shows another thread's mark."""
    clashes, interval = [], sys.getswitchinterval()

    def work(mark: int) -> None:
        for _ in range(300):
            a = spare.empty(BIG, F32)
            a[0, :8] = mark
            if not (a[0, :8] == mark).all():
                clashes.append(mark)

    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=work, args=(k,)) for k in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    assert clashes == []


CELLS = [StandardLSTM, GRU, LSTM]


@pytest.mark.parametrize("kind", CELLS, ids=lambda k: k.kind)
@pytest.mark.parametrize("n_in", [1, 3])
def test_what_a_call_hands_back_survives_the_next_calls(backend, kind, n_in):
    """A tape, its outputs and final state from ``forward_sequence``, and the state a training
    call ends in, are still what they were after more calls of the same shapes (which, on
    numpy, take the kept arrays nobody holds)."""
    rng = np.random.default_rng(0)
    net = RecurrentNetwork([kind(n_in, 48, seed=1), FullyConnected(48, 2, seed=2)])
    shape = (40, 16, n_in)

    def fresh():
        return dualtape.asarray(rng.standard_normal(shape).astype("float32"))

    targets = dualtape.asarray(np.zeros((40, 16, 2), "float32"))
    tape, state, ys = net.forward_sequence(None, fresh())
    result = dualtape.backpropagate_sequence(net, fresh(), targets)
    kept = [to_numpy(a).copy() for a in (ys, *state, *result.state)]
    kept_tape = [to_numpy(a).copy() for a in tape.tapes[0][:-1] if hasattr(a, "shape")]
    for _ in range(3):
        dualtape.backpropagate_sequence(net, fresh(), targets)
        net.forward_sequence(None, fresh())
    for before, now in zip(kept, (ys, *state, *result.state), strict=True):
        np.testing.assert_array_equal(to_numpy(now), before)
    now_tape = [to_numpy(a) for a in tape.tapes[0][:-1] if hasattr(a, "shape")]
    for before, now in zip(kept_tape, now_tape, strict=True):
        np.testing.assert_array_equal(now, before)
    net.backward_sequence(tape, None, dualtape.asarray(np.ones((40, 16, 2), "float32")))


@pytest.mark.parametrize("kind", CELLS, ids=lambda k: k.kind)
def test_a_training_loop_makes_no_new_arrays_after_its_first_call(backend, kind):
    """Calls of one shape whose results are let go reuse the first call's kept arrays: what
    is kept stops growing (on numpy; elsewhere nothing is kept)."""
    rng = np.random.default_rng(1)
    net = RecurrentNetwork([kind(1, 32, seed=1), FullyConnected(32, 1, seed=2)])
    xs = dualtape.asarray(rng.standard_normal((52, 64, 1)).astype("float32"))
    targets = dualtape.asarray(np.zeros((52, 64, 1), "float32"))
    dualtape.backpropagate_sequence(net, xs, targets)
    held = spare._HELD[0]
    for _ in range(3):
        dualtape.backpropagate_sequence(net, xs, targets)
    assert spare._HELD[0] == held
    assert (held > 0) == (backend.name == "numpy")


def test_suspended_nothing_is_kept_or_handed_out_again_until_as_many_resumes():
    kept = spare.empty(BIG, F32)
    first = address(kept)
    del kept
    spare.suspend()
    spare.suspend()
    try:
        during = spare.empty(BIG, F32)
        assert during.base is None and address(during) != first
        spare.resume()
        assert spare.empty(BIG, F32).base is None  # one suspend still open
    finally:
        spare.resume()
    assert address(spare.empty(BIG, F32)) == first
    with pytest.raises(RuntimeError, match="^spare.resume without a suspend$"):
        spare.resume()


def test_the_memory_meter_measures_with_spare_suspended():
    from dualtape.meters import TracedMeter

    with TracedMeter():
        assert spare.empty(BIG, F32).base is None
    assert spare.empty(BIG, F32).base is not None


@pytest.mark.parametrize("in_use", [1, 2])
def test_room_is_made_from_an_unused_array_behind_ones_in_use(monkeypatch, in_use):
    """The unused array of a shape is let go though arrays in use come before it in its list
    (a removal by equality would compare the arrays element by element)."""
    monkeypatch.setattr(spare, "CAP_BYTES", (2 * in_use + 3) * (128 << 10))  # in_use + 1.5
    held = [spare.empty(BIG, F32) for _ in range(in_use)]
    unused = spare.empty(BIG, F32)
    del unused
    new = spare.empty((16, 4096), F32)
    assert new.base is not None and spare._HELD[0] == (in_use + 1) * (256 << 10)
    kept = spare._KEPT[BIG, F32]
    assert [b is h.base for b, h in zip(kept, held, strict=True)] == [True] * in_use
