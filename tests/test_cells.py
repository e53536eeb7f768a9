"""StandardLSTM, GRU and BasicRecurrent on every backend: backprop through time against finite
differences, sequences against steps, tapes that keep only activations, a mixed stack saved
and loaded. (Their numbers against torch's are in test_cells_torch.py.)"""

from __future__ import annotations

import numpy as np
import pytest

import dualtape
from dualtape import GRU, BasicRecurrent, Dropout, FullyConnected, StandardLSTM, Tanh
from dualtape.backend import backend_of

from .conftest import counting_transcendentals, np64
from .helpers import other_backend_array

F64 = "float64"
CELLS = [StandardLSTM, GRU, BasicRecurrent]
SAME = {"rtol": 1e-11, "atol": 1e-12}  # the same arithmetic in another order


def cell(kind: type, n_in: int = 2, n_out: int = 3, dtype: str = F64):
    """A seeded layer of ``kind``; BasicRecurrent's weights scaled down from Grenade's [-1, 1]
    so that a short sequence stays near 1 in size."""
    layer = kind(n_in, n_out, seed=11, dtype=dtype)
    if kind is BasicRecurrent:
        layer.params["W"] = layer.params["W"] * 0.5
    return layer


def directional_check(loss, analytic: float, base: np.ndarray, v: np.ndarray, name: str):
    """Central differences of ``loss`` along ``v`` at ``base`` equal ``analytic``."""
    eps = 1e-6
    numeric = (loss(base + eps * v) - loss(base - eps * v)) / (2 * eps)
    assert numeric == pytest.approx(analytic, rel=1e-6, abs=1e-8), name


@pytest.mark.parametrize("kind", CELLS, ids=lambda k: k.kind)
def test_backprop_through_time_matches_finite_differences(backend, kind):
    """Every parameter, the inputs and the initial state, float64, T = 5, batch 2, with
    gradients on every output and on the final state."""
    rng = np.random.default_rng(1)
    layer = cell(kind)
    xs = rng.normal(size=(5, 2, 2))
    state = rng.normal(size=(2, layer.state_size))
    dys, dstate = rng.normal(size=(5, 2, 3)), rng.normal(size=(2, layer.state_size))

    def loss(xs_h=xs, state_h=state):
        _, last, ys = layer.forward_sequence(dualtape.asarray(state_h), dualtape.asarray(xs_h))
        return float(np.sum(np64(ys) * dys) + np.sum(np64(last) * dstate))

    tape, _, _ = layer.forward_sequence(dualtape.asarray(state), dualtape.asarray(xs))
    grads, dstate_0, dxs = layer.backward_sequence(
        tape, dualtape.asarray(dstate), dualtape.asarray(dys))
    assert set(grads) == set(layer.params)
    for name in list(layer.params):
        base = np64(layer.params[name]).copy()
        v = rng.normal(size=base.shape)

        def moved(w, name=name):
            layer.params[name] = dualtape.asarray(w)
            return loss()

        directional_check(moved, float(np.sum(np64(grads[name]) * v)), base, v, name)
        layer.params[name] = dualtape.asarray(base)
    v = rng.normal(size=xs.shape)
    directional_check(lambda x: loss(xs_h=x), float(np.sum(np64(dxs) * v)), xs, v, "xs")
    v = rng.normal(size=state.shape)
    directional_check(lambda s: loss(state_h=s), float(np.sum(np64(dstate_0) * v)), state, v,
                      "state")


def test_a_mixed_stack_with_dropout_matches_finite_differences(backend):
    """Grenade's LSTM, the standard LSTM, dropout, a GRU and BasicRecurrent in one network:
    the state list and the dropout mask (reseeded per evaluation) both take part."""
    rng = np.random.default_rng(2)
    drop = Dropout(0.4, seed=5)
    rnet = dualtape.RecurrentNetwork([
        dualtape.LSTM(2, 3, seed=1, dtype=F64, init="scaled"),
        StandardLSTM(3, 4, seed=2, dtype=F64), drop, GRU(4, 3, seed=3, dtype=F64),
        cell(BasicRecurrent, 3, 2), FullyConnected(2, 2, seed=4, dtype=F64), Tanh(),
    ])
    xs = rng.normal(size=(4, 2, 2))
    states = [rng.normal(size=(2, layer.state_size)) for layer in rnet.recurrent_layers]
    dys = rng.normal(size=(4, 2, 2))

    def run(xs_h=xs):
        drop.rng = np.random.default_rng(9)  # the same mask on every evaluation
        return rnet.forward_sequence([dualtape.asarray(s) for s in states], dualtape.asarray(xs_h))

    def loss(xs_h=xs):
        return float(np.sum(np64(run(xs_h)[2]) * dys))

    tape, _, _ = run()
    mask = np64(tape.tapes[2].mask)
    assert 0 < np.mean(mask == 0) < 1, "the mask drops some elements and keeps others"
    grads, dstates, dxs = rnet.backward_sequence(tape, None, dualtape.asarray(dys))
    for k, group in enumerate(rnet.params):
        for name in list(group):
            base = np64(group[name]).copy()
            v = rng.normal(size=base.shape)

            def moved(w, group=group, name=name):
                group[name] = dualtape.asarray(w)
                return loss()

            directional_check(moved, float(np.sum(np64(grads[k][name]) * v)), base, v,
                              f"layer {k} {name}")
            group[name] = dualtape.asarray(base)
    v = rng.normal(size=xs.shape)
    directional_check(loss, float(np.sum(np64(dxs) * v)), xs, v, "xs")


@pytest.mark.parametrize("kind", CELLS, ids=lambda k: k.kind)
def test_a_sequence_equals_its_steps_forward_and_back(backend, kind):
    rng = np.random.default_rng(3)
    layer = cell(kind, 3, 4)
    xs = dualtape.asarray(rng.normal(size=(6, 2, 3)))
    dys = dualtape.asarray(rng.normal(size=(6, 2, 4)))
    dlast = dualtape.asarray(rng.normal(size=(2, layer.state_size)))
    state0 = dualtape.asarray(rng.normal(size=(2, layer.state_size)))
    tape, last, ys = layer.forward_sequence(state0, xs)
    grads, dstate0, dxs = layer.backward_sequence(tape, dlast, dys)

    state, tapes = state0, []
    for t in range(6):
        step_tape, state, y = layer.forward(state, xs[t, ...])
        np.testing.assert_allclose(np64(ys[t, ...]), np64(y), **SAME)
        tapes.append(step_tape)
    np.testing.assert_allclose(np64(last), np64(state), **SAME)
    total = {name: 0.0 for name in layer.params}
    dstate, dx_steps = dlast, [None] * 6
    for t in reversed(range(6)):
        step_grads, dstate, dx = layer.backward(tapes[t], dstate, dys[t, ...])
        total = {name: total[name] + np64(step_grads[name]) for name in total}
        dx_steps[t] = np64(dx)
    for name in total:
        np.testing.assert_allclose(np64(grads[name]), total[name], **SAME)
    np.testing.assert_allclose(np64(dstate0), np64(dstate), **SAME)
    np.testing.assert_allclose(np64(dxs), np.stack(dx_steps), **SAME)


@pytest.mark.parametrize("kind", [StandardLSTM, GRU], ids=lambda k: k.kind)
def test_backward_evaluates_no_transcendental_function(backend, kind):
    """The tapes keep activations only: a whole sequence back, and one step back, call no exp,
    tanh or log (the forward pass's calls are seen by the same counter)."""
    rng = np.random.default_rng(4)
    layer = cell(kind)
    xs = dualtape.asarray(rng.normal(size=(4, 2, 2)))
    state = dualtape.asarray(rng.normal(size=(2, layer.state_size)))
    dys = dualtape.asarray(rng.normal(size=(4, 2, 3)))
    with counting_transcendentals(backend.xp) as forward:
        tape, _, _ = layer._forward_sequence(forward, state, xs)
        step_tape, _, _ = layer._forward_step(forward, state, xs[0, ...])
    assert forward.calls["tanh"] > 0, "the counter sees the forward pass"
    with counting_transcendentals(backend.xp) as counter:
        layer._backward_sequence(counter, tape, state * 0.0, dys)
        layer._backward_step(counter, step_tape, state * 0.0, dys[0, ...])
    assert counter.total == 0, f"backward evaluated {counter.calls}"


def test_tapes_hold_the_documented_activations(backend):
    rng = np.random.default_rng(5)
    lstm, gru = cell(StandardLSTM, 2, 3), cell(GRU, 2, 3)
    xs = dualtape.asarray(rng.normal(size=(4, 2, 2)) * 3)
    tape, last, ys = lstm.forward_sequence(None, xs)
    assert type(tape).__name__ == "StandardLSTMSequenceTape"
    gates = np64(tape.gates)
    sigmoid_blocks = np.concatenate([gates[..., :6], gates[..., 9:]], axis=-1)
    assert np.all((sigmoid_blocks > 0) & (sigmoid_blocks < 1))
    assert np.all(np.abs(gates[..., 6:9]) < 1)
    np.testing.assert_allclose(np64(tape.tanh_cells), np.tanh(np64(tape.cells[1:, ...])), **SAME)
    np.testing.assert_allclose(np64(ys), gates[..., 9:] * np64(tape.tanh_cells), **SAME)
    h, c = lstm.split_state(last)
    np.testing.assert_array_equal(np64(h), np64(ys[-1, ...]))
    np.testing.assert_array_equal(np64(c), np64(tape.cells[-1, ...]))
    np.testing.assert_array_equal(np64(lstm.join_state(h, c)), np64(last))

    tape, last, ys = gru.forward_sequence(None, xs)
    assert type(tape).__name__ == "GRUSequenceTape"
    assert tape.hs.shape == (5, 2, 3) and tape.gates.shape == (4, 2, 9)
    np.testing.assert_array_equal(np64(tape.hs[0, ...]), np.zeros((2, 3)))
    np.testing.assert_array_equal(np64(last), np64(ys[-1, ...]))
    W_hn, b_hn = np64(gru.params["W_hh"])[6:], np64(gru.params["b_hh"])[6:]
    np.testing.assert_allclose(np64(tape.hn), np64(tape.hs[:-1, ...]) @ W_hn.T + b_hn, **SAME)


def test_basic_recurrent_is_grenades_linear_elman_cell(backend):
    """``y_t = b + W [x_t; y_{t-1}]``, the state being the output."""
    rng = np.random.default_rng(6)
    layer = cell(BasicRecurrent, 2, 3)
    xs, y0 = rng.normal(size=(3, 1, 2)), rng.normal(size=(1, 3))
    _, last, ys = layer.forward_sequence(dualtape.asarray(y0), dualtape.asarray(xs))
    W, b, y = np64(layer.params["W"]), np64(layer.params["b"]), y0
    for t in range(3):
        y = b + np.concatenate([xs[t], y], axis=-1) @ W.T
        np.testing.assert_allclose(np64(ys[t, ...]), y, **SAME)
    np.testing.assert_allclose(np64(last), y, **SAME)


@pytest.mark.parametrize("kind", CELLS, ids=lambda k: k.kind)
def test_initialisation_is_seeded_and_identical_on_every_backend(backend, kind):
    layer = kind(3, 4, seed=7, dtype=F64)
    with dualtape.use_backend("numpy"):
        twin = kind(3, 4, seed=7, dtype=F64)
    scale = 1.0 if kind is BasicRecurrent else 0.5  # Grenade's [-1, 1]; torch's 1/√n_out
    for name, p in layer.params.items():
        assert backend_of(p).name == backend.name
        np.testing.assert_array_equal(np64(p), twin.params[name])
        assert np.all(np.abs(np64(p)) <= scale)
    assert layer.initial_state(2).shape == (2, layer.state_size)
    assert layer.state_size == (8 if kind is StandardLSTM else 4)


def test_a_state_of_the_wrong_width_names_the_layers_state_size(backend):
    layer = StandardLSTM(2, 3, seed=1)
    with pytest.raises(ValueError, match=r"state must have shape \(2, 6\)"):
        layer.forward_sequence(dualtape.asarray(np.zeros((2, 3), np.float32)),
                               dualtape.asarray(np.zeros((4, 2, 2), np.float32)))
    with pytest.raises(ValueError, match="h and c must both have shape"):
        layer.join_state(dualtape.asarray(np.zeros((2, 3))), dualtape.asarray(np.zeros((2, 4))))
    c, other = other_backend_array(backend, np.zeros((2, 3)))
    with pytest.raises(TypeError, match=other):
        layer.join_state(dualtape.asarray(np.zeros((2, 3))), c)


def test_a_mixed_stack_saves_loads_and_trains(backend, tmp_path):
    rng = np.random.default_rng(8)
    rnet = dualtape.RecurrentNetwork([
        StandardLSTM(2, 4, seed=1, dtype=F64), Dropout(0.2, seed=3), GRU(4, 3, seed=2, dtype=F64),
        cell(BasicRecurrent, 3, 3), FullyConnected(3, 2, seed=4, dtype=F64),
    ])
    xs = dualtape.asarray(rng.normal(size=(5, 3, 2)))
    targets = dualtape.asarray(rng.normal(size=(5, 3, 2)) * 0.5)
    optimizer = dualtape.Adam(rate=0.02)
    losses = [dualtape.train_recurrent(rnet, xs, targets, optimizer)[0] for _ in range(60)]
    assert losses[-1] < 0.5 * losses[0]

    dualtape.save(rnet, tmp_path / "mixed.npz")
    loaded = dualtape.load(tmp_path / "mixed.npz")
    assert [layer.kind for layer in loaded.layers] == [layer.kind for layer in rnet.layers]
    assert loaded.layers[1].config() == {"rate": 0.2, "seed": 3}
    rnet.set_training(False)
    loaded.set_training(False)
    _, states, ys = rnet.forward_sequence(None, xs)
    _, states_loaded, ys_loaded = loaded.forward_sequence(None, dualtape.asarray(np64(xs)))
    np.testing.assert_array_equal(np64(ys_loaded), np64(ys))
    for a, b in zip(states_loaded, states, strict=True):
        np.testing.assert_array_equal(np64(a), np64(b))
