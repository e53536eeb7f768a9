"""RecurrentNetwork.predict_sequence on every backend: forward_sequence's outputs and states
without a tape, chunk by chunk, in memory that does not grow with T; and dualtape sample's use
of it."""

from __future__ import annotations

import numpy as np
import pytest

import dualtape
from dualtape import GRU, LSTM, FullyConnected, RecurrentNetwork, StandardLSTM, Tanh

from .conftest import np64
from .helpers import peak_bytes

F64 = "float64"
CLOSE = {"rtol": 1e-12, "atol": 1e-13}  # each chunk projects its own inputs: rounding only


def mixed_network() -> RecurrentNetwork:
    return RecurrentNetwork([LSTM(3, 4, seed=1, dtype=F64, init="scaled"),
                             StandardLSTM(4, 5, seed=2, dtype=F64), Tanh(),
                             GRU(5, 3, seed=3, dtype=F64), FullyConnected(3, 2, seed=4, dtype=F64)])


@pytest.mark.parametrize("chunk", [1, 3, 7, 100])
def test_it_gives_forward_sequences_outputs_and_states(backend, chunk):
    rng = np.random.default_rng(0)
    rnet = mixed_network()
    xs = dualtape.asarray(rng.normal(size=(7, 2, 3)))
    state = [dualtape.asarray(rng.normal(size=(2, layer.state_size)))
             for layer in rnet.recurrent_layers]
    given = [np64(s).copy() for s in state]
    _, expected_states, expected = rnet.forward_sequence(state, xs)
    states, ys = rnet.predict_sequence(state, xs, chunk=chunk)
    np.testing.assert_allclose(np64(ys), np64(expected), **CLOSE)
    for got, want in zip(states, expected_states, strict=True):
        np.testing.assert_allclose(np64(got), np64(want), **CLOSE)
    _, last = rnet.predict_sequence(state, xs, outputs="last", chunk=chunk)
    np.testing.assert_allclose(np64(last), np64(expected[-1, ...]), **CLOSE)
    for s, before in zip(state, given, strict=True):
        np.testing.assert_array_equal(np64(s), before)  # the state given is left alone


def test_a_single_sequence_keeps_its_form_and_the_outputs_are_read_only(backend):
    rnet = mixed_network()
    xs = dualtape.asarray(np.random.default_rng(1).normal(size=(5, 3)))
    states, ys = rnet.predict_sequence(None, xs, chunk=2)
    assert ys.shape == (5, 2) and [tuple(s.shape) for s in states] == [(4,), (10,), (3,)]
    _, last = rnet.predict_sequence(None, xs, outputs="last")
    assert last.shape == (2,)
    if backend.name == "numpy":  # elsewhere outputs are copies (see the aliasing contract)
        with pytest.raises(ValueError, match="read-only"):
            ys[0, 0] = 1.0


def test_memory_does_not_grow_with_the_sequence_for_the_last_output():
    """numpy's allocations (tracemalloc): the last output of 4,000 steps takes about what 400
    take, where forward_sequence's tape grows tenfold (the check can fail)."""
    rnet = RecurrentNetwork([StandardLSTM(8, 16, seed=1, dtype=F64),
                             FullyConnected(16, 8, seed=2, dtype=F64)])
    long, short = (np.random.default_rng(2).normal(size=(t, 2, 8)) for t in (4000, 400))
    predicted = [peak_bytes(lambda xs=xs: rnet.predict_sequence(None, xs, outputs="last",
                                                                 chunk=100))
                 for xs in (long, short)]
    taped = [peak_bytes(lambda xs=xs: rnet.forward_sequence(None, xs)) for xs in (long, short)]
    assert predicted[0] < 1.5 * predicted[1]
    assert taped[0] > 5 * taped[1] and taped[0] > 10 * predicted[0]


@pytest.mark.parametrize("outputs, chunk, match", [
    ("first", 10, "outputs must be 'all' or 'last'"), ("all", 0, "chunk must be a positive"),
    ("all", True, "chunk must be a positive"), ("last", 1.5, "chunk must be a positive")])
def test_bad_options_are_refused(outputs, chunk, match):
    with pytest.raises(ValueError, match=match):
        mixed_network().predict_sequence(None, np.zeros((3, 1, 3)), outputs=outputs,
                                         chunk=chunk)


def test_a_numpy_integer_chunk_is_taken():
    xs = np.random.default_rng(0).normal(size=(5, 1, 3))
    net = mixed_network()
    _, expected = net.predict_sequence(None, xs, chunk=2)
    _, ys = net.predict_sequence(None, xs, chunk=np.int64(2))
    np.testing.assert_array_equal(np.asarray(ys), np.asarray(expected))
    with pytest.raises(ValueError, match="chunk must be a positive"):
        net.predict_sequence(None, xs, chunk=np.bool_(True))


def test_an_empty_sequence_is_refused():
    with pytest.raises(ValueError, match="empty"):
        mixed_network().predict_sequence(None, np.zeros((0, 1, 3)))


def test_sampling_primes_the_network_without_a_tape(monkeypatch):
    from dualtape.text.model import Vocabulary, build_text_network, sample

    vocab = Vocabulary.build("the cat sat on the mat", 10)
    net = build_text_network(len(vocab), [6], seed=1, dtype=F64)
    calls = []
    taped = RecurrentNetwork.forward_sequence
    monkeypatch.setattr(RecurrentNetwork, "forward_sequence",
                        lambda *a, **k: calls.append("taped") or taped(*a, **k))
    predicted = RecurrentNetwork.predict_sequence
    monkeypatch.setattr(RecurrentNetwork, "predict_sequence",
                        lambda *a, **k: calls.append(k.get("outputs")) or predicted(*a, **k))
    text = sample(net, vocab, 20, rng=np.random.default_rng(3), prime="the ")
    assert calls == ["last"] and len(text) >= 20
