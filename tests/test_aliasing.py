"""What a public call returns, and what it was given, may be written to afterwards: that never
changes a tape. On numpy the returned arrays are read-only views (writing raises); on the
other backends they are copies. Inputs a tape keeps are copied at the public edge."""

from __future__ import annotations

import numpy as np
import pytest

import dualtape

from .conftest import np64

F64 = "float64"
RNG = np.random.default_rng(11)
ACTIVATIONS = ["Logit", "Tanh", "Relu", "Elu", "Softmax"]


def scribble(a) -> bool:
    """Overwrite ``a`` in place; False when the array refuses (read-only)."""
    try:
        a[...] = 0.25
    except ValueError:
        return False
    return True


def writable(backend) -> bool:
    """Whether arrays handed out on ``backend`` can be written: only numpy has read-only ones."""
    return backend.name != "numpy"


def assert_same(a, b) -> None:
    """Two results of ``backward`` (nested lists/dicts/tuples of arrays) are bit-identical."""
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for key in a:
            assert_same(a[key], b[key])
    elif isinstance(a, list | tuple):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            assert_same(x, y)
    else:
        np.testing.assert_array_equal(np64(a), np64(b))


def fresh(*shape):
    """A writable input on the selected backend (not a view of module data)."""
    return dualtape.asarray(RNG.normal(size=shape))


# --- feed-forward ----------------------------------------------------------------------------


@pytest.mark.parametrize("activation", ACTIVATIONS + ["FullyConnected"])
def test_writing_to_a_network_output_changes_no_gradient(backend, activation):
    last = (dualtape.FullyConnected(4, 4, seed=2, dtype=F64) if activation == "FullyConnected"
            else getattr(dualtape, activation)())
    net = dualtape.Network([dualtape.FullyConnected(3, 4, seed=1, dtype=F64), last])
    target = fresh(5, 4)
    tapes, y = net.forward(fresh(5, 3))
    dy = dualtape.asarray(np64(y) - np64(target))
    expected = net.backward(tapes, dy)
    if backend.name == "numpy":
        with pytest.raises(ValueError, match="read-only"):
            y -= target  # the pattern that gave wrong gradients: the output was the tape
    assert scribble(y) == writable(backend)
    assert_same(net.backward(tapes, dy), expected)


@pytest.mark.parametrize("single", [False, True], ids=["batch", "single"])
def test_refilling_the_input_before_backward_changes_no_gradient(backend, single):
    net = dualtape.Network([dualtape.FullyConnected(3, 4, seed=1, dtype=F64), dualtape.Tanh()])
    x = fresh(3) if single else fresh(5, 3)
    tapes, y = net.forward(x)
    dy = fresh(*y.shape)
    expected = net.backward(tapes, dy)
    assert scribble(x)  # the caller's own array stays writable
    assert_same(net.backward(tapes, dy), expected)


@pytest.mark.parametrize("name", ACTIVATIONS + ["FullyConnected"])
def test_a_layer_output_and_input_may_be_written_without_changing_its_tape(backend, name):
    layer = (dualtape.FullyConnected(3, 3, seed=1, dtype=F64) if name == "FullyConnected"
             else getattr(dualtape, name)())
    x = fresh(4, 3)
    tape, y = layer.forward(x)
    dy = fresh(4, 3)
    expected = layer.backward(tape, dy)
    assert scribble(y) == writable(backend)
    assert scribble(x)
    assert_same(layer.backward(tape, dy), expected)


def test_a_cast_input_is_not_copied_twice():
    # float32 input to a float64 layer is cast, which copies: no second copy is made.
    layer = dualtape.FullyConnected(3, 2, seed=1, dtype=F64)
    x = RNG.normal(size=(4, 3)).astype(np.float32)
    tape, _ = layer.forward(x)
    assert tape.x.dtype == np.float64 and not np.shares_memory(tape.x, x)
    same = RNG.normal(size=(4, 3))
    tape, _ = layer.forward(same)
    assert not np.shares_memory(tape.x, same)


# --- recurrent -------------------------------------------------------------------------------


def lstm_net(last=None) -> dualtape.RecurrentNetwork:
    layers = [dualtape.LSTM(3, 4, seed=1, dtype=F64), dualtape.LSTM(4, 2, seed=2, dtype=F64)]
    return dualtape.RecurrentNetwork(layers + ([last] if last is not None else []))


@pytest.mark.parametrize("last", [None, "Logit", "FullyConnected"])
def test_resetting_state_T_in_place_changes_no_gradient(backend, last):
    # Truncated BPTT resets the carried state in place; the tape must not see it.
    head = {None: None, "Logit": dualtape.Logit(),
            "FullyConnected": dualtape.FullyConnected(2, 2, seed=3, dtype=F64)}[last]
    rnet = lstm_net(head)
    xs = fresh(6, 2, 3)
    tape, state_T, ys = rnet.forward_sequence([fresh(2, 4), fresh(2, 2)], xs)
    dys, dstate_T = fresh(6, 2, 2), [fresh(2, 4), fresh(2, 2)]
    expected = rnet.backward_sequence(tape, dstate_T, dys)
    for s in state_T:
        assert scribble(s) == writable(backend)
    assert scribble(ys) == writable(backend)
    assert scribble(xs)
    assert_same(rnet.backward_sequence(tape, dstate_T, dys), expected)


def test_writing_to_the_state_given_to_forward_changes_no_gradient(backend):
    rnet = lstm_net()
    state = [fresh(2, 4), fresh(2, 2)]
    tape, _, ys = rnet.forward_sequence(state, fresh(5, 2, 3))
    dys = fresh(5, 2, 2)
    expected = rnet.backward_sequence(tape, None, dys)
    for s in state:
        assert scribble(s)
    assert_same(rnet.backward_sequence(tape, None, dys), expected)


@pytest.mark.parametrize("call", ["step", "sequence"])
def test_an_lstm_layer_hands_out_nothing_its_tape_holds(backend, call):
    layer = dualtape.LSTM(3, 4, seed=1, dtype=F64)
    state = fresh(2, 4)
    if call == "step":
        x, dy = fresh(2, 3), fresh(2, 4)
        tape, state_next, y = layer.forward(state, x)
        expected = layer.backward(tape, None, dy)
        again = lambda: layer.backward(tape, None, dy)  # noqa: E731
    else:
        x, dy = fresh(5, 2, 3), fresh(5, 2, 4)
        tape, state_next, y = layer.forward_sequence(state, x)
        expected = layer.backward_sequence(tape, None, dy)
        again = lambda: layer.backward_sequence(tape, None, dy)  # noqa: E731
    assert scribble(state_next) == writable(backend)
    assert scribble(y) == writable(backend)
    assert scribble(x) and scribble(state)
    assert_same(again(), expected)


def test_outputs_handed_out_on_numpy_are_views_not_copies():
    # The read-only guarantee costs no copy of the output on numpy.
    net = dualtape.Network([dualtape.FullyConnected(3, 4, seed=1, dtype=F64), dualtape.Tanh()])
    tapes, y = net.forward(RNG.normal(size=(5, 3)))
    assert np.shares_memory(y, tapes[-1].y) and not y.flags.writeable
