"""Embedding: ids in, weight rows out; its scatter-add backward against finite differences and
against the generic row sums on every backend; networks that begin with it (feed-forward and
over sequences, full and checkpointed tapes); integer class labels in the cross entropies;
refusals; save/load and torch's nn.Embedding."""

from __future__ import annotations

import json

import numpy as np
import pytest

import dualtape
from dualtape.backend import dtype_name
from dualtape.gradcheck import numeric_gradient
from dualtape.kernels.scatter import numpy_row_sums, row_sums
from dualtape.layers.linear_algebra import generic_row_sums

from .conftest import np64
from .test_io import header_of, read_archive, rewrite

IDS = np.array([3, 0, 3, 5, 3, 1])  # repeats (3 three times), absent ids (2, 4, 6)
NO_TORCH = "torch is not installed: the nn.Embedding comparisons need it"


def embedding_net(dtype: str = "float64") -> dualtape.Network:
    return dualtape.Network([dualtape.Embedding(7, 4, seed=1, dtype=dtype),
                             dualtape.FullyConnected(4, 3, seed=2, dtype=dtype), dualtape.Tanh()])


def recurrent_embedding_net(dtype: str = "float64") -> dualtape.RecurrentNetwork:
    return dualtape.RecurrentNetwork([
        dualtape.Embedding(6, 3, seed=1, dtype=dtype), dualtape.LSTM(3, 4, seed=2, dtype=dtype),
        dualtape.FullyConnected(4, 6, seed=3, dtype=dtype)])


def check_param_gradients(net, loss_of, grads) -> None:
    """Each parameter's gradient in ``grads`` against central differences of ``loss_of()``:
    the training calls' gradients of a loss (``dualtape.check_gradients`` checks ``backward``
    of a random projection)."""
    for params, group in zip(net.params, grads, strict=True):
        for name, p in list(params.items()):
            host = np64(p).copy()

            def of_param(value: np.ndarray, params=params, name: str = name) -> float:
                params[name] = dualtape.asarray(value)
                return loss_of()

            expected = numeric_gradient(of_param, host)
            params[name] = dualtape.asarray(host)
            np.testing.assert_allclose(np64(group[name]), expected, rtol=1e-6, atol=1e-8)


# --- the layer ---------------------------------------------------------------------------------


def test_forward_gives_the_rows_of_the_ids(backend):
    layer = dualtape.Embedding(7, 4, seed=1, dtype="float64")
    weight = np64(layer.params["weight"])
    tape, y = layer.forward(dualtape.asarray(IDS))
    np.testing.assert_array_equal(np64(y), weight[IDS])
    np.testing.assert_array_equal(np64(tape.ids), IDS)
    assert tape.version == layer.params.version
    _, one = layer.forward(dualtape.asarray(np.int64(5)))
    np.testing.assert_array_equal(np64(one), weight[5])


def test_weights_are_torchs_normal_draws_from_the_seed_on_every_backend(backend):
    layer = dualtape.Embedding(50, 8, seed=4)
    expected = np.random.default_rng(4).standard_normal((50, 8)).astype(np.float32)
    np.testing.assert_array_equal(np64(layer.params["weight"]), expected)
    assert layer.dtype == "float32" and tuple(layer.params["weight"].shape) == (50, 8)


def test_backward_against_finite_differences(backend):
    layer = dualtape.Embedding(7, 4, seed=1, dtype="float64")
    tape, _ = layer.forward(dualtape.asarray(IDS))
    assert layer.backward(tape, dualtape.asarray(np.ones((6, 4))))[1] is None
    errors = dualtape.check_gradients(layer, IDS)  # ids have no gradient: the weight only
    assert list(errors) == ["parameter weight"]


def test_backward_sums_repeated_ids_and_zeros_the_rest(backend):
    layer = dualtape.Embedding(7, 2, seed=1, dtype="float64")
    tape, _ = layer.forward(dualtape.asarray(IDS))
    dy = np.arange(12.0).reshape(6, 2)
    grads, _ = layer.backward(tape, dualtape.asarray(dy))
    expected = np.zeros((7, 2))
    expected[3] = dy[0] + dy[2] + dy[4]
    expected[0], expected[5], expected[1] = dy[1], dy[3], dy[5]
    np.testing.assert_array_equal(np64(grads["weight"]), expected)


@pytest.mark.parametrize("case", ["repeats", "all-one-id", "every-id", "empty", "last-id"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_fast_row_sums_equal_the_generic_ones(backend, case, dtype):
    vocab, rng = 11, np.random.default_rng(1)
    ids = {"repeats": rng.integers(0, vocab, 300), "all-one-id": np.full(40, 4),
           "every-id": rng.permutation(np.arange(vocab).repeat(3)),
           "empty": np.zeros(0, np.int64), "last-id": np.array([vocab - 1, 0])}[case]
    rows = dualtape.asarray(rng.normal(size=(ids.shape[0], 5)).astype(dtype))
    xp = dualtape.get_backend().xp
    generic = generic_row_sums(xp, dualtape.asarray(ids.astype(np.int64)), rows, vocab)
    assert tuple(generic.shape) == (vocab, 5)
    fast = row_sums(dualtape.asarray(ids.astype(np.int64)), rows, vocab)
    if backend.name == "array_api_strict":
        assert fast is None  # no scatter in the standard: the generic code runs
        fast = numpy_row_sums(ids.astype(np.int64), np64(rows).astype(dtype), vocab)
    assert dtype_name(fast.dtype) == dtype_name(generic.dtype) == dtype
    assert tuple(fast.shape) == (vocab, 5)
    tol = 1e-5 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(np64(fast), np64(generic), rtol=tol, atol=tol)


def test_the_generic_code_runs_when_fast_paths_are_off(backend, monkeypatch):
    layer = dualtape.Embedding(7, 3, seed=1, dtype="float64")
    dy = dualtape.asarray(np.random.default_rng(2).normal(size=(6, 3)))
    tape, _ = layer.forward(dualtape.asarray(IDS))
    fast = np64(layer.backward(tape, dy)[0]["weight"])
    monkeypatch.setenv("DUALTAPE_FUSED", "0")
    assert row_sums(tape.ids, dy, 7) is None
    np.testing.assert_allclose(np64(layer.backward(tape, dy)[0]["weight"]), fast, rtol=1e-14)


def test_the_tape_keeps_its_own_ids_and_refuses_other_weights():
    layer = dualtape.Embedding(7, 3, seed=1, dtype="float64")
    ids = IDS.copy()
    tape, _ = layer.forward(ids)
    ids[:] = 0
    np.testing.assert_array_equal(tape.ids, IDS)
    layer.params["weight"] = np.zeros((7, 3))
    with pytest.raises(RuntimeError, match="made with other parameters"):
        layer.backward(tape, np.ones((6, 3)))


# --- networks that begin with it -------------------------------------------------------------


def test_a_network_of_ids_against_finite_differences(backend):
    net = embedding_net()
    ids, labels = dualtape.asarray(IDS), dualtape.asarray(np.array([0, 2, 1, 1, 0, 2]))

    def loss_of() -> float:
        return float(dualtape.backpropagate(net, ids, labels, loss="softmax_cross_entropy")[0])

    _, grads = dualtape.backpropagate(net, ids, labels, loss="softmax_cross_entropy")
    check_param_gradients(net, loss_of, grads)
    assert "input" not in dualtape.check_gradients(net, IDS)
    tapes, y = net.forward(ids)
    assert net.backward(tapes, y)[1] is None  # ids have no gradient
    _, one = net.forward(dualtape.asarray(np.int64(3)))
    np.testing.assert_allclose(np64(one), np64(y)[0], rtol=1e-14)


@pytest.mark.parametrize("tape", ["full", "sqrt", 2])
def test_a_recurrent_network_of_ids_against_finite_differences(backend, tape):
    rnet = recurrent_embedding_net()
    rng = np.random.default_rng(3)
    ids = dualtape.asarray(rng.integers(0, 6, (5, 2)))
    labels = dualtape.asarray(rng.integers(0, 6, (5, 2)))

    def loss_of() -> float:
        return float(dualtape.backpropagate_sequence(
            rnet, ids, labels, loss="softmax_cross_entropy", tape=tape).loss)

    found = dualtape.backpropagate_sequence(rnet, ids, labels, loss="softmax_cross_entropy",
                                            tape=tape)
    grads = [{k: np64(v).copy() for k, v in g.items()} for g in found.grads]
    if tape == "full":  # the training path's differences once; the tapes agree on it
        check_param_gradients(rnet, loss_of, grads)   # (test_checkpointing.py)
    else:
        full = dualtape.backpropagate_sequence(rnet, ids, labels, loss="softmax_cross_entropy")
        for mine, theirs in zip(grads, full.grads, strict=True):
            for k, v in theirs.items():
                np.testing.assert_allclose(mine[k], np64(v), rtol=1e-12, atol=1e-14)
    # backward_sequence itself, the initial state's gradient included; with several
    # checkpointed segments it once concatenated the segments' None input gradients
    errors = dualtape.check_gradients(rnet, np64(ids).astype(np.int64), tape=tape)
    assert "input" not in errors and "layer 1 (LSTM) initial state" in errors


def test_a_recurrent_network_of_ids_runs_every_public_call(backend):
    rnet = recurrent_embedding_net()
    ids = np.random.default_rng(4).integers(0, 6, (7, 3))
    tape, states, ys = rnet.forward_sequence(None, dualtape.asarray(ids))
    assert tuple(ys.shape) == (7, 3, 6)
    grads, dstates, dxs = rnet.backward_sequence(tape, None, ys)
    assert dxs is None and len(grads) == 3 and tuple(dstates[0].shape) == (3, 4)
    _, one = rnet.forward_sequence(None, dualtape.asarray(ids[:, 1]))[1:]
    np.testing.assert_allclose(np64(one), np64(ys)[:, 1], rtol=1e-12)
    state, y = rnet.predict_step(None, dualtape.asarray(ids[0]))
    np.testing.assert_allclose(np64(y), np64(ys)[0], rtol=1e-12)
    _, last = rnet.predict_sequence(None, dualtape.asarray(ids), outputs="last", chunk=3)
    np.testing.assert_allclose(np64(last), np64(ys)[-1], rtol=1e-12)
    before = np64(rnet.params[0]["weight"]).copy()
    loss, _ = dualtape.train_recurrent(rnet, dualtape.asarray(ids), dualtape.asarray(ids),
                                       dualtape.SGD(0.1), loss="softmax_cross_entropy")
    changed = np.any(np64(rnet.params[0]["weight"]) != before, axis=1)
    np.testing.assert_array_equal(changed, np.isin(np.arange(6), ids))  # only the rows used


# --- refusals --------------------------------------------------------------------------------


@pytest.mark.parametrize("ids, error, message", [
    (np.array([1.0, 2.0]), TypeError, r"must hold integer ids for layer 0 Embedding\(7, 4\), got "
                                      r"\S*float64; convert with ids.astype\(int\)"),
    (np.array([True, False]), TypeError, "must hold integer ids .* got \\S*bool"),
    (np.array([0, 7]), ValueError, r"holds ids from 0 to 7, but layer 0 Embedding\(7, 4\) takes "
                                   r"ids in \[0, 7\)"),
    (np.array([-1, 3]), ValueError, r"ids from -1 to 3, .*\[0, 7\)"),
    (np.array([6, 2**63 - 1], dtype=np.uint64), ValueError, r"\[0, 7\)"),
    (np.zeros((2, 2), np.int64), ValueError, r"integer ids of shape \(batch,\) or \(\) .* got "
                                             r"\(2, 2\)"),
    ("3", TypeError, "must be an array of integer ids"),
], ids=["float", "bool", "vocab", "negative", "uint64", "2-d", "string"])
def test_bad_ids_are_refused_in_one_line_naming_the_layer(backend, ids, error, message):
    net = embedding_net()
    given = dualtape.asarray(ids) if isinstance(ids, np.ndarray) else ids
    with pytest.raises(error, match=message) as info:
        net.forward(given)
    assert str(info.value).startswith("Network: ") and "\n" not in str(info.value)
    with pytest.raises(error, match=message.replace("layer 0 ", "")):
        net.layers[0].forward(given)


def test_bad_id_sequences_are_refused(backend):
    rnet = recurrent_embedding_net()
    with pytest.raises(ValueError, match=r"input sequence must be integer ids of shape \(time, "
                                         r"batch\) or \(time,\)"):
        rnet.forward_sequence(None, dualtape.asarray(np.zeros((2, 3, 6), np.int64)))
    with pytest.raises(ValueError, match=r"RecurrentNetwork: input sequence holds ids from 0 to "
                                         r"6"):
        dualtape.train_recurrent(rnet, dualtape.asarray(np.array([[0], [6]])),
                                 dualtape.asarray(np.array([[0], [1]])), dualtape.SGD(0.1),
                                 loss="softmax_cross_entropy")


def test_integer_input_elsewhere_keeps_todays_refusal(backend):
    net = dualtape.Network([dualtape.FullyConnected(3, 2, seed=1)])
    with pytest.raises(TypeError, match=r"input must be floating point, got \S*int64; integer "
                                        "and boolean arrays are rejected"):
        net.forward(dualtape.asarray(np.zeros((2, 3), np.int64)))


def test_an_embedding_goes_first_and_not_inside_a_composite():
    with pytest.raises(ValueError, match=r"layer 1 Embedding\(3, 4\) takes integer ids but layer "
                                         r"0 FullyConnected\(4, 3\) gives 3 features"):
        dualtape.Network([dualtape.FullyConnected(4, 3), dualtape.Embedding(3, 4)])
    for build in (lambda: dualtape.Merge(dualtape.Embedding(3, 4), dualtape.Trivial()),
                  lambda: dualtape.Network([[dualtape.Embedding(3, 4)]])):
        with pytest.raises(TypeError, match="takes integer ids; it goes first in a Network"):
            build()


@pytest.mark.parametrize("vocab, n", [(0, 4), (3, -1), (2.5, 4), (True, 4)])
def test_sizes_must_be_positive_integers(vocab, n):
    with pytest.raises(ValueError, match="Embedding: (vocab|n) must be a positive integer"):
        dualtape.Embedding(vocab, n)


# --- saving and torch ------------------------------------------------------------------------


def test_save_and_load_keep_an_embedding(tmp_path):
    for net, data in ((embedding_net(), IDS), (recurrent_embedding_net(), IDS[:, None] % 6)):
        dualtape.save(net, tmp_path / "net.npz")
        loaded = dualtape.load(tmp_path / "net.npz")
        assert repr(loaded) == repr(net)
        np.testing.assert_array_equal(loaded.params[0]["weight"], net.params[0]["weight"])
        if isinstance(net, dualtape.Network):
            np.testing.assert_array_equal(loaded.forward(data)[1], net.forward(data)[1])
        else:
            np.testing.assert_array_equal(loaded.forward_sequence(None, data)[2],
                                          net.forward_sequence(None, data)[2])


def test_a_file_declaring_a_huge_vocab_is_refused_unread(tmp_path):
    path = tmp_path / "net.npz"
    dualtape.save(embedding_net(), path)
    arrays = read_archive(path)
    header = header_of(arrays)
    header["layers"][0].update(config={"vocab": 10**12, "n": 4}, params={"weight": [10**12, 4]})
    rewrite(path, arrays, header)
    with pytest.raises(ValueError, match="more than this file's members can hold"):
        dualtape.load(path)
    header["layers"][0].update(config={"vocab": 10**30, "n": 4}, params={"weight": [10**30, 4]})
    rewrite(path, arrays, header)
    with pytest.raises(ValueError, match=str(path)):
        dualtape.load(path)
    header["layers"][0].update(config={"vocab": 0, "n": 4}, params={"weight": [0, 4]})
    rewrite(path, arrays, header)
    with pytest.raises(ValueError, match=r"layer 0's settings .* are invalid \(Embedding: vocab"):
        dualtape.load(path)
    assert json.dumps(header)  # the header the tests wrote is JSON


def test_torchs_embedding_round_trips(backend):
    torch = pytest.importorskip("torch", reason=NO_TORCH)
    module = torch.nn.Embedding(9, 5).double()
    [layer] = dualtape.from_torch({k: v.numpy() for k, v in module.state_dict().items()})
    assert repr(layer) == "Embedding(9, 5)" and layer.dtype == "float64"
    ids = np.array([8, 0, 8, 3])
    expected = module(torch.from_numpy(ids))
    tape, y = layer.forward(dualtape.asarray(ids))
    np.testing.assert_array_equal(np64(y), expected.detach().numpy())
    dy = np.random.default_rng(6).normal(size=(4, 5))
    expected.backward(torch.from_numpy(dy))
    grads, _ = layer.backward(tape, dualtape.asarray(dy))
    np.testing.assert_allclose(np64(grads["weight"]), module.weight.grad.numpy(), rtol=1e-14)
    twin = torch.nn.Embedding(9, 5).double()
    twin.load_state_dict({k: torch.from_numpy(v) for k, v in dualtape.to_torch(layer).items()})
    assert torch.equal(twin.weight, module.weight)
    assert set(dualtape.to_torch([layer])) == {"weight"}


def test_from_torch_refuses_an_embedding_weight_that_is_not_a_matrix():
    with pytest.raises(ValueError, match=r"nn.Embedding's weight is \(vocab, n\), got \(4,\)"):
        dualtape.from_torch({"weight": np.zeros(4, np.float32)})
    with pytest.raises(TypeError, match="weight holds int64 numbers"):
        dualtape.from_torch({"weight": np.zeros((4, 2), np.int64)})
