"""The LSTM layer against an autograd reference of Grenade's equations, on every backend."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dualtape
from dualtape.backend import backend_of, use_backend
from dualtape.layers.lstm import LSTMSequenceTape, LSTMStepTape

from . import lstm_reference as ref
from .conftest import counting_transcendentals, np64
from .helpers import other_backend_array

RTOL, ATOL = 1e-8, 1e-10  # float64 against autograd: only rounding differs
SAME = {"rtol": 1e-11, "atol": 1e-12}  # the same arithmetic in another order


def close(actual, expected, **tolerance):
    tolerance = tolerance or {"rtol": RTOL, "atol": ATOL}
    np.testing.assert_allclose(np64(actual), expected, **tolerance)


def close_to_reference(grads, dstate, dx, expected, dstate_expected, dx_expected) -> None:
    """Weight, state and input gradients all match the autograd reference."""
    for name in ("W", "U", "b"):
        close(grads[name], expected[name])
    close(dstate, dstate_expected)
    close(dx, dx_expected)


def lstm_like(problem: dict[str, np.ndarray]) -> dualtape.LSTM:
    """A float64 LSTM on the current backend holding the problem's reference weights."""
    n_out, n_in = problem["W"].shape[0] // 4, problem["W"].shape[1]
    layer = dualtape.LSTM(n_in, n_out, seed=0, dtype="float64")
    for name in ("W", "U", "b"):
        layer.params[name] = dualtape.asarray(problem[name])
    return layer


def on_backend(a: np.ndarray):
    return dualtape.asarray(a)


# form: (batch, whether the single-example form without a batch axis is used)
FORMS = [
    pytest.param((1, True), id="single"),
    pytest.param((1, False), id="batch1"),
    pytest.param((3, False), id="batch3"),
]


@pytest.mark.parametrize("form", FORMS)
def test_step_forward_and_backward_match_autograd(backend, form):
    batch, single = form
    p = ref.random_problem(np.random.default_rng(1), n_in=3, n_out=4, steps=1, batch=batch)
    layer = lstm_like(p)
    expected = ref.trace(p["W"], p["U"], p["b"], p["xs"], p["c0"])
    grads = ref.gradients(**p)
    pick = (lambda a: a[0]) if single else (lambda a: a)  # drop the batch axis of 1

    tape, c_next, h = layer.forward(on_backend(pick(p["c0"])), on_backend(pick(p["xs"][0])))
    assert tuple(h.shape) == tuple(c_next.shape) == ((4,) if single else (batch, 4))
    close(h, pick(expected.hs[0]))
    close(c_next, pick(expected.cells[1]))

    got, dc, dx = layer.backward(
        tape, on_backend(pick(p["dc_last"])), on_backend(pick(p["dhs"][0]))
    )
    assert set(got) == {"W", "U", "b"}
    close_to_reference(got, dc, dx, grads, pick(grads["c0"]), pick(grads["xs"][0]))


@pytest.mark.parametrize("form", FORMS)
def test_sequence_forward_and_backward_match_autograd(backend, form):
    batch, single = form
    p = ref.random_problem(np.random.default_rng(2), n_in=3, n_out=4, steps=5, batch=batch)
    layer = lstm_like(p)
    expected = ref.trace(p["W"], p["U"], p["b"], p["xs"], p["c0"])
    grads = ref.gradients(**p)
    pick = (lambda a: a[..., 0, :]) if single else (lambda a: a)

    tape, c_last, hs = layer.forward_sequence(on_backend(pick(p["c0"])), on_backend(pick(p["xs"])))
    assert tuple(hs.shape) == ((5, 4) if single else (5, batch, 4))
    close(hs, pick(expected.hs))
    close(c_last, pick(expected.cells[-1]))

    got, dc0, dxs = layer.backward_sequence(
        tape, on_backend(pick(p["dc_last"])), on_backend(pick(p["dhs"]))
    )
    close_to_reference(got, dc0, dxs, grads, pick(grads["c0"]), pick(grads["xs"]))


def test_backward_sequence_without_state_gradient_means_zeros(backend):
    p = ref.random_problem(np.random.default_rng(3), n_in=2, n_out=3, steps=4, batch=2)
    p["dc_last"] = np.zeros_like(p["dc_last"])
    layer = lstm_like(p)
    tape, _, _ = layer.forward_sequence(on_backend(p["c0"]), on_backend(p["xs"]))
    got, dc0, dxs = layer.backward_sequence(tape, None, on_backend(p["dhs"]))
    grads = ref.gradients(**p)
    close_to_reference(got, dc0, dxs, grads, grads["c0"], grads["xs"])


def test_forward_sequence_equals_stepwise_forward(backend):
    p = ref.random_problem(np.random.default_rng(4), n_in=3, n_out=4, steps=6, batch=2)
    layer = lstm_like(p)
    xs = on_backend(p["xs"])
    tape, c_last, hs = layer.forward_sequence(on_backend(p["c0"]), xs)

    c = on_backend(p["c0"])
    for t in range(6):
        step_tape, c, h = layer.forward(c, xs[t, ...])
        close(hs[t, ...], np64(h), **SAME)
        close(tape.cells[t + 1, ...], np64(step_tape.c_next), **SAME)
        close(tape.cells[t, ...], np64(step_tape.c), **SAME)
        close(tape.gates[t, ...], np64(step_tape.gates), **SAME)
    close(c_last, np64(c), **SAME)


def test_backward_sequence_equals_stepwise_bptt(backend):
    p = ref.random_problem(np.random.default_rng(5), n_in=3, n_out=4, steps=6, batch=2)
    layer = lstm_like(p)
    xs, dhs = on_backend(p["xs"]), on_backend(p["dhs"])
    tape, _, _ = layer.forward_sequence(on_backend(p["c0"]), xs)
    grads, dc0, dxs = layer.backward_sequence(tape, on_backend(p["dc_last"]), dhs)

    c, tapes = on_backend(p["c0"]), []
    for t in range(6):
        step_tape, c, _ = layer.forward(c, xs[t, ...])
        tapes.append(step_tape)
    dc = on_backend(p["dc_last"])
    total = {name: np.zeros(w.shape) for name, w in layer.params.items()}
    dx_steps = [None] * 6
    for t in reversed(range(6)):
        step_grads, dc, dx = layer.backward(tapes[t], dc, dhs[t, ...])
        for name in total:
            total[name] += np64(step_grads[name])
        dx_steps[t] = np64(dx)
    for name in total:
        close(grads[name], total[name], **SAME)
    close(dc0, np64(dc), **SAME)
    close(dxs, np.stack(dx_steps), **SAME)


def test_sequence_tape_holds_the_documented_fields_and_post_activation_gates(backend):
    p = ref.random_problem(np.random.default_rng(6), n_in=3, n_out=4, steps=5, batch=2)
    layer = lstm_like(p)
    tape, _, _ = layer.forward_sequence(on_backend(p["c0"]), on_backend(p["xs"]))
    expected = ref.trace(p["W"], p["U"], p["b"], p["xs"], p["c0"])

    assert isinstance(tape, LSTMSequenceTape)
    assert tape._fields == ("xs", "cells", "gates", "version")
    assert tape.version == layer.params.version
    assert tuple(tape.xs.shape) == (5, 2, 3)
    assert tuple(tape.cells.shape) == (6, 2, 4)  # c_0 ... c_T
    assert tuple(tape.gates.shape) == (5, 2, 16)  # 5·o numbers per step and example with cells
    close(tape.xs, p["xs"])
    close(tape.cells, expected.cells)
    close(tape.gates, expected.gates)
    gates = np64(tape.gates)
    assert np.all((gates[..., :12] > 0) & (gates[..., :12] < 1)), "σ(f), σ(i), σ(o) in (0, 1)"
    assert np.all(np.abs(gates[..., 12:]) < 1), "tanh(ĉ) in (-1, 1)"


def test_step_tape_holds_the_documented_fields_and_post_activation_gates(backend):
    p = ref.random_problem(np.random.default_rng(7), n_in=3, n_out=4, steps=1, batch=2)
    layer = lstm_like(p)
    tape, _, _ = layer.forward(on_backend(p["c0"]), on_backend(p["xs"][0]))
    expected = ref.trace(p["W"], p["U"], p["b"], p["xs"], p["c0"])

    assert isinstance(tape, LSTMStepTape)
    assert tape._fields == ("x", "c", "gates", "c_next", "version")
    assert tape.version == layer.params.version
    close(tape.x, p["xs"][0])
    close(tape.c, p["c0"])
    close(tape.gates, expected.gates[0])
    close(tape.c_next, expected.cells[1])
    gates = np64(tape.gates)
    assert np.all((gates[:, :12] > 0) & (gates[:, :12] < 1))
    assert np.all(np.abs(gates[:, 12:]) < 1)


def test_backward_sequence_evaluates_no_transcendental_function(backend, monkeypatch):
    if backend.name == "cupy":
        # a fused GPU kernel cannot be counted from here; check the code it is tested against
        monkeypatch.setenv("DUALTAPE_FUSED", "0")
    p = ref.random_problem(np.random.default_rng(8), n_in=3, n_out=4, steps=5, batch=2)
    layer = lstm_like(p)
    xs, c0 = on_backend(p["xs"]), on_backend(p["c0"])
    dc, dhs = on_backend(p["dc_last"]), on_backend(p["dhs"])

    with counting_transcendentals(backend.xp) as forward_counter:
        tape, _, _ = layer._forward_sequence(forward_counter, c0, xs)
    assert forward_counter.calls["tanh"] > 0, "the counter sees the forward pass's tanh calls"

    with counting_transcendentals(backend.xp) as counter:
        grads, dc0, dxs = layer._backward_sequence(counter, tape, dc, dhs)
    assert counter.total == 0, f"backward evaluated {counter.calls}"
    expected = ref.gradients(**p)
    close_to_reference(grads, dc0, dxs, expected, expected["c0"], expected["xs"])


def test_backward_step_evaluates_no_transcendental_function(backend):
    p = ref.random_problem(np.random.default_rng(9), n_in=3, n_out=4, steps=1, batch=2)
    layer = lstm_like(p)
    with counting_transcendentals(backend.xp) as forward_counter:
        tape, _, _ = layer._forward_step(
            forward_counter, on_backend(p["c0"]), on_backend(p["xs"][0])
        )
    assert forward_counter.calls["tanh"] > 0

    with counting_transcendentals(backend.xp) as counter:
        grads, dc, dx = layer._backward_step(
            counter, tape, on_backend(p["dc_last"]), on_backend(p["dhs"][0])
        )
    assert counter.total == 0, f"backward evaluated {counter.calls}"
    expected = ref.gradients(**p)
    close_to_reference(grads, dc, dx, expected, expected["c0"], expected["xs"][0])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_initialisation_is_grenades_and_identical_on_every_backend(backend, dtype):
    layer = dualtape.LSTM(3, 4, seed=11, dtype=dtype)
    shapes = {name: tuple(p.shape) for name, p in layer.params.items()}
    assert shapes == {"W": (16, 3), "U": (12, 4), "b": (16,)}
    for p in layer.params.values():
        where = backend_of(p)
        assert (where.name, where.device) == (backend.name, backend.device)
        assert str(p.dtype).endswith(dtype)
    host = {name: dualtape.to_numpy(p) for name, p in layer.params.items()}
    assert np.all(host["b"][:4] == 1.0), "forget bias is exactly 1"
    assert not np.all(host["b"][4:] == 1.0)
    for name, a in host.items():
        assert np.all((a >= -1.0) & (a <= 1.0)), name
    assert np.std(host["W"]) > 0.3, "spread over [-1, 1], not a constant"

    with use_backend("numpy"):
        on_numpy = dualtape.LSTM(3, 4, seed=11, dtype=dtype)
        other_seed = dualtape.LSTM(3, 4, seed=12, dtype=dtype)
    for name, a in host.items():
        assert a.dtype == on_numpy.params[name].dtype
        assert np.array_equal(a, on_numpy.params[name]), f"{name} differs from numpy's"
    assert not np.array_equal(host["W"], other_seed.params["W"])


def test_initial_state_is_zeros_on_the_layers_backend(backend):
    layer = dualtape.LSTM(2, 3, seed=0, dtype="float64")
    single, batched = layer.initial_state(), layer.initial_state(4)
    assert tuple(single.shape) == (3,) and tuple(batched.shape) == (4, 3)
    for s in (single, batched):
        assert backend_of(s).name == backend.name and backend_of(s).device == backend.device
        assert not np.any(np64(s))


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    n_in=st.integers(1, 4),
    n_out=st.integers(1, 4),
    steps=st.integers(1, 4),
    batch=st.one_of(st.none(), st.integers(1, 3)),
    seed=st.integers(0, 2**16),
)
def test_shapes_of_every_output_for_any_sizes(backend, n_in, n_out, steps, batch, seed):
    layer = dualtape.LSTM(n_in, n_out, seed=seed, dtype="float64")
    lead = () if batch is None else (batch,)
    rng = np.random.default_rng(seed)
    xs = on_backend(rng.normal(size=(steps, *lead, n_in)))
    state = layer.initial_state(batch)

    tape, state_last, ys = layer.forward_sequence(state, xs)
    assert tuple(ys.shape) == (steps, *lead, n_out)
    assert tuple(state_last.shape) == (*lead, n_out)
    b = batch or 1
    assert tuple(tape.cells.shape) == (steps + 1, b, n_out)
    assert tuple(tape.gates.shape) == (steps, b, 4 * n_out)
    grads, dstate, dxs = layer.backward_sequence(tape, state_last, ys)
    assert {k: tuple(g.shape) for k, g in grads.items()} == {
        k: tuple(p.shape) for k, p in layer.params.items()
    }
    assert tuple(dstate.shape) == (*lead, n_out)
    assert tuple(dxs.shape) == (steps, *lead, n_in)
    assert np.all(np.isfinite(np64(dxs)))

    step_tape, state_next, y = layer.forward(state, xs[0, ...])
    assert tuple(y.shape) == tuple(state_next.shape) == (*lead, n_out)
    step_grads, dstate, dx = layer.backward(step_tape, None, y)
    assert tuple(dx.shape) == (*lead, n_in) and tuple(dstate.shape) == (*lead, n_out)
    assert tuple(step_grads["W"].shape) == (4 * n_out, n_in)


# ---- bad input --------------------------------------------------------------------------------




@pytest.fixture
def layer(backend):
    return dualtape.LSTM(3, 4, seed=0, dtype="float64")


@pytest.mark.parametrize(
    ("shape", "expected"),
    [((5, 2, 3, 1), "(time, batch, 3) or (time, 3), got (5, 2, 3, 1)"),
     ((3,), "(time, batch, 3) or (time, 3), got (3,)"),
     ((5, 2, 7), "(time, batch, 3) or (time, 3), got (5, 2, 7)")],
    ids=["rank4", "rank1", "features"],
)
def test_sequence_of_wrong_rank_or_features_is_rejected(layer, shape, expected):
    with pytest.raises(ValueError, match=r"input sequence must have shape") as info:
        layer.forward_sequence(layer.initial_state(2), dualtape.asarray(np.zeros(shape)))
    assert expected in str(info.value) and "LSTM(3, 4)" in str(info.value)


def test_state_of_wrong_batch_or_size_is_rejected(layer):
    xs = dualtape.asarray(np.zeros((5, 2, 3)))
    with pytest.raises(ValueError, match=r"state must have shape \(2, 4\), got \(3, 4\)"):
        layer.forward_sequence(layer.initial_state(3), xs)
    with pytest.raises(ValueError, match=r"state must have shape \(2, 4\), got \(2, 5\)"):
        layer.forward_sequence(dualtape.asarray(np.zeros((2, 5))), xs)
    with pytest.raises(ValueError, match=r"state must have shape \(1, 4\) or \(4,\), got \(5,\)"):
        layer.forward_sequence(dualtape.asarray(np.zeros(5)), xs[:, :1, :])
    with pytest.raises(ValueError, match=r"state must have shape \(2, 4\), got \(4,\)"):
        layer.forward(layer.initial_state(), xs[0, ...])


def test_empty_sequence_is_rejected(layer):
    with pytest.raises(ValueError, match=r"LSTM\(3, 4\): the input sequence is empty \(T = 0\)"):
        layer.forward_sequence(layer.initial_state(2), dualtape.asarray(np.zeros((0, 2, 3))))


def test_output_gradient_of_wrong_shape_is_rejected(layer):
    xs = dualtape.asarray(np.ones((5, 2, 3)))
    tape, _, _ = layer.forward_sequence(layer.initial_state(2), xs)
    with pytest.raises(ValueError, match=r"dys must have shape \(5, 2, 4\), got \(4, 2, 4\)"):
        layer.backward_sequence(tape, None, dualtape.asarray(np.zeros((4, 2, 4))))
    with pytest.raises(ValueError, match=r"dstate_T must have shape \(2, 4\), got \(1, 4\)"):
        layer.backward_sequence(tape, layer.initial_state(1), dualtape.asarray(np.zeros((5, 2, 4))))


def test_state_on_another_backend_is_a_type_error_naming_both(backend, layer):
    state = other_backend_array(backend, np.zeros((2, 4)))[0]
    other = backend_of(state).name
    with pytest.raises(TypeError, match=r"state is a \w+ array") as info:
        layer.forward_sequence(state, dualtape.asarray(np.zeros((5, 2, 3))))
    assert f"{other} array" in str(info.value) and f"{backend.name} array" in str(info.value)


def test_sequence_on_another_device_is_a_value_error_naming_both(backend, layer):
    if backend.name != "array_api_strict":
        pytest.skip("only array_api_strict has a second (fake) device here")
    import array_api_strict

    here = str(backend.device)
    there = "device1" if "device1" not in here else "CPU_DEVICE"
    xs = array_api_strict.asarray(np.zeros((5, 2, 3)), device=array_api_strict.Device(there))
    with pytest.raises(ValueError, match=r"input sequence is a array_api_strict array") as info:
        layer.forward_sequence(layer.initial_state(2), xs)
    assert there in str(info.value) and here in str(info.value)


def test_predict_step_returns_the_forward_state_and_output(backend):
    layer = dualtape.LSTM(3, 4, seed=2, dtype="float64")
    x, c = dualtape.asarray(np.linspace(-1, 1, 6).reshape(2, 3)), layer.initial_state(2)
    _, c_next, h = layer.forward(c, x)
    for state, y in (layer.predict_step(c, x), layer.step(c, x)):  # step: the former name
        np.testing.assert_array_equal(np64(state), np64(c_next))
        np.testing.assert_array_equal(np64(y), np64(h))
    assert np.any(np64(y) != 0)


def test_a_networks_predict_step_and_its_former_name_agree(backend):
    rnet = dualtape.RecurrentNetwork([dualtape.LSTM(3, 4, seed=2, dtype="float64"),
                                      dualtape.FullyConnected(4, 2, seed=3, dtype="float64")])
    x = dualtape.asarray(np.linspace(-1, 1, 6).reshape(2, 3))
    (state, y), (old_state, old_y) = rnet.predict_step(None, x), rnet.step(None, x)
    _, states_last, ys = rnet.forward_sequence(None, x[None, ...])
    np.testing.assert_array_equal(np64(y), np64(ys[0, ...]))
    np.testing.assert_array_equal(np64(old_y), np64(y))
    np.testing.assert_array_equal(np64(old_state[0]), np64(state[0]))
    np.testing.assert_array_equal(np64(state[0]), np64(states_last[0]))


def test_a_state_of_none_starts_from_zeros(backend):
    layer = dualtape.LSTM(3, 4, seed=2, dtype="float64")
    xs = dualtape.asarray(np.random.default_rng(3).normal(size=(5, 2, 3)))
    for inputs, zeros in ((xs, layer.initial_state(2)), (xs[:, 0, :], layer.initial_state())):
        expected = layer.forward_sequence(zeros, inputs)
        _, state, ys = layer.forward_sequence(None, inputs)
        assert tuple(state.shape) == tuple(expected[1].shape)
        np.testing.assert_array_equal(np64(ys), np64(expected[2]))
        np.testing.assert_array_equal(np64(state), np64(expected[1]))
        _, state, y = layer.forward(None, inputs[0, ...])
        np.testing.assert_array_equal(np64(y), np64(layer.forward(zeros, inputs[0, ...])[2]))
