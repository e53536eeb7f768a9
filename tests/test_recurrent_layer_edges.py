"""A recurrent layer's own calls at their edges (``layers/base.py``'s ``RecurrentLayer``): single
examples against a batch of one, checkpointed tapes, copies of what a tape keeps, read-only
results, zeros on the layer's backend whatever is selected, each refusal naming its argument."""

from __future__ import annotations

import re

import numpy as np
import pytest

import dualtape
from dualtape import StandardLSTM
from dualtape.backend import backend_of
from dualtape.checkpointing import CheckpointedTape

from .conftest import np64
from .helpers import other_backend_array

SAME = {"rtol": 1e-12, "atol": 1e-13}
N_IN, N_OUT, STATE, T = 3, 4, 8, 5  # a StandardLSTM's state is (h, c): twice n_out


def lstm() -> StandardLSTM:
    return StandardLSTM(N_IN, N_OUT, seed=2, dtype="float64")


def draws(*shapes: tuple[int, ...]) -> list:
    rng = np.random.default_rng(7)
    return [dualtape.asarray(rng.normal(size=shape)) for shape in shapes]


def assert_same(a, b) -> None:
    np.testing.assert_allclose(np64(a), np64(b), **SAME)


def batch_of_one(a):
    """``a`` (a single example's array) with a batch axis of one before its last axis."""
    return dualtape.asarray(np64(a)[..., None, :])


def test_one_step_of_a_single_example_is_a_batch_of_one(backend):
    layer = lstm()
    x, state, dy, dnext = draws((N_IN,), (STATE,), (N_OUT,), (STATE,))
    tape, state_next, y = layer.forward(state, x)
    assert (tuple(state_next.shape), tuple(y.shape)) == ((STATE,), (N_OUT,))
    grads, dstate, dx = layer.backward(tape, dnext, dy)
    assert (tuple(dstate.shape), tuple(dx.shape)) == ((STATE,), (N_IN,))
    tape1, state_next1, y1 = layer.forward(batch_of_one(state), batch_of_one(x))
    grads1, dstate1, dx1 = layer.backward(tape1, batch_of_one(dnext), batch_of_one(dy))
    for a, b in [(state_next, np64(state_next1)[0]), (y, np64(y1)[0]),
                 (dstate, np64(dstate1)[0]), (dx, np64(dx1)[0])]:
        assert_same(a, b)
    for name in grads:
        assert_same(grads[name], grads1[name])
    for call in (layer.predict_step, layer.step):
        predicted_state, predicted = call(state, x)
        assert_same(predicted_state, state_next)
        assert_same(predicted, y)


@pytest.mark.parametrize("kept", ["full", "sqrt", 2])
def test_a_single_sequence_is_a_batch_of_one_with_every_tape(backend, kept):
    layer = lstm()
    xs, state, dys, dlast = draws((T, N_IN), (STATE,), (T, N_OUT), (STATE,))
    tape, last, ys = layer.forward_sequence(state, xs, tape=kept)
    assert (tuple(last.shape), tuple(ys.shape)) == ((STATE,), (T, N_OUT))
    grads, dstate0, dxs = layer.backward_sequence(tape, dlast, dys)
    assert (tuple(dstate0.shape), tuple(dxs.shape)) == ((STATE,), (T, N_IN))
    tape1, last1, ys1 = layer.forward_sequence(batch_of_one(state), batch_of_one(xs))
    grads1, dstate1, dxs1 = layer.backward_sequence(tape1, batch_of_one(dlast), batch_of_one(dys))
    for a, b in [(last, np64(last1)[0]), (ys, np64(ys1)[:, 0]), (dstate0, np64(dstate1)[0]),
                 (dxs, np64(dxs1)[:, 0])]:
        assert_same(a, b)
    for name in grads:
        assert_same(grads[name], grads1[name])


def test_a_given_state_is_used_and_none_is_zeros(backend):
    layer = lstm()
    xs, state, dys, dlast = draws((T, 2, N_IN), (2, STATE), (T, 2, N_OUT), (2, STATE))
    zeros = dualtape.asarray(np.zeros((2, STATE)))
    by_none = layer.forward_sequence(None, xs)
    by_zeros = layer.forward_sequence(zeros, xs)
    by_state = layer.forward_sequence(state, xs)
    assert_same(by_none[2], by_zeros[2])
    assert not np.allclose(np64(by_state[2]), np64(by_zeros[2]))
    _, none_back, _ = layer.backward_sequence(by_zeros[0], None, dys)
    _, zeros_back, _ = layer.backward_sequence(by_zeros[0], zeros, dys)
    _, given_back, _ = layer.backward_sequence(by_zeros[0], dlast, dys)
    assert_same(none_back, zeros_back)
    assert not np.allclose(np64(given_back), np64(zeros_back))
    step_tape, _, _ = layer.forward(None, xs[0, ...])
    _, step_none, _ = layer.backward(step_tape, None, dys[0, ...])
    _, step_zeros, _ = layer.backward(step_tape, zeros, dys[0, ...])
    assert_same(step_none, step_zeros)


@pytest.mark.parametrize("kept", ["full", 2])
def test_what_a_tape_keeps_is_copied_and_what_is_returned_is_read_only(backend, kept):
    layer = lstm()
    x, state, dy, xs, dys = draws((2, N_IN), (2, STATE), (2, N_OUT), (T, 2, N_IN),
                                  (T, 2, N_OUT))
    expected_step = layer.backward(layer.forward(state, x)[0], None, dy)
    expected_sequence = layer.backward_sequence(
        layer.forward_sequence(state, xs, tape=kept)[0], None, dys)
    step_tape, state_next, y = layer.forward(state, x)
    sequence_tape, last, ys = layer.forward_sequence(state, xs, tape=kept)
    for given in (x, state, xs):
        given[...] = 0.0
    for got, expected in [(layer.backward(step_tape, None, dy), expected_step),
                          (layer.backward_sequence(sequence_tape, None, dys), expected_sequence)]:
        for a, b in zip(got[1:], expected[1:], strict=True):
            assert_same(a, b)
        for name in got[0]:
            assert_same(got[0][name], expected[0][name])
    if backend.name == "numpy":
        assert not any(a.flags.writeable for a in (state_next, y, last, ys))


def test_zeros_are_made_on_the_layers_backend_whatever_is_selected(backend):
    layer = lstm()
    xs, dys = draws((T, 2, N_IN), (T, 2, N_OUT))
    assert tuple(layer.initial_state().shape) == (STATE,)
    assert tuple(layer.initial_state(3).shape) == (3, STATE)
    other = "array_api_strict" if backend.name == "numpy" else "numpy"
    with dualtape.use_backend(other):
        made = [layer.initial_state(), layer.initial_state(3)]
        tape, last, ys = layer.forward_sequence(None, xs)
        _, dstate0, _ = layer.backward_sequence(tape, None, dys)
        step_tape, state_next, _ = layer.forward(None, xs[0, ...])
        _, dstate, _ = layer.backward(step_tape, None, dys[0, ...])
    for a in [*made, last, ys, dstate0, state_next, dstate]:
        assert backend_of(a).name == backend.name
    for a in made:
        assert not np.any(np64(a))
    assert_same(ys, layer.forward_sequence(layer.initial_state(2), xs)[2])


def refusals(layer: StandardLSTM) -> dict:
    """Each bad call of ``layer``, by the words its message must hold."""
    x, xs, state, dy, dys = draws((2, N_IN), (T, 2, N_IN), (2, STATE), (2, N_OUT), (T, 2, N_OUT))
    step_tape = layer.forward(state, x)[0]
    tape = layer.forward_sequence(state, xs)[0]
    wrong = dualtape.asarray(np.zeros((2, 5)))
    other_tape = dualtape.FullyConnected(N_IN, N_OUT, seed=1, dtype="float64").forward(x)[0]
    return {
        "input must have shape (batch, 3) or (3,), got (2, 5)": lambda: layer.forward(None, wrong),
        "input sequence must have shape (time, batch, 3) or (time, 3), got (2, 5)":
            lambda: layer.forward_sequence(None, wrong),
        "state must have shape (2, 8)": lambda: layer.forward(wrong, x),
        "dy must have shape (2, 4)": lambda: layer.backward(step_tape, None, wrong),
        "dstate_next must have shape (2, 8)": lambda: layer.backward(step_tape, wrong, dy),
        "dys must have shape (5, 2, 4)": lambda: layer.backward_sequence(tape, None, wrong),
        "dstate_T must have shape (2, 8)": lambda: layer.backward_sequence(tape, wrong, dys),
        "batch must be a positive integer, got 0": lambda: layer.initial_state(0),
        "backward_sequence takes (tape, dstate_T, dys), got dstate_T of shape (5, 2, 4) and dys "
        "of shape (2, 8): the two look swapped":
            lambda: layer.backward_sequence(tape, dys, dualtape.asarray(np.ones((2, STATE)))),
        "the input sequence is empty (T = 0)":
            lambda: layer.forward_sequence(None, dualtape.asarray(np.zeros((0, 2, N_IN)))),
        "the tape is a FullyConnectedTape, not one of this layer":
            lambda: layer.backward_sequence(other_tape, None, dys),
        "the tape is a FullyConnectedTape": lambda: layer.backward(other_tape, None, dy),
    }


@pytest.mark.parametrize("words", list(refusals(lstm())))
def test_each_refusal_names_the_layer_and_its_argument(backend, words):
    layer = lstm()
    with pytest.raises(ValueError, match=rf"^{re.escape(repr(layer))}: .*{re.escape(words)}"):
        refusals(layer)[words]()


def test_an_input_of_the_other_float_dtype_is_cast_to_the_layers(backend):
    layer = StandardLSTM(N_IN, N_OUT, seed=2, dtype="float32")
    x, xs = draws((2, N_IN), (T, 2, N_IN))
    tape, state_next, y = layer.forward(None, x)
    _, last, ys = layer.forward_sequence(None, xs)
    assert {dualtape.backend.dtype_name(a.dtype) for a in (tape[0], state_next, y, last, ys)} \
        == {"float32"}


def test_an_input_from_another_backend_is_refused_naming_both(backend):
    layer = lstm()
    x, other = other_backend_array(backend, np.ones((2, N_IN)))
    xs, _ = other_backend_array(backend, np.ones((T, 2, N_IN)))
    for what, call in [("input", lambda: layer.forward(None, x)),
                       ("input sequence", lambda: layer.forward_sequence(None, xs))]:
        with pytest.raises(TypeError, match=rf"^{what} is a {other} array .* but "
                           rf"{re.escape(repr(layer))} lives on {backend.name} array"):
            call()


@pytest.mark.parametrize("kept, every", [("full", None), ("sqrt", 3), (2, 2)])
def test_a_checkpointed_tape_keeps_segments_of_the_length_asked(backend, kept, every):
    xs, = draws((T, 2, N_IN))  # sqrt: ceil(sqrt(T = 5)) = 3 steps, not ceil(sqrt(batch = 2))
    tape = lstm().forward_sequence(None, xs, tape=kept)[0]
    assert isinstance(tape, CheckpointedTape) == (every is not None)
    assert every is None or (tape.every, len(tape.states)) == (every, -(-T // every))


@pytest.mark.parametrize("kind", ["LSTM", "StandardLSTM", "GRU", "BasicRecurrent"])
@pytest.mark.parametrize("tape_kind", ["full", "sqrt"])
def test_a_tape_of_the_other_kind_is_named_not_the_gradients_shape(backend, kind, tape_kind):
    """A step's tape given to ``backward_sequence``, or a sequence's (full or checkpointed) to
    ``backward``, is refused by what it is, before a gradient's shape is blamed."""
    layer = getattr(dualtape, kind)(3, 4, seed=1)
    state = layer.initial_state(2)
    step_tape, _, _ = layer.forward(state, dualtape.asarray(np.zeros((2, 3), "float32")))
    sequence_tape, _, _ = layer.forward_sequence(
        state, dualtape.asarray(np.zeros((5, 2, 3), "float32")), tape=tape_kind)
    name = type(sequence_tape).__name__
    with pytest.raises(ValueError, match=re.escape(
            f"{layer!r}: backward_sequence takes the tape forward_sequence returned, got a "
            f"{kind}StepTape (use backward for it)")):
        layer.backward_sequence(step_tape, None, dualtape.asarray(np.zeros((5, 2, 4), "float32")))
    with pytest.raises(ValueError, match=re.escape(
            f"{layer!r}: backward takes the tape forward returned, got a {name} (use "
            "backward_sequence for it)")):
        layer.backward(sequence_tape, None, dualtape.asarray(np.zeros((2, 4), "float32")))
