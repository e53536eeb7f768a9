"""Optimizers: SGD follows Grenade's rule exactly, Adam matches a hand implementation, their state
lives in the optimizer and survives state_dict/load_state_dict."""

from __future__ import annotations

import numpy as np
import pytest

import dualtape
from dualtape.backend import backend_of

from .conftest import np64

RNG = np.random.default_rng(0)
W0 = RNG.normal(size=(3, 2))
B0 = RNG.normal(size=(3,))
GRADS = [{"W": RNG.normal(size=(3, 2)), "b": RNG.normal(size=(3,))} for _ in range(3)]


def on_backend(group: dict[str, np.ndarray]) -> dict:
    """Copies on the selected backend (updates are in place on numpy: keep W0, B0 intact)."""
    return {k: dualtape.asarray(v.copy()) for k, v in group.items()}


def run(optimizer, steps: int) -> list[dict]:
    params = [on_backend({"W": W0, "b": B0})]
    for g in GRADS[:steps]:
        optimizer.step(params, [on_backend(g)])
    return params


def sgd_by_hand(rate, momentum, regulariser, steps):
    """Grenade: m' = momentum*m - rate*g; w' = w + m' - rate*regulariser*w."""
    w = {"W": W0.copy(), "b": B0.copy()}
    m = {k: np.zeros_like(v) for k, v in w.items()}
    for g in GRADS[:steps]:
        for k in w:
            m[k] = momentum * m[k] - rate * g[k]
            w[k] = w[k] + m[k] - rate * regulariser * w[k]
    return w


def assert_group_close(group: dict, expected: dict, rtol: float = 1e-12) -> None:
    assert set(group) == set(expected)
    for k in expected:
        np.testing.assert_allclose(np64(group[k]), expected[k], rtol=rtol, atol=1e-15)


# --- SGD -------------------------------------------------------------------------------------


@pytest.mark.parametrize("momentum, regulariser", [(0.0, 0.0), (0.9, 0.0), (0.0, 0.01),
                                                   (0.9, 1e-2)])
def test_sgd_follows_grenades_rule_over_two_steps(backend, momentum, regulariser):
    params = run(dualtape.SGD(0.1, momentum=momentum, regulariser=regulariser), steps=2)
    assert_group_close(params[0], sgd_by_hand(0.1, momentum, regulariser, steps=2))


def test_sgd_two_steps_written_out(backend):
    # rate 0.5, momentum 0.5, regulariser 0.1, w = 1, g = 1 then g = 2:
    # m1 = -0.5;              w1 = 1 - 0.5 - 0.05 = 0.45
    # m2 = -0.25 - 1 = -1.25; w2 = 0.45 - 1.25 - 0.0225 = -0.8225
    params = [{"w": dualtape.asarray([1.0])}]
    optimizer = dualtape.SGD(0.5, momentum=0.5, regulariser=0.1)
    optimizer.step(params, [{"w": dualtape.asarray([1.0])}])
    assert np64(params[0]["w"])[0] == pytest.approx(0.45, abs=1e-15)
    optimizer.step(params, [{"w": dualtape.asarray([2.0])}])
    assert np64(params[0]["w"])[0] == pytest.approx(-0.8225, abs=1e-15)


def test_sgd_momentum_lives_in_the_optimizer_not_the_layer(backend):
    layer = dualtape.FullyConnected(2, 3, seed=0, dtype="float64")
    attributes = set(vars(layer))
    optimizer = dualtape.SGD(0.1, momentum=0.9)
    net = dualtape.Network([layer])
    tapes, _ = net.forward(dualtape.asarray(np.ones((4, 2))))
    grads, _ = net.backward(tapes, dualtape.asarray(np.ones((4, 3))))
    optimizer.step(net.params, grads)
    assert set(layer.params) == {"W", "b"}
    assert set(vars(layer)) == attributes
    assert set(optimizer.state) == {(0, "W"), (0, "b")}
    for (_, name), slot in optimizer.state.items():
        assert tuple(slot["m"].shape) == tuple(layer.params[name].shape)
        assert backend_of(slot["m"]) == backend
    np.testing.assert_allclose(np64(optimizer.state[(0, "b")]["m"]), -0.1 * 4.0)


def test_one_sgd_keeps_separate_momentum_per_layer(backend):
    params = [on_backend({"W": W0}), on_backend({"W": W0})]
    optimizer = dualtape.SGD(0.1, momentum=0.9)
    optimizer.step(params, [on_backend({"W": GRADS[0]["W"]}), on_backend({"W": GRADS[1]["W"]})])
    optimizer.step(params, [on_backend({"W": GRADS[0]["W"]}), on_backend({"W": GRADS[1]["W"]})])
    m0, m1 = np64(optimizer.state[(0, "W")]["m"]), np64(optimizer.state[(1, "W")]["m"])
    np.testing.assert_allclose(m0, -0.1 * 1.9 * GRADS[0]["W"], rtol=1e-12)
    np.testing.assert_allclose(m1, -0.1 * 1.9 * GRADS[1]["W"], rtol=1e-12)


# --- Adam ------------------------------------------------------------------------------------


@pytest.mark.parametrize("rate, beta1, beta2, eps", [(0.001, 0.9, 0.999, 1e-8),
                                                     (0.1, 0.5, 0.9, 1e-3)])
def test_adam_matches_a_hand_implementation_over_three_steps(backend, rate, beta1, beta2, eps):
    params = run(dualtape.Adam(rate, beta1=beta1, beta2=beta2, eps=eps), steps=3)
    expected = adam_textbook(rate, beta1, beta2, eps, steps=3)
    assert_group_close(params[0], expected, rtol=1e-10)


def adam_textbook(rate, beta1, beta2, eps, steps):
    """Kingma & Ba, Algorithm 1 (as torch.optim.Adam): bias-corrected moments m̂ and v̂, then
    w -= rate * m̂ / (sqrt(v̂) + eps), eps added after the correction."""
    w = {"W": W0.copy(), "b": B0.copy()}
    m = {k: np.zeros_like(v) for k, v in w.items()}
    v = {k: np.zeros_like(x) for k, x in w.items()}
    for t, g in enumerate(GRADS[:steps], start=1):
        for k in w:
            m[k] = beta1 * m[k] + (1 - beta1) * g[k]
            v[k] = beta2 * v[k] + (1 - beta2) * g[k] ** 2
            m_hat, v_hat = m[k] / (1 - beta1**t), v[k] / (1 - beta2**t)
            w[k] = w[k] - rate * m_hat / (np.sqrt(v_hat) + eps)
    return w


def test_adam_first_step_moves_each_weight_by_about_the_rate(backend):
    # With bias correction the first step is rate * g / (|g| + eps'): about rate * sign(g).
    params = run(dualtape.Adam(0.01, eps=1e-12), steps=1)
    np.testing.assert_allclose(np64(params[0]["W"]), W0 - 0.01 * np.sign(GRADS[0]["W"]),
                               rtol=1e-9)


# --- hyperparameters and mismatched steps ----------------------------------------------------


@pytest.mark.parametrize("kwargs", [
    {"rate": 0.0}, {"rate": -0.1}, {"rate": float("nan")}, {"rate": float("inf")},
    {"rate": "0.1"}, {"rate": True},
    {"rate": 0.1, "momentum": 1.0}, {"rate": 0.1, "momentum": -0.1},
    {"rate": 0.1, "regulariser": -1e-3},
], ids=repr)
def test_sgd_rejects_bad_hyperparameters(kwargs):
    with pytest.raises(ValueError, match="SGD"):
        dualtape.SGD(**kwargs)


@pytest.mark.parametrize("kwargs", [
    {"rate": 0.0}, {"rate": -1.0}, {"beta1": 1.0}, {"beta1": -0.5}, {"beta2": 1.0},
    {"beta2": 1.5}, {"eps": -1e-8}, {"eps": float("nan")},
], ids=repr)
def test_adam_rejects_bad_hyperparameters(kwargs):
    with pytest.raises(ValueError, match="Adam"):
        dualtape.Adam(**kwargs)


@pytest.mark.parametrize("layers", [1, 2, 3])
def test_step_given_the_whole_backward_result_says_to_pass_the_gradients(backend, layers):
    net = dualtape.Network([dualtape.FullyConnected(2, 2, seed=k, dtype="float64")
                            for k in range(layers)])
    tapes, y = net.forward(dualtape.asarray(np.ones((3, 2))))
    result = net.backward(tapes, y)
    with pytest.raises(TypeError, match=r"the first item of what backward returns"):
        dualtape.SGD(0.1).step(net.params, result)


def test_step_rejects_gradients_under_other_names(backend):
    with pytest.raises(ValueError, match=r"parameters \['W', 'b'\] but gradients \['W', 'c'\]"):
        dualtape.SGD(0.1).step([on_backend({"W": W0, "b": B0})],
                               [on_backend({"W": W0, "c": B0})])


def test_step_rejects_gradients_that_do_not_match(backend):
    optimizer = dualtape.SGD(0.1)
    params = [on_backend({"W": W0, "b": B0})]
    with pytest.raises(ValueError, match="groups"):
        optimizer.step(params, [])
    with pytest.raises(ValueError, match="gradients"):
        optimizer.step(params, [on_backend({"W": W0})])
    with pytest.raises(ValueError, match="shape"):
        optimizer.step(params, [on_backend({"W": W0.T, "b": B0})])


# --- state_dict ------------------------------------------------------------------------------


@pytest.mark.parametrize("make", [lambda: dualtape.SGD(0.1, momentum=0.9),
                                  lambda: dualtape.Adam(0.01)], ids=["SGD", "Adam"])
def test_state_dict_round_trip_continues_identically(backend, make, tmp_path):
    first = make()
    params = run(first, steps=2)
    saved = first.state_dict()
    assert all(isinstance(v, np.ndarray) for v in saved.values())
    np.savez(tmp_path / "state.npz", **saved)
    with np.load(tmp_path / "state.npz", allow_pickle=False) as archive:
        restored = {k: archive[k] for k in archive.files}

    copy = [{k: dualtape.asarray(np64(v)) for k, v in params[0].items()}]
    second = make()
    second.load_state_dict(restored, copy)
    assert second.steps == first.steps == 2
    assert set(second.state) == set(first.state)
    for key, slots in second.state.items():
        for slot, value in slots.items():
            assert backend_of(value) == backend
            np.testing.assert_array_equal(np64(value), np64(first.state[key][slot]))

    first.step(params, [on_backend(GRADS[2])])
    second.step(copy, [on_backend(GRADS[2])])
    for k in params[0]:
        np.testing.assert_array_equal(np64(copy[0][k]), np64(params[0][k]))


@pytest.mark.parametrize("edit", [
    lambda state: {**state, "0/W/m": state["0/W/m"].T},
    lambda state: {**state, "3/W/m": state["0/W/m"]},
    lambda state: {**state, "0/nope/m": state["0/W/m"]},
    lambda state: {**state, "W-m": state["0/W/m"]},
], ids=["wrong-shape", "no-such-group", "no-such-parameter", "malformed-key"])
def test_state_that_does_not_fit_the_parameters_raises_and_changes_nothing(backend, edit):
    first = dualtape.SGD(0.1, momentum=0.9)
    params = run(first, steps=1)
    second = dualtape.SGD(0.1, momentum=0.9)
    with pytest.raises(ValueError, match="state"):
        second.load_state_dict(edit(first.state_dict()), params)
    assert second.state == {} and second.steps == 0


def test_adam_counts_one_step_per_call_whatever_the_number_of_groups(backend):
    # Bias correction uses the step count: counting once per group would scale steps 2 and 3.
    params = [on_backend({"W": W0, "b": B0}), on_backend({"W": W0})]
    optimizer = dualtape.Adam(0.1, beta1=0.5, beta2=0.9, eps=1e-3)
    for g in GRADS:
        optimizer.step(params, [on_backend(g), on_backend({"W": g["W"]})])
    assert optimizer.steps == 3
    expected = adam_textbook(0.1, 0.5, 0.9, 1e-3, steps=3)
    assert_group_close(params[0], expected, rtol=1e-10)
    assert_group_close(params[1], {"W": expected["W"]}, rtol=1e-10)


# --- hyperparameter types --------------------------------------------------------------------


@pytest.mark.parametrize("value", [np.float32(0.5), np.float64(0.5), np.int64(1)], ids=repr)
def test_numpy_real_scalars_are_accepted_as_hyperparameters(value):
    assert dualtape.SGD(value, momentum=np.float32(0.5)).rate == float(value)
    assert dualtape.Adam(value, eps=np.float64(1e-8)).rate == float(value)


def test_adam_rejects_eps_zero_which_divides_zero_by_zero():
    with pytest.raises(ValueError, match=r"Adam: eps must be a real number in \(0"):
        dualtape.Adam(eps=0.0)


def test_numpy_booleans_are_not_numbers():
    with pytest.raises(ValueError, match="SGD: rate"):
        dualtape.SGD(np.bool_(True))
