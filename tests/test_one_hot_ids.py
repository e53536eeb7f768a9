"""A recurrent layer fed ids in place of their one-hot rows (``linear_algebra``): a
``RecurrentNetwork`` whose first layer is a recurrent cell takes integer ids ``(T, batch)``
and computes what the one-hot rows give (outputs bit for bit on numpy, gradients to rounding:
the input weights' gradient is summed by id), on every backend, with full and checkpointed
tapes, through every public call; against finite differences; refusals; an ``Embedding``
first fused into the layer after it (``stack.fuses``) against the same layers fed its rows; the
compiled row sums against numpy's."""

from __future__ import annotations

import numpy as np
import pytest

import dualtape
from dualtape.backend import to_numpy
from dualtape.kernels import numba_scatter, scatter_loops
from dualtape.kernels.scatter import check_compiled, numpy_row_sums
from dualtape.layers.linear_algebra import TableRows, rows_by_id

from .conftest import np64
from .test_embedding import check_param_gradients

CELLS = [dualtape.LSTM, dualtape.StandardLSTM, dualtape.GRU, dualtape.BasicRecurrent]
VOCAB = 7


def cell_net(cell, dtype: str = "float64") -> dualtape.RecurrentNetwork:
    return dualtape.RecurrentNetwork([cell(VOCAB, 5, seed=1, dtype=dtype),
                                      cell(5, 4, seed=2, dtype=dtype),
                                      dualtape.FullyConnected(4, 3, seed=3, dtype=dtype)])


def ids_and_rows(steps: int = 6, batch: int = 4, seed: int = 0):
    """Ids ``(steps, batch)`` (the last absent, some repeated) and their one-hot rows, on the
    selected backend."""
    ids = np.random.default_rng(seed).integers(0, VOCAB - 1, (steps, batch))
    return dualtape.asarray(ids), dualtape.asarray(np.eye(VOCAB)[ids])


def assert_grads_close(got, want) -> None:
    assert len(got) == len(want)
    for mine, theirs in zip(got, want, strict=True):
        assert mine.keys() == theirs.keys()
        for k in theirs:
            np.testing.assert_allclose(np64(mine[k]), np64(theirs[k]), rtol=1e-12, atol=1e-14,
                                       err_msg=k)


@pytest.mark.parametrize("tape", ["full", "sqrt", 2])
@pytest.mark.parametrize("cell", CELLS, ids=lambda c: c.__name__)
def test_ids_compute_what_their_one_hot_rows_do(backend, cell, tape):
    net, (ids, rows) = cell_net(cell), ids_and_rows()
    t_ids, s_ids, y_ids = net.forward_sequence(None, ids, tape=tape)
    t_rows, s_rows, y_rows = net.forward_sequence(None, rows, tape=tape)
    if backend.name == "numpy":  # a gather of the weights' columns: the product's bits
        np.testing.assert_array_equal(np64(y_ids), np64(y_rows))
    np.testing.assert_allclose(np64(y_ids), np64(y_rows), rtol=1e-14, atol=1e-15)
    for a, b in zip(s_ids, s_rows, strict=True):
        np.testing.assert_allclose(np64(a), np64(b), rtol=1e-14, atol=1e-15)
    dys = dualtape.asarray(np.random.default_rng(1).normal(size=tuple(y_ids.shape)))
    g_ids, d_ids, dxs = net.backward_sequence(t_ids, None, dys)
    g_rows, d_rows, dx_rows = net.backward_sequence(t_rows, None, dys)
    assert dxs is None and tuple(dx_rows.shape) == (6, 4, VOCAB)  # ids have no gradient
    assert_grads_close(g_ids, g_rows)
    for a, b in zip(d_ids, d_rows, strict=True):
        np.testing.assert_allclose(np64(a), np64(b), rtol=1e-12, atol=1e-14)
    labels = dualtape.asarray(np.random.default_rng(2).integers(0, 3, (6, 4)))
    found = [dualtape.backpropagate_sequence(net, x, labels, loss="softmax_cross_entropy",
                                             tape=tape) for x in (ids, rows)]
    np.testing.assert_allclose(float(found[0].loss), float(found[1].loss), rtol=1e-14)
    assert_grads_close(found[0].grads, found[1].grads)


@pytest.mark.parametrize("cell", CELLS, ids=lambda c: c.__name__)
def test_the_gradients_from_ids_against_finite_differences(backend, cell):
    net = cell_net(cell)
    ids, _ = ids_and_rows(steps=3, batch=2, seed=5)
    labels = dualtape.asarray(np.random.default_rng(6).integers(0, 3, (3, 2)))

    def loss_of() -> float:
        return float(dualtape.backpropagate_sequence(net, ids, labels,
                                                     loss="softmax_cross_entropy").loss)

    grads = dualtape.backpropagate_sequence(net, ids, labels, loss="softmax_cross_entropy").grads
    check_param_gradients(net, loss_of, [{k: np64(v).copy() for k, v in g.items()}
                                         for g in grads])
    for tape in ("full", 2):  # backward_sequence, the initial states' gradients too
        errors = dualtape.check_gradients(net, ids, tape=tape)
        assert "input" not in errors and f"layer 0 ({cell.__name__}) initial state" in errors


def test_ids_run_the_step_and_prediction_calls_and_train_only_their_columns(backend):
    net, (ids, rows) = cell_net(dualtape.LSTM), ids_and_rows()
    _, _, ys = net.forward_sequence(None, rows)
    _, y = net.predict_step(None, ids[0, ...])
    np.testing.assert_allclose(np64(y), np64(ys)[0], rtol=1e-14)
    _, one = net.predict_step(None, ids[0, 1])  # one example: one id
    np.testing.assert_allclose(np64(one), np64(ys)[0, 1], rtol=1e-14)
    _, last = net.predict_sequence(None, ids, outputs="last", chunk=4)
    np.testing.assert_allclose(np64(last), np64(ys)[-1], rtol=1e-14)
    before = np64(net.params[0]["W"]).copy()
    dualtape.train_recurrent(net, ids, dualtape.asarray(np.zeros((6, 4), np.int64)),
                             dualtape.SGD(0.1), loss="softmax_cross_entropy")
    changed = np.any(np64(net.params[0]["W"]) != before, axis=0)
    np.testing.assert_array_equal(changed, np.isin(np.arange(VOCAB), np64(ids)))


@pytest.mark.parametrize("ids, error, message", [
    (np.array([[0], [7]]), ValueError, r"^RecurrentNetwork: input sequence holds ids from 0 to 7, "
                                       r"but layer 0 LSTM\(7, 5\) takes ids in \[0, 7\)$"),
    (np.array([[-1], [3]]), ValueError, r"ids from -1 to 3, .*\[0, 7\)"),
    (np.zeros((2, 1, 7), np.int64), ValueError, r"input sequence must be integer ids of shape "
                                                r"\(time, batch\) or \(time,\)"),
], ids=["past-the-inputs", "negative", "one-hot-integers"])
def test_bad_ids_are_refused_in_one_line(backend, ids, error, message):
    with pytest.raises(error, match=message):
        cell_net(dualtape.LSTM).forward_sequence(None, dualtape.asarray(ids))


def test_ids_go_only_to_a_recurrent_first_layer_of_the_network(backend):
    dense_first = dualtape.RecurrentNetwork([dualtape.FullyConnected(VOCAB, 5, seed=1),
                                             dualtape.LSTM(5, 4, seed=2)])
    with pytest.raises(TypeError, match="input sequence must be floating point, got "):
        dense_first.forward_sequence(None, dualtape.asarray(np.zeros((2, 3), np.int64)))
    with pytest.raises(TypeError, match="floating point"):  # a lone layer takes its rows
        dualtape.LSTM(VOCAB, 5).forward_sequence(
            None, dualtape.asarray(np.zeros((2, 3), np.int64)))


def test_another_networks_tape_is_still_refused(backend):
    net, (ids, _) = cell_net(dualtape.LSTM), ids_and_rows()
    tape, _, ys = net.forward_sequence(None, ids)
    other = dualtape.RecurrentNetwork([dualtape.LSTM(5, 5, seed=1), dualtape.LSTM(5, 4),
                                       dualtape.FullyConnected(4, 3)])
    with pytest.raises(RuntimeError, match="this tape was made with other parameters"):
        other.backward_sequence(tape, None, ys)  # ids carry no width: the versions differ


# --- an Embedding fused into the recurrent layer after it --------------------------------------

@pytest.mark.parametrize("tape", ["full", 3])
@pytest.mark.parametrize("cell", CELLS, ids=lambda c: c.__name__)
def test_an_embedding_fused_into_the_next_layer_computes_what_its_rows_do(backend, cell, tape):
    embedding = dualtape.Embedding(VOCAB, 3, seed=4, dtype="float64")
    rest = [cell(3, 5, seed=1, dtype="float64"), dualtape.FullyConnected(5, 3, seed=2,
                                                                         dtype="float64")]
    net, unfused = dualtape.RecurrentNetwork([embedding, *rest]), dualtape.RecurrentNetwork(rest)
    ids, _ = ids_and_rows(steps=6, batch=4)  # 24 rows > 7 ids, 12 a segment of 3 steps
    t_ids, _, ys = net.forward_sequence(None, ids, tape=tape)
    rows = dualtape.asarray(np64(embedding.params["weight"])[to_numpy(ids)])
    t_rows, _, want = unfused.forward_sequence(None, rows, tape=tape)
    np.testing.assert_allclose(np64(ys), np64(want), rtol=1e-13, atol=1e-15)
    dys = dualtape.asarray(np.random.default_rng(3).normal(size=tuple(ys.shape)))
    grads, dstates, dxs = net.backward_sequence(t_ids, None, dys)
    g_rows, d_rows, dx_rows = unfused.backward_sequence(t_rows, None, dys)
    assert dxs is None
    assert_grads_close(grads[1:], g_rows)
    xp = dualtape.get_backend().xp
    summed = rows_by_id(xp, dualtape.asarray(to_numpy(ids).reshape(-1)),
                        dualtape.asarray(np64(dx_rows).reshape(24, 3)), VOCAB)
    assert_grads_close(grads[:1], [{"weight": summed}])
    for a, b in zip(dstates, d_rows, strict=True):
        np.testing.assert_allclose(np64(a), np64(b), rtol=1e-12, atol=1e-14)


def test_an_embedding_is_fused_only_where_it_has_fewer_ids_than_the_sequence_rows(backend):
    net = dualtape.RecurrentNetwork([dualtape.Embedding(VOCAB, 3, seed=4),
                                     dualtape.LSTM(3, 5, seed=1)])
    for steps, fused in [(1, False), (3, False), (4, True), (50, True)]:  # rows 2, 6, 8, 100
        tape, _, _ = net.forward_sequence(None, dualtape.asarray(np.zeros((steps, 2), np.int64)))
        assert isinstance(tape.tapes[1].xs, TableRows) == fused, steps
        fields = {f.path: f for f in dualtape.tape_report(net, seq_len=steps,
                                                          batch=2).layers[1].fields}
        if fused:  # the report follows the tape of its length; the weight is not counted
            assert fields["xs.ids"].shape == (steps, 2) and fields["xs.ids"].dtype == "int64"
            assert fields["xs.table"].shared_with == "parameters"
            assert fields["xs.table"].bytes == 0
        else:
            assert fields["xs"].shape == (steps, 2, 3) and fields["xs"].dtype == "float32"


def test_a_fused_embeddings_tape_is_refused_after_its_weight_changed(backend):
    embedding = dualtape.Embedding(VOCAB, 3, seed=4)
    net = dualtape.RecurrentNetwork([embedding, dualtape.LSTM(3, 5, seed=1)])
    ids, _ = ids_and_rows()
    tape, _, ys = net.forward_sequence(None, ids)
    assert isinstance(tape.tapes[1].xs, TableRows)  # fused
    embedding.params["weight"] = embedding.params["weight"] * 2
    with pytest.raises(RuntimeError, match=r"Embedding\(7, 3\): this tape was made with other "
                                           "parameters"):
        net.backward_sequence(tape, None, ys)


# --- the compiled row sums -------------------------------------------------------------------

def compiled_or_skip(dtype: str):
    loops = scatter_loops(np.zeros(1, dtype), check_compiled)
    if loops is None:
        pytest.skip("the compiled loops do not run here")
    return loops


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_compiled_row_sums_equal_numpys_to_rounding(dtype):
    loops = compiled_or_skip(dtype)
    assert loops is numba_scatter
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 57, 1600)
    rows = rng.normal(size=(1600, 320)).astype(dtype)
    got, want = loops.row_sums(ids, rows, 60), numpy_row_sums(ids, rows, 60)
    assert got.dtype == want.dtype and got.shape == (60, 320)
    assert not got[57:].any()
    bound = 1600 * np.finfo(dtype).eps * numpy_row_sums(ids, np.abs(rows), 60)
    assert (np.abs(got - want) <= bound).all()
    np.testing.assert_array_equal(loops.row_sums(ids[:0], rows[:0], 3), np.zeros((3, 320)))


@pytest.mark.parametrize("args, message", [
    ((np.array([0, 3]), np.zeros((2, 2)), 3), r"ids from 0 to 3 outside \[0, 3\)"),
    ((np.array([-1, 0]), np.zeros((2, 2)), 3), r"ids from -1 to 0 outside"),
    ((np.array([0, 1], np.int32), np.zeros((2, 2)), 3), "int64 ids and float32 or float64"),
    ((np.array([0, 1]), np.zeros((2, 2), np.int64), 3), "int64 ids and float32 or float64"),
    ((np.array([0, 1]), np.zeros(2), 3), r"ids \(2,\) and rows \(2,\)"),
    ((np.array([0, 1]), np.zeros((3, 2)), 3), r"ids \(2,\) and rows \(3, 2\)"),
], ids=["past-the-end", "negative", "int32", "integer-rows", "1-d-rows", "rows-mismatch"])
def test_the_compiled_row_sums_refuse_what_they_would_read_out_of_bounds(args, message):
    compiled_or_skip("float64")
    with pytest.raises(ValueError, match=message):
        numba_scatter.row_sums(*args)


def test_the_self_check_catches_a_planted_bug(monkeypatch):
    compiled_or_skip("float64")
    like = np.zeros(1)
    assert check_compiled(numba_scatter, like) is None
    right = numba_scatter.row_sums

    def last_row_dropped(ids, rows, vocab):
        return right(ids[:-1], rows[:-1], vocab)

    monkeypatch.setattr(numba_scatter, "row_sums", last_row_dropped)
    assert check_compiled(numba_scatter, like) == \
        "row sums by id differ from numpy's beyond rounding"
