"""dt.check_gradients: the recurrent cells and networks through forward_sequence and
backward_sequence (initial states included, full and checkpointed tapes) on every backend;
planted bugs in a backward pass found and named, with the worst entry's index; parameters put
back; central (not one-sided) differences; refusals. (Each feed-forward layer's own check is
in its test file: test_layers.py, test_convolution.py, ...)"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import pytest

import dualtape
from dualtape import GRU, LSTM, BasicRecurrent, FullyConnected, StandardLSTM
from dualtape.gradcheck import GradientCheckError, numeric_gradient, worst_entry
from dualtape.layers.basic_recurrent import BasicRecurrent as BasicRecurrentClass
from dualtape.layers.fully_connected import FullyConnected as FullyConnectedClass

F64 = "float64"
XS = np.random.default_rng(5).uniform(-1, 1, (4, 2, 2))  # (T, batch, n_in)


def small_cell(kind: type):
    layer = kind(2, 3, seed=11, dtype=F64)
    if kind is BasicRecurrent:  # Grenade's [-1, 1] weights, scaled to keep the states near 1
        layer.params["W"] = layer.params["W"] * 0.5
    return layer


@pytest.mark.parametrize("tape", ["full", 2], ids=["full", "checkpointed"])
@pytest.mark.parametrize("kind", [LSTM, StandardLSTM, GRU, BasicRecurrent],
                         ids=lambda k: k.__name__)
def test_every_recurrent_cell_over_a_sequence(backend, kind, tape):
    layer = small_cell(kind)
    errors = dualtape.check_gradients(layer, XS, tape=tape)
    assert {"input", "initial state"} <= set(errors)
    assert {f"parameter {k}" for k in layer.params} <= set(errors)


@pytest.mark.parametrize("tape", ["full", "sqrt"])
def test_a_recurrent_network_names_each_layer(backend, tape):
    rnet = dualtape.RecurrentNetwork([LSTM(2, 3, seed=1, dtype=F64), dualtape.Tanh(),
                                      GRU(3, 2, seed=2, dtype=F64),
                                      FullyConnected(2, 2, seed=3, dtype=F64)])
    errors = dualtape.check_gradients(rnet, XS, tape=tape)
    assert {"input", "layer 0 (LSTM) initial state", "layer 2 (GRU) initial state",
            "layer 0 (LSTM) parameter U", "layer 3 (FullyConnected) parameter b"} <= set(errors)
    assert max(errors.values()) < 1e-6


def test_a_given_initial_state_is_checked_there():
    layer = small_cell(GRU)
    at_zero = dualtape.check_gradients(layer, XS, state=np.zeros((2, 3)))
    assert set(at_zero) == set(dualtape.check_gradients(layer, XS))
    with pytest.raises(ValueError, match="one per recurrent layer"):
        dualtape.check_gradients(dualtape.RecurrentNetwork([layer]), XS, state=[None, None])


def test_parameters_are_put_back_as_they_were(backend):
    net = dualtape.Network([FullyConnected(3, 2, seed=1, dtype=F64), dualtape.Tanh()])
    before = {k: (v, dualtape.to_numpy(v).copy()) for k, v in net.params[0].items()}
    dualtape.check_gradients(net, np.ones((2, 3)))
    for k, (array, values) in before.items():
        assert net.params[0][k] is array
        np.testing.assert_array_equal(dualtape.to_numpy(array), values)


def _scaled_weight_gradient(monkeypatch, factor: float = 1.01, entry=None):
    """FullyConnected's backward with its ``W`` gradient scaled by ``factor`` (or one
    ``entry`` of it moved by 1e-3): a planted bug."""
    original = FullyConnectedClass._backward

    def planted(self, xp, tape, dy):
        grads, dx = original(self, xp, tape, dy)
        wrong = dualtape.to_numpy(grads["W"]).copy() * factor
        if entry is not None:
            wrong[entry] += 1e-3
        return {**grads, "W": dualtape.asarray(wrong)}, dx

    monkeypatch.setattr(FullyConnectedClass, "_backward", planted)


def test_a_planted_bug_in_a_weight_gradient_is_named(backend, monkeypatch):
    net = dualtape.Network([dualtape.Tanh(), FullyConnected(4, 3, seed=1, dtype=F64)])
    x = np.random.default_rng(0).normal(size=(2, 4))
    dualtape.check_gradients(net, x)  # passes before the bug is planted
    _scaled_weight_gradient(monkeypatch)
    with pytest.raises(GradientCheckError) as raised:
        dualtape.check_gradients(net, x)
    first = str(raised.value).splitlines()[0]
    assert first.startswith("check_gradients: Network: layer 1 (FullyConnected) parameter W: "
                            "worst at index (")
    assert "relative error" in first and "> rtol 1e-06" in first
    assert isinstance(raised.value, AssertionError)
    errors = raised.value.errors
    assert errors["layer 1 (FullyConnected) parameter W"] > 1e-3
    assert errors["layer 1 (FullyConnected) parameter b"] < 1e-6 and errors["input"] < 1e-6


def test_the_worst_entry_is_the_one_reported(monkeypatch):
    layer = FullyConnected(4, 3, seed=1, dtype=F64)
    _scaled_weight_gradient(monkeypatch, factor=1.0, entry=(2, 1))
    with pytest.raises(GradientCheckError, match=r"^check_gradients: FullyConnected\(4, 3\): "
                       r"parameter W: worst at index \(2, 1\): backward "):
        dualtape.check_gradients(layer, np.ones((2, 4)))


def test_a_planted_bug_in_an_initial_state_gradient_is_named(monkeypatch):
    original = BasicRecurrentClass._backward_sequence

    def planted(self, *args, **kwargs):
        grads, dstate, dxs = original(self, *args, **kwargs)
        return grads, None if dstate is None else dstate * 1.01, dxs

    monkeypatch.setattr(BasicRecurrentClass, "_backward_sequence", planted)
    rnet = dualtape.RecurrentNetwork([FullyConnected(2, 2, seed=1, dtype=F64),
                                      small_cell(BasicRecurrent)])
    with pytest.raises(GradientCheckError,
                       match=r"^check_gradients: RecurrentNetwork: layer 1 \(BasicRecurrent\) "
                       "initial state: worst at index"):
        dualtape.check_gradients(rnet, XS)


def test_every_failing_array_follows_the_worst_one(monkeypatch):
    _scaled_weight_gradient(monkeypatch, factor=1.5)
    net = dualtape.Network([FullyConnected(3, 3, seed=1, dtype=F64),
                            FullyConnected(3, 2, seed=2, dtype=F64)])
    with pytest.raises(GradientCheckError) as raised:
        dualtape.check_gradients(net, np.ones((2, 3)))
    lines = str(raised.value).splitlines()
    assert len(lines) == 2 and lines[1].startswith("  also layer ")
    errors = raised.value.errors
    worst = max(errors, key=errors.__getitem__)
    assert lines[0].startswith(f"check_gradients: Network: {worst}: ")


def test_a_tolerance_can_be_loosened(monkeypatch):
    _scaled_weight_gradient(monkeypatch, factor=1.0 + 1e-5)
    layer = FullyConnected(3, 2, seed=1, dtype=F64)
    with pytest.raises(GradientCheckError):
        dualtape.check_gradients(layer, np.ones((2, 3)))
    errors = dualtape.check_gradients(layer, np.ones((2, 3)), rtol=1e-3)
    assert 1e-6 < errors["parameter W"] < 1e-3


def test_the_differences_are_central():
    # of x**3 at 1 with step h, central: 3 + h**2; one-sided: 3 + 3h + h**2
    found = numeric_gradient(lambda v: float(np.sum(v**3)), np.array([1.0, 2.0]), eps=1e-3)
    np.testing.assert_allclose(found, [3 + 1e-6, 12 + 1e-6], rtol=1e-9)
    by_default = numeric_gradient(lambda v: float(np.sum(v**3)), np.array([1.0, 2.0]))
    np.testing.assert_allclose(by_default, [3, 12], rtol=1e-8)  # a step of 1e-6
    x = np.array([1.0, 2.0])
    numeric_gradient(lambda v: float(np.sum(v)), x)
    np.testing.assert_array_equal(x, [1.0, 2.0])  # each entry put back


def test_worst_entry_counts_nan_as_the_worst():
    expected = np.array([[1.0, 2.0], [3.0, 4.0]])
    assert worst_entry(expected, expected, 1e-6, 1e-8) == (0.0, (0, 0))
    found = expected + np.array([[0.0, 0.0], [1e-3, 0.0]])
    error, index = worst_entry(found, expected, 1e-6, 1e-8)
    assert index == (1, 0) and error == pytest.approx(1e-3 / (3 + 1e-2))
    found[0, 1] = np.nan
    assert worst_entry(found, expected, 1e-6, 1e-8) == (np.inf, (0, 1))


def test_refusals():
    check = dualtape.check_gradients
    with pytest.raises(ValueError, match="holds float32 parameters; finite differences need "
                       "float64"):
        check(FullyConnected(3, 2, seed=1), np.ones((2, 3)))
    with pytest.raises(ValueError, match="float32"):
        check(dualtape.Sequential([FullyConnected(3, 2, seed=1)]), np.ones((2, 3)))
    with pytest.raises(ValueError, match=r"takes a sequence of shape \(T, batch, n_in\)"):
        check(small_cell(GRU), np.ones((2, 2)))
    with pytest.raises(TypeError, match="must be floating point"):
        check(dualtape.Tanh(), np.ones((2, 3), dtype=int))
    with pytest.raises(TypeError, match="takes integer ids"):
        check(dualtape.Embedding(5, 2, dtype=F64), np.ones(3))
    with pytest.raises(TypeError, match="expected a layer, Network or RecurrentNetwork"):
        check(lambda x: x, np.ones(3))
    with pytest.raises(ValueError, match="NaN or inf"):
        check(dualtape.Tanh(), np.array([[np.nan]]))
    with pytest.raises(ValueError, match="empty"):
        check(dualtape.Tanh(), np.ones((0, 3)))
    for bad in ({"rtol": 0}, {"eps": -1.0}, {"atol": -1.0}, {"rtol": float("nan")}):
        with pytest.raises(ValueError, match="must be a finite number"):
            check(dualtape.Tanh(), np.ones((2, 3)), **bad)


def test_gradients_of_the_wrong_keys_are_refused(monkeypatch):
    monkeypatch.setattr(FullyConnectedClass, "_backward",
                        lambda self, xp, tape, dy: ({"W": tape.x[:0]}, tape.x))
    with pytest.raises(GradientCheckError, match=r"gradients have keys \['W'\], the "
                       r"parameters \['W', 'b'\]"):
        dualtape.check_gradients(FullyConnected(3, 3, seed=1, dtype=F64), np.ones((2, 3)))


@pytest.mark.parametrize("make, x", [
    (lambda: dualtape.Dropout(0.5, seed=1), np.ones((4, 3))),
    (lambda: dualtape.Network([FullyConnected(3, 3, seed=1, dtype=F64),
                               dualtape.Dropout(0.5, seed=1)]), np.ones((4, 3))),
    (lambda: dualtape.RecurrentNetwork([LSTM(2, 3, seed=1, dtype=F64),
                                        dualtape.Dropout(0.5, seed=1)]), XS),
], ids=["layer", "network", "recurrent-network"])
def test_a_dropout_while_training_is_named_not_checked(backend, make, x):
    model = make()
    with pytest.raises(ValueError, match=r"^check_gradients: .*two forward passes on the same "
                       r"input gave different outputs, so finite differences cannot check them; "
                       r"Dropout\(0.5, 1\) draws a new mask each pass while training: check "
                       r"with training off") as info:
        dualtape.check_gradients(model, x)
    assert "\n" not in str(info.value)
    for leaf in model.leaves():
        leaf.training = False
    assert max(dualtape.check_gradients(model, x).values()) < 1e-6


class JitteringTanh(dualtape.Tanh):
    """tanh scaled by a random factor near 1, drawn each forward pass."""

    def __init__(self) -> None:
        super().__init__()
        self.rng = np.random.default_rng(0)

    def activate(self, xp, x):
        return xp.tanh(x) * (1 + 1e-3 * float(self.rng.random()))


def test_any_layer_that_draws_at_random_is_refused(backend):
    with pytest.raises(ValueError, match=r"^check_gradients: Tanh\(\): two forward passes on the "
                       r"same input gave different outputs.*; a layer draws at random each "
                       r"pass: fix its draws to check it$"):
        dualtape.check_gradients(JitteringTanh(), np.ones((2, 3)))


class SquareCellTape(NamedTuple):
    states: Any


class SquareCell(dualtape.layers.RecurrentLayer):
    """``state' = y = a state² / 2 + x``, its state gradient scaled by ``factor``: a planted bug
    (``factor != 1``) that is zero, so unseen, at a zero state."""

    kind = "SquareCell"

    def __init__(self, n: int, factor: float = 1.0) -> None:
        super().__init__()
        self.n_in = self.n_out = self.state_size = n
        self.params = {"a": dualtape.asarray(np.full(n, 0.7), dtype=F64)}
        self.factor = factor

    def _forward_sequence(self, xp, state, xs):
        states = [state]
        for t in range(xs.shape[0]):
            states.append(0.5 * self.params["a"] * states[-1] ** 2 + xs[t, ...])
        return SquareCellTape(xp.stack(states)), states[-1], xp.stack(states[1:])

    def _backward_sequence(self, xp, tape, dstate, dys, need_dxs=True, grads_out=None,
                           need_dstate=True):
        da, dxs = 0, []
        for t in reversed(range(dys.shape[0])):
            d, state = dys[t, ...] + dstate, tape.states[t, ...]
            da = da + xp.sum(0.5 * d * state ** 2, axis=0)
            dstate = self.factor * d * self.params["a"] * state
            dxs.insert(0, d)
        return {"a": da}, dstate, xp.stack(dxs)


def test_the_given_state_is_the_point_checked(backend):
    """One step from the state given: a bug in the state's gradient that vanishes at zero is
    found at ones, and entries given as None are zeros."""
    xs = np.random.default_rng(1).normal(size=(1, 2, 3))
    buggy = dualtape.RecurrentNetwork([SquareCell(3, factor=1.5)])
    dualtape.check_gradients(buggy, xs, state=[np.zeros((2, 3))])
    dualtape.check_gradients(buggy, xs, state=[None])
    with pytest.raises(GradientCheckError, match=r"layer 0 \(SquareCell\) initial state: worst"):
        dualtape.check_gradients(buggy, xs, state=[np.ones((2, 3))])


@pytest.mark.parametrize("sequence", [False, True], ids=["batch", "sequence"])
def test_a_model_off_the_current_backend_is_checked_where_it_lives(backend, sequence):
    """Every input, perturbation and output gradient goes to the model's backend, whichever is
    current; the batch is not the features (shapes (T, 3, 2))."""
    model = (dualtape.RecurrentNetwork([LSTM(2, 3, seed=1, dtype=F64)]) if sequence else
             dualtape.Network([FullyConnected(2, 3, seed=1, dtype=F64), dualtape.Tanh()]))
    x = np.random.default_rng(2).uniform(-1, 1, (2, 3, 2) if sequence else (3, 2))
    with dualtape.use_backend("numpy"):
        errors = dualtape.check_gradients(model, x)
    assert max(errors.values()) < 1e-6 and "input" in errors


class GradientForIds(dualtape.Embedding):
    """A planted bug: an embedding whose backward gives its integer ids a gradient."""

    def _backward(self, xp, tape, dy):
        return super()._backward(xp, tape, dy)[0], xp.ones_like(dy)


def test_integer_ids_are_checked_for_their_parameters_only(backend):
    ids = np.array([[1, 4], [0, 1]])
    errors = dualtape.check_gradients(dualtape.Embedding(5, 3, dtype=F64, seed=1), ids[0])
    assert list(errors) == ["parameter weight"] and errors["parameter weight"] < 1e-6
    rnet = dualtape.RecurrentNetwork([dualtape.Embedding(5, 3, dtype=F64, seed=1),
                                      LSTM(3, 2, seed=2, dtype=F64)])
    errors = dualtape.check_gradients(rnet, ids)
    assert "input" not in errors and max(errors.values()) < 1e-6
    with pytest.raises(GradientCheckError, match=r"^check_gradients: Embedding\(5, 3\): "
                       r"backward gave an input gradient for integer ids \(expected None\)$"):
        dualtape.check_gradients(GradientForIds(5, 3, dtype=F64, seed=1), ids[0])


def test_the_tape_policy_given_is_the_one_run(backend, monkeypatch):
    original = dualtape.RecurrentNetwork.forward_sequence
    policies = []

    def spy(self, state, xs, *, tape="full"):
        policies.append(tape)
        return original(self, state, xs, tape=tape)

    monkeypatch.setattr(dualtape.RecurrentNetwork, "forward_sequence", spy)
    dualtape.check_gradients(dualtape.RecurrentNetwork([small_cell(GRU)]), XS, tape=2)
    assert policies and set(policies) == {2}


def test_an_input_gradient_for_a_sequence_of_ids_is_named(backend, monkeypatch):
    original = dualtape.RecurrentNetwork.backward_sequence

    def planted(self, *args, **kwargs):  # a planted bug: an input gradient for the ids
        grads, dstates, _ = original(self, *args, **kwargs)
        return grads, dstates, dstates[0]

    monkeypatch.setattr(dualtape.RecurrentNetwork, "backward_sequence", planted)
    rnet = dualtape.RecurrentNetwork([dualtape.Embedding(5, 3, dtype=F64, seed=1),
                                      LSTM(3, 2, seed=2, dtype=F64)])
    with pytest.raises(GradientCheckError, match=r"^check_gradients: .*: backward_sequence gave "
                       r"an input gradient for integer ids \(expected None\)$"):
        dualtape.check_gradients(rnet, np.array([[1, 4], [0, 1]]))


def test_worst_entry_of_one_entry_and_of_none():
    worst, index = worst_entry(np.array([2.0]), np.array([1.0]), 1e-6, 1e-8)
    assert worst > 0.99 and index == (0,)
    assert worst_entry(np.zeros((0, 3)), np.zeros((0, 3)), 1e-6, 1e-8) == (0.0, ())


@pytest.mark.parametrize(("options", "message"), [
    ({"rtol": 0}, "rtol must be a finite number > 0, got 0"),
    ({"eps": -1.0}, "eps must be a finite number > 0, got -1.0"),
    ({"atol": -1.0}, "atol must be a finite number >= 0, got -1.0"),
    ({}, "expected a layer, Network or RecurrentNetwork, got a function")])
def test_each_refused_setting_is_named_in_one_line(options, message):
    model = (lambda x: x) if not options else dualtape.Tanh()
    with pytest.raises((TypeError, ValueError)) as info:
        dualtape.check_gradients(model, np.ones((2, 3)), **options)
    assert str(info.value) == f"check_gradients: {message}"
    assert dualtape.check_gradients(dualtape.Tanh(), np.full((2, 3), 0.3), atol=0) == {
        "input": pytest.approx(0, abs=1e-6)}
