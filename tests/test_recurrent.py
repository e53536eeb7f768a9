"""RecurrentNetwork and train_recurrent: BPTT against finite differences, save/load, learning."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dualtape
from dualtape import LSTM, SGD, Adam, FullyConnected, Logit, RecurrentNetwork, train_recurrent
from dualtape.backend import backend_of, namespace_of, use_backend
from dualtape.losses import mask_weights, squared_error

from .conftest import np64
from .helpers import assert_params_equal, host_params, other_backend_array

F64 = "float64"


def grenade_stack() -> RecurrentNetwork:
    """A small version of Grenade's ``[LSTM, LSTM, FullyConnected, Logit]`` stack, in float64."""
    return RecurrentNetwork(
        [LSTM(3, 5, seed=1, dtype=F64), LSTM(5, 4, seed=2, dtype=F64),
         FullyConnected(4, 2, seed=3, dtype=F64), Logit()]
    )


def tiny_network() -> RecurrentNetwork:
    """``[LSTM(2, 3), FullyConnected(3, 2)]`` in float64."""
    return RecurrentNetwork(
        [LSTM(2, 3, seed=4, dtype=F64), FullyConnected(3, 2, seed=5, dtype=F64)]
    )




# ---- backprop through time against finite differences ---------------------------------------


def test_bptt_through_a_whole_network_matches_finite_differences(backend):
    """Directional central differences, float64, T = 6, batch 2, a mask with gaps, and a
    gradient on the final states, for every parameter, the inputs and the initial states."""
    rng = np.random.default_rng(0)
    steps, batch = 6, 2
    rnet = grenade_stack()
    xs_host = rng.normal(size=(steps, batch, 3))
    states_host = [rng.normal(size=(batch, 5)), rng.normal(size=(batch, 4))]
    targets = dualtape.asarray(rng.uniform(size=(steps, batch, 2)))
    mask_host = np.ones((steps, batch))
    mask_host[[0, 2, 5], [0, 1, 1]] = 0.0
    mask = dualtape.asarray(mask_host)
    final_weights = [rng.normal(size=(batch, 5)), rng.normal(size=(batch, 4))]

    def loss(xs_h, states_h):
        tape, states_last, ys = rnet.forward_sequence(
            [dualtape.asarray(s) for s in states_h], dualtape.asarray(xs_h)
        )
        xp = namespace_of(ys)
        value, dys = squared_error(xp, ys, targets, mask_weights(mask, steps, batch, ys))
        value = float(value) + sum(
            float(np.sum(np64(s) * w)) for s, w in zip(states_last, final_weights, strict=True)
        )
        return value, tape, dys

    _, tape, dys = loss(xs_host, states_host)
    grads, dstates, dxs = rnet.backward_sequence(
        tape, [dualtape.asarray(w) for w in final_weights], dys
    )
    assert [set(g) for g in grads] == [set(p) for p in rnet.params]

    eps = 1e-6

    def directional(perturbed):
        plus, minus = perturbed(eps), perturbed(-eps)
        return (plus - minus) / (2 * eps)

    def check(name, analytic, numeric):
        assert numeric == pytest.approx(analytic, rel=1e-6, abs=1e-8), name

    for k, group in enumerate(rnet.params):
        for name, p in list(group.items()):
            base = np64(p).copy()
            for _ in range(2):
                v = rng.normal(size=base.shape)

                def perturbed(h, group=group, name=name, base=base, v=v):
                    group[name] = dualtape.asarray(base + h * v)
                    return loss(xs_host, states_host)[0]

                numeric = directional(perturbed)
                group[name] = dualtape.asarray(base)
                check(f"layer {k} {name}", float(np.sum(np64(grads[k][name]) * v)), numeric)

    for _ in range(2):
        v = rng.normal(size=xs_host.shape)
        numeric = directional(lambda h, v=v: loss(xs_host + h * v, states_host)[0])
        check("xs", float(np.sum(np64(dxs) * v)), numeric)
    for k in range(2):
        v = rng.normal(size=states_host[k].shape)

        def perturbed_state(h, k=k, v=v):
            shifted = list(states_host)
            shifted[k] = states_host[k] + h * v
            return loss(xs_host, shifted)[0]

        check(f"state {k}", float(np.sum(np64(dstates[k]) * v)), directional(perturbed_state))


def test_masked_steps_get_no_output_gradient(backend):
    rnet = grenade_stack()
    rng = np.random.default_rng(1)
    xs = dualtape.asarray(rng.normal(size=(5, 2, 3)))
    tape, _, ys = rnet.forward_sequence(rnet.initial_state(2), xs)
    mask = dualtape.asarray(np.array([True, False, True, False, True]))
    _, dys = squared_error(
        namespace_of(ys), ys, dualtape.asarray(rng.uniform(size=(5, 2, 2))),
        mask_weights(mask, 5, 2, ys),
    )
    dys = np64(dys)
    assert not np.any(dys[[1, 3]]) and np.all(dys[[0, 2, 4]] != 0)


# ---- train_recurrent ---------------------------------------------------------------------------


def test_train_recurrent_at_batch_1_sums_the_loss_and_uses_output_minus_target(backend):
    rng = np.random.default_rng(2)
    rnet = tiny_network()
    xs = dualtape.asarray(rng.normal(size=(5, 2)))  # one example, (T, n) form
    targets = rng.normal(size=(5, 2))
    before = host_params(rnet)
    tape, expected_state, ys = rnet.forward_sequence(rnet.initial_state(), xs)
    output_minus_target = np64(ys) - targets
    grads, _, _ = rnet.backward_sequence(tape, None, dualtape.asarray(output_minus_target))

    loss, state_last = train_recurrent(rnet, xs, dualtape.asarray(targets), SGD(rate=1.0))

    assert isinstance(loss, float)
    assert loss == pytest.approx(0.5 * np.sum(output_minus_target**2), rel=1e-12)
    assert [tuple(s.shape) for s in state_last] == [(3,)]
    np.testing.assert_allclose(np64(state_last[0]), np64(expected_state[0]), rtol=1e-12)
    for k, group in enumerate(rnet.params):
        for name, p in group.items():
            np.testing.assert_allclose(
                before[k][name] - np64(p), np64(grads[k][name]), rtol=1e-9, atol=1e-12,
                err_msg=f"layer {k} {name}: the update is not −rate·(BPTT of output − target)",
            )


@pytest.mark.parametrize(
    "mask_kind", ["none", "steps-bool", "steps-list", "steps-batch-float"]
)
def test_train_recurrent_loss_and_update_follow_the_mask(backend, mask_kind):
    rng = np.random.default_rng(3)
    steps, batch = 5, 3
    rnet = tiny_network()
    xs = dualtape.asarray(rng.normal(size=(steps, batch, 2)))
    targets = rng.normal(size=(steps, batch, 2))
    if mask_kind == "none":
        weights, mask = np.ones((steps, batch)), None
    elif mask_kind == "steps-bool":
        keep = np.array([True, False, True, True, False])
        weights, mask = np.broadcast_to(keep[:, None], (steps, batch)) * 1.0, dualtape.asarray(keep)
    elif mask_kind == "steps-list":
        keep = [0, 1, 1, 0, 1]
        weights, mask = np.broadcast_to(np.array(keep)[:, None], (steps, batch)) * 1.0, keep
    else:
        weights = (rng.uniform(size=(steps, batch)) > 0.4) * 1.0
        mask = dualtape.asarray(weights)
    targets[weights == 0] = np.nan  # a step without a target (Grenade's Nothing) is ignored
    before = host_params(rnet)
    tape, _, ys = rnet.forward_sequence(rnet.initial_state(batch), xs)
    diff = np.where(weights[..., None] > 0, np64(ys) - targets, 0.0)
    grads, _, _ = rnet.backward_sequence(tape, None, dualtape.asarray(diff / batch))

    loss, _ = train_recurrent(rnet, xs, dualtape.asarray(targets), SGD(rate=1.0), mask=mask)

    assert loss == pytest.approx(0.5 * np.sum(diff**2) / batch, rel=1e-12)
    for k, group in enumerate(rnet.params):
        for name, p in group.items():
            np.testing.assert_allclose(
                before[k][name] - np64(p), np64(grads[k][name]), rtol=1e-9, atol=1e-12
            )


def test_train_recurrent_with_learn_initial_state_updates_the_state_list_in_place(backend):
    rng = np.random.default_rng(4)
    rnet = grenade_stack()
    xs = dualtape.asarray(rng.normal(size=(4, 2, 3)))
    targets = dualtape.asarray(rng.uniform(size=(4, 2, 2)))
    state = [dualtape.asarray(rng.normal(size=(2, 5))), dualtape.asarray(rng.normal(size=(2, 4)))]
    originals = [np64(s).copy() for s in state]
    tape, _, ys = rnet.forward_sequence(state, xs)
    _, dys = squared_error(namespace_of(ys), ys, targets)
    _, dstates, _ = rnet.backward_sequence(tape, None, dys)
    same_list = state
    before = host_params(rnet)

    train_recurrent(rnet, xs, targets, SGD(rate=1.0), state=state, learn_initial_state=True)

    assert state is same_list and len(state) == 2
    for k, s in enumerate(state):
        assert backend_of(s).name == backend.name and backend_of(s).device == backend.device
        np.testing.assert_allclose(originals[k] - np64(s), np64(dstates[k]), rtol=1e-9, atol=1e-12)
    assert not np.array_equal(before[0]["W"], np64(rnet.params[0]["W"]))


@pytest.mark.parametrize(
    ("xs_shape", "state_shape"), [((4, 2), (3,)), ((4, 1, 2), (3,)), ((4, 2), (1, 3))],
    ids=["both-single", "batched-xs", "single-xs"],
)
def test_learned_initial_state_keeps_the_form_it_came_in(backend, xs_shape, state_shape):
    rnet = tiny_network()
    state = [dualtape.asarray(np.full(state_shape, 0.5))]
    xs, targets = dualtape.asarray(np.ones(xs_shape)), dualtape.asarray(np.zeros(xs_shape))
    tape, _, ys = rnet.forward_sequence(state, xs)
    _, dstate, _ = rnet.backward_sequence(tape, None, ys - targets)  # batch 1: dy = y - t
    train_recurrent(rnet, xs, targets, SGD(rate=0.1), state=state, learn_initial_state=True)
    assert tuple(state[0].shape) == state_shape
    expected = 0.5 - 0.1 * np64(dstate[0]).reshape(state_shape)
    np.testing.assert_allclose(np64(state[0]), expected, rtol=1e-12)


def test_train_recurrent_without_learning_the_state_leaves_it_alone(backend):
    rnet = tiny_network()
    state = [dualtape.asarray(np.full((2, 3), 0.5))]
    xs = dualtape.asarray(np.ones((3, 2, 2)))
    train_recurrent(rnet, xs, dualtape.asarray(np.zeros((3, 2, 2))), SGD(rate=0.1), state=state)
    assert np.all(np64(state[0]) == 0.5)


def test_learn_initial_state_needs_a_state_list(backend):
    rnet = tiny_network()
    with pytest.raises(ValueError, match="learn_initial_state=True needs `state`"):
        train_recurrent(rnet, dualtape.asarray(np.ones((3, 2))), dualtape.asarray(np.ones((3, 2))),
                        SGD(rate=0.1), learn_initial_state=True)


def test_non_finite_loss_raises_and_applies_no_update(backend):
    rnet = tiny_network()
    targets = np.zeros((4, 2))
    targets[2, 1] = np.nan
    before = host_params(rnet)
    with pytest.raises(FloatingPointError, match="train_recurrent: the loss is nan"):
        train_recurrent(rnet, dualtape.asarray(np.ones((4, 2))), dualtape.asarray(targets),
                        SGD(rate=0.1))
    after = host_params(rnet)
    assert all(np.array_equal(before[k][n], after[k][n]) for k in range(2) for n in before[k])


@pytest.mark.parametrize("bad", [np.inf, -np.inf, np.nan])
def test_non_finite_input_raises_and_applies_no_update(backend, bad):
    """An infinite input saturates the LSTM's gates to a finite loss but NaN gradients."""
    rnet = tiny_network()
    xs = np.ones((4, 2))
    xs[1, 0] = bad
    before = host_params(rnet)
    with pytest.raises(FloatingPointError, match="train_recurrent: the input holds NaN or inf"):
        train_recurrent(rnet, dualtape.asarray(xs), dualtape.asarray(np.zeros((4, 2))),
                        SGD(rate=0.1))
    after = host_params(rnet)
    assert all(np.array_equal(before[k][n], after[k][n]) for k in range(2) for n in before[k])


def test_a_sine_wave_next_value_task_is_learned(backend):
    """Grenade's recurrent example: read sin(t), predict sin(t + d).

    Four phase-shifted waves of 12 steps; the first two steps of each are masked out, since
    from a zero state the direction of the wave is unknown. The mean ½(y − t)² per counted
    step starts near 0.24; the threshold 0.005 lies far below what the trivial predictors
    reach (0 gives E[½ sin²] = 0.25, repeating the input gives sin²(d/2) ≈ 0.061), so only a
    network that uses its cell state to tell rising from falling passes. With this seed the
    float64 run ends near 0.0007 on every backend (the same arithmetic everywhere, so the
    margin does not depend on the backend); over seeds 0-9 the worst end was 0.0037.
    """
    steps, batch, d = 12, 4, 0.5
    rnet = RecurrentNetwork(
        [LSTM(1, 8, seed=0, dtype=F64), FullyConnected(8, 1, seed=1, dtype=F64)]
    )
    optimizer = Adam(rate=0.05)

    def waves(offset):
        phases = np.linspace(0.0, 2 * np.pi, batch, endpoint=False) + offset
        wave = np.sin(np.arange(steps + 1)[:, None] * d + phases)[..., None]
        return dualtape.asarray(wave[:-1]), dualtape.asarray(wave[1:])

    xs, targets = waves(0.0)
    mask = dualtape.asarray(np.arange(steps) >= 2)
    counted = steps - 2
    _, _, ys = rnet.forward_sequence(rnet.initial_state(batch), xs)
    first = 0.5 * np.sum(((np64(ys) - np64(targets)) ** 2)[2:]) / (batch * counted)
    losses = [train_recurrent(rnet, xs, targets, optimizer, mask=mask)[0] / counted
              for _ in range(60)]

    assert losses[0] == pytest.approx(first, rel=1e-10)  # the scale: summed steps / batch
    assert losses[-1] < 0.005
    unseen_xs, unseen_targets = waves(np.pi / batch)  # phases between the trained ones
    _, _, ys = rnet.forward_sequence(rnet.initial_state(batch), unseen_xs)
    error = 0.5 * np.sum(((np64(ys) - np64(unseen_targets)) ** 2)[2:]) / (batch * counted)
    assert error < 0.005


# ---- RecurrentNetwork ---------------------------------------------------------------------------


def test_sizes_must_chain(backend):
    with pytest.raises(ValueError, match=r"layer 1 LSTM\(4, 2\) takes 4 features but layer 0 "
                                         r"LSTM\(3, 5\) gives 5"):
        RecurrentNetwork([LSTM(3, 5, dtype=F64), LSTM(4, 2, dtype=F64)])
    with pytest.raises(ValueError, match=r"layer 2 FullyConnected\(4, 2\) takes 4 features but "
                                         r"layer 0 LSTM\(3, 5\) gives 5"):
        RecurrentNetwork([LSTM(3, 5, dtype=F64), Logit(), FullyConnected(4, 2, dtype=F64)])
    with pytest.raises(ValueError, match="at least one layer"):
        RecurrentNetwork([])
    with pytest.raises(ValueError, match="one dtype"):
        RecurrentNetwork([LSTM(3, 5, dtype=F64), LSTM(5, 2, dtype="float32")])
    rnet = grenade_stack()
    assert (rnet.n_in, rnet.n_out) == (3, 2)
    assert len(rnet.recurrent_layers) == 2


def test_initial_state_shapes(backend):
    rnet = grenade_stack()
    assert [tuple(s.shape) for s in rnet.initial_state()] == [(5,), (4,)]
    assert [tuple(s.shape) for s in rnet.initial_state(3)] == [(3, 5), (3, 4)]
    for s in rnet.initial_state(3):
        assert backend_of(s).name == backend.name and backend_of(s).device == backend.device
        assert str(s.dtype).endswith(F64) and not np.any(np64(s))


@pytest.mark.parametrize("batch", [None, 2], ids=["single", "batch2"])
def test_step_equals_one_step_of_forward_sequence(backend, batch):
    rng = np.random.default_rng(5)
    rnet = grenade_stack()
    lead = () if batch is None else (batch,)
    xs = dualtape.asarray(rng.normal(size=(4, *lead, 3)))
    start = [dualtape.asarray(rng.normal(size=(*lead, n))) for n in (5, 4)]
    _, states_last, ys = rnet.forward_sequence(start, xs)

    state = start
    for t in range(4):
        state, y = rnet.predict_step(state, xs[t, ...])
        assert tuple(y.shape) == (*lead, 2)
        np.testing.assert_allclose(np64(y), np64(ys[t, ...]), rtol=1e-12, atol=1e-14)
    for s, expected in zip(state, states_last, strict=True):
        assert tuple(s.shape) == tuple(expected.shape)
        np.testing.assert_allclose(np64(s), np64(expected), rtol=1e-12, atol=1e-14)


def test_single_example_form_equals_batch_of_one(backend):
    rng = np.random.default_rng(6)
    rnet = grenade_stack()
    xs = rng.normal(size=(5, 3))
    dys = rng.normal(size=(5, 2))
    tape1, states1, ys1 = rnet.forward_sequence(rnet.initial_state(), dualtape.asarray(xs))
    assert tuple(ys1.shape) == (5, 2) and [tuple(s.shape) for s in states1] == [(5,), (4,)]
    grads1, d1, dxs1 = rnet.backward_sequence(tape1, None, dualtape.asarray(dys))
    assert tuple(dxs1.shape) == (5, 3) and [tuple(d.shape) for d in d1] == [(5,), (4,)]

    tape, states, ys = rnet.forward_sequence(rnet.initial_state(1), dualtape.asarray(xs[:, None]))
    assert tuple(ys.shape) == (5, 1, 2)
    grads, d, dxs = rnet.backward_sequence(tape, None, dualtape.asarray(dys[:, None]))
    np.testing.assert_array_equal(np64(ys1), np64(ys)[:, 0])
    np.testing.assert_array_equal(np64(dxs1), np64(dxs)[:, 0])
    for a, b in zip(d1 + states1, d + states, strict=True):
        np.testing.assert_array_equal(np64(a), np64(b)[0])
    for g1, g in zip(grads1, grads, strict=True):
        for name in g:
            np.testing.assert_array_equal(np64(g1[name]), np64(g[name]))


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    hidden=st.lists(st.integers(1, 4), min_size=1, max_size=2),
    n_in=st.integers(1, 3),
    n_out=st.integers(1, 3),
    steps=st.integers(1, 4),
    batch=st.one_of(st.none(), st.integers(1, 3)),
    head=st.booleans(),
)
def test_network_shapes_for_any_sizes(backend, hidden, n_in, n_out, steps, batch, head):
    sizes = [n_in, *hidden]
    pairs = enumerate(zip(sizes[:-1], sizes[1:], strict=True))
    layers = [LSTM(a, b, seed=k, dtype=F64) for k, (a, b) in pairs]
    if head:
        layers.append(FullyConnected(hidden[-1], n_out, seed=9, dtype=F64))
    else:
        n_out = hidden[-1]
    rnet = RecurrentNetwork(layers)
    lead = () if batch is None else (batch,)
    xs = np.linspace(-1, 1, steps * (batch or 1) * n_in).reshape(steps, *lead, n_in)
    xs = dualtape.asarray(xs)
    tape, states, ys = rnet.forward_sequence(rnet.initial_state(batch), xs)
    assert tuple(ys.shape) == (steps, *lead, n_out)
    assert [tuple(s.shape) for s in states] == [(*lead, h) for h in hidden]
    grads, dstates, dxs = rnet.backward_sequence(tape, states, ys)
    assert tuple(dxs.shape) == (steps, *lead, n_in)
    assert [tuple(d.shape) for d in dstates] == [(*lead, h) for h in hidden]
    for g, p in zip(grads, rnet.params, strict=True):
        assert {k: tuple(a.shape) for k, a in g.items()} == {
            k: tuple(a.shape) for k, a in p.items()
        }
    next_states, y = rnet.step(states, xs[0, ...])
    assert tuple(y.shape) == (*lead, n_out)
    assert [tuple(s.shape) for s in next_states] == [(*lead, h) for h in hidden]


# ---- save / load --------------------------------------------------------------------------------


@pytest.mark.parametrize("source", ["here", "numpy"])
def test_save_load_round_trip_across_backends(backend, tmp_path, source):
    """Saved on one backend, loaded onto numpy and onto the fixture's backend (and device)."""
    if source == "numpy":
        with use_backend("numpy"):
            rnet = grenade_stack()
    else:
        rnet = grenade_stack()
    path = tmp_path / "rnet.npz"
    dualtape.save(rnet, path)
    expected = host_params(rnet)
    xs = np.random.default_rng(7).normal(size=(4, 2, 3))
    with use_backend("numpy"):
        _, _, reference = rnet.to("numpy").forward_sequence(
            [np.zeros((2, 5)), np.zeros((2, 4))], xs
        )

    for name, device in [("numpy", None), (backend.name, backend.device)]:
        loaded = dualtape.load(path, backend=name, device=device)
        assert isinstance(loaded, RecurrentNetwork)
        assert repr(loaded) == repr(rnet)
        for group in loaded.params:
            for p in group.values():
                assert backend_of(p).name == name and str(p.dtype).endswith(F64)
                if device is not None:
                    assert backend_of(p).device == device
        got = host_params(loaded)
        assert all(np.array_equal(got[k][n], expected[k][n]) for k in range(4) for n in got[k])
        with use_backend(name, device):
            _, _, ys = loaded.forward_sequence(loaded.initial_state(2), dualtape.asarray(xs))
        np.testing.assert_allclose(np64(ys), reference, rtol=1e-12, atol=1e-14)


# ---- bad input ----------------------------------------------------------------------------------


@pytest.fixture
def rnet(backend):
    return grenade_stack()


@pytest.mark.parametrize(
    ("shape", "got"),
    [((5, 2, 3, 1), "(5, 2, 3, 1)"), ((3,), "(3,)"), ((5, 2, 4), "(5, 2, 4)")],
    ids=["rank4", "rank1", "features"],
)
def test_sequence_of_wrong_rank_or_features_is_rejected(rnet, shape, got):
    expected = "input sequence must have shape (time, batch, 3) or (time, 3), got " + got
    xs = dualtape.asarray(np.zeros(shape))
    for call in (lambda: rnet.forward_sequence(rnet.initial_state(2), xs),
                 lambda: train_recurrent(rnet, xs, xs, SGD(rate=0.1))):
        with pytest.raises(ValueError) as info:
            call()
        assert "RecurrentNetwork" in str(info.value) and expected in str(info.value)


def test_state_of_wrong_batch_or_size_is_rejected(rnet):
    xs = dualtape.asarray(np.zeros((5, 2, 3)))
    with pytest.raises(ValueError, match=r"LSTM\(5, 4\): state must have shape \(2, 4\), "
                                         r"got \(3, 4\)"):
        rnet.forward_sequence([rnet.initial_state(2)[0], rnet.initial_state(3)[1]], xs)
    with pytest.raises(ValueError, match=r"LSTM\(3, 5\): state must have shape \(2, 5\), "
                                         r"got \(2, 4\)"):
        rnet.forward_sequence([rnet.initial_state(2)[1], rnet.initial_state(2)[1]], xs)
    with pytest.raises(ValueError, match=r"state must have shape \(2, 5\), got \(5,\)"):
        rnet.step(rnet.initial_state(), xs[0, ...])
    with pytest.raises(ValueError, match=r"state must have shape \(2, 5\), got \(3, 5\)"):
        train_recurrent(rnet, xs, dualtape.asarray(np.zeros((5, 2, 2))), SGD(rate=0.1),
                        state=rnet.initial_state(3))


def test_state_list_of_wrong_length_is_rejected(rnet):
    xs = dualtape.asarray(np.zeros((5, 2, 3)))
    with pytest.raises(ValueError, match=r"state must be a list of 2 arrays .* got a list of 1"):
        rnet.forward_sequence(rnet.initial_state(2)[:1], xs)
    with pytest.raises(ValueError, match=r"state must be a list of 2 arrays .* got a \w+$"):
        rnet.forward_sequence(rnet.initial_state(2)[0], xs)
    tape, _, _ = rnet.forward_sequence(rnet.initial_state(2), xs)
    with pytest.raises(ValueError, match=r"list of 2 arrays .* got a list of 3"):
        rnet.backward_sequence(tape, [None] * 3, dualtape.asarray(np.zeros((5, 2, 2))))


@pytest.mark.parametrize(("state", "message"), [
    ([[0.0] * 5, [0.0] * 4], r"state must have shape \(2, 5\), got \(5,\)"),
    ([[[0.0] * 5] * 3, None], r"state must have shape \(2, 5\), got \(3, 5\)"),
    (["zeros", None], "state must be an array, got str"),
    ([0.0] * 9, r"state must be a list of 2 arrays .* got a list of 9"),
    ([[1] * 5, None], "state must be floating point, got .*int64"),
], ids=["one-sequence-form", "rows", "string", "flat", "integers"])
@pytest.mark.parametrize("verb", ["backpropagate_sequence", "train_recurrent", "learn"])
def test_a_list_as_state_that_does_not_fit_is_named_in_one_line(rnet, verb, state, message):
    """Python lists as ``state``, in every training verb: the error names ``state``."""
    xs, targets = dualtape.asarray(np.zeros((5, 2, 3))), dualtape.asarray(np.zeros((5, 2, 2)))
    with pytest.raises((TypeError, ValueError), match=message) as raised:
        if verb == "backpropagate_sequence":
            dualtape.backpropagate_sequence(rnet, xs, targets, state=state)
        else:
            train_recurrent(rnet, xs, targets, SGD(rate=0.1), state=list(state),
                            learn_initial_state=verb == "learn")
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize("shape", [(4,), (5, 3), (5, 2, 1), (2, 5)])
def test_mask_of_wrong_shape_is_rejected(rnet, shape):
    xs = dualtape.asarray(np.zeros((5, 2, 3)))
    targets = dualtape.asarray(np.zeros((5, 2, 2)))
    before = host_params(rnet)
    with pytest.raises(ValueError) as info:
        train_recurrent(rnet, xs, targets, SGD(rate=0.1), mask=dualtape.asarray(np.ones(shape)))
    assert f"mask must have shape (5,) or (5, 2), got {shape}" in str(info.value)
    after = host_params(rnet)
    assert all(np.array_equal(before[k][n], after[k][n]) for k in range(4) for n in before[k])


def test_targets_of_wrong_shape_are_rejected(rnet):
    xs = dualtape.asarray(np.zeros((5, 2, 3)))
    with pytest.raises(ValueError, match=r"target must have shape \(5, 2, 2\), got \(5, 2, 3\)"):
        train_recurrent(rnet, xs, dualtape.asarray(np.zeros((5, 2, 3))), SGD(rate=0.1))


def test_empty_sequence_is_rejected(rnet):
    xs = dualtape.asarray(np.zeros((0, 2, 3)))
    message = r"RecurrentNetwork: the input sequence is empty \(T = 0\)"
    with pytest.raises(ValueError, match=message):
        rnet.forward_sequence(rnet.initial_state(2), xs)
    with pytest.raises(ValueError, match=message):
        train_recurrent(rnet, xs, dualtape.asarray(np.zeros((0, 2, 2))), SGD(rate=0.1))


def test_state_on_another_backend_is_a_type_error_naming_both(backend, rnet):
    xs = dualtape.asarray(np.zeros((5, 2, 3)))
    state = [rnet.initial_state(2)[0], other_backend_array(backend, np.zeros((2, 4)))[0]]
    other = backend_of(state[1]).name
    for call in (lambda: rnet.forward_sequence(state, xs),
                 lambda: train_recurrent(rnet, xs, dualtape.asarray(np.zeros((5, 2, 2))),
                                         SGD(rate=0.1), state=state)):
        with pytest.raises(TypeError, match=r"state is a") as info:
            call()
        assert f"{other} array" in str(info.value) and f"{backend.name} array" in str(info.value)
    with pytest.raises(TypeError, match=r"input sequence is a"):
        xs = other_backend_array(backend, np.zeros((5, 2, 3)))[0]
        rnet.forward_sequence(rnet.initial_state(2), xs)


def test_state_on_another_device_is_a_value_error_naming_both(backend, rnet):
    if backend.name != "array_api_strict":
        pytest.skip("only array_api_strict has a second (fake) device here")
    import array_api_strict

    here = str(backend.device)
    there = "device1" if "device1" not in here else "CPU_DEVICE"
    state = [rnet.initial_state(2)[0],
             array_api_strict.asarray(np.zeros((2, 4)), device=array_api_strict.Device(there))]
    with pytest.raises(ValueError, match=r"state is a array_api_strict array") as info:
        rnet.forward_sequence(state, dualtape.asarray(np.zeros((5, 2, 3))))
    assert there in str(info.value) and here in str(info.value)


# --- masks, optimizers and misuse ------------------------------------------------------------


@pytest.mark.parametrize("mask, error, match", [
    (np.array(list("abcd")), TypeError, "mask must be boolean or real 0/1"),
    (np.array([1, 0, 1j, 1]), TypeError, "mask must be boolean or real 0/1"),
    (np.array([1.0, np.nan, 1.0, 0.0]), ValueError, "only 0 and 1"),
    (np.array([1, 2, 1, 0]), ValueError, "only 0 and 1"),
    (np.array([1.0, -1.0, 1.0, 0.0]), ValueError, "only 0 and 1"),
    (np.array([1.0, 0.5, 1.0, 0.0]), ValueError, "only 0 and 1"),
    ("1101", TypeError, "mask must be an array"),
], ids=["strings", "complex", "nan", "two", "minus-one", "half", "a-string"])
def test_masks_other_than_boolean_or_0_1_are_refused(backend, mask, error, match):
    rnet = tiny_network()
    before = host_params(rnet)
    with pytest.raises(error, match=match):
        train_recurrent(rnet, dualtape.asarray(np.ones((4, 2, 2))),
                        dualtape.asarray(np.zeros((4, 2, 2))), SGD(0.1),
                        mask=mask if isinstance(mask, str) or backend.name == "numpy"
                        else list(mask))
    assert_params_equal(host_params(rnet), before)


@pytest.mark.parametrize("mask", [[1.0, 0.0, 1.0, 1.0], [1, 0, 1, 1]], ids=["float", "int"])
def test_real_0_1_masks_equal_the_boolean_mask(backend, mask):
    xs, targets = np.ones((4, 2, 2)), np.zeros((4, 2, 2))
    losses = []
    for m in (mask, [bool(v) for v in mask]):
        rnet = tiny_network()
        losses.append(train_recurrent(rnet, dualtape.asarray(xs), dualtape.asarray(targets),
                                      SGD(0.1), mask=m)[0])
    assert losses[0] == losses[1]


def test_train_recurrent_refuses_a_feed_forward_network_and_a_string_optimizer(backend):
    rnet = tiny_network()
    net = dualtape.Network([FullyConnected(2, 2, seed=0, dtype=F64)])
    xs, targets = dualtape.asarray(np.ones((3, 2, 2))), dualtape.asarray(np.zeros((3, 2, 2)))
    with pytest.raises(TypeError, match="expected a RecurrentNetwork, got a Network"):
        train_recurrent(net, xs, targets, SGD(0.1))
    with pytest.raises(TypeError, match="optimizer must be an optimizer object"):
        train_recurrent(rnet, xs, targets, "adam")


def test_train_recurrent_on_an_empty_batch_says_so(backend):
    rnet = tiny_network()
    with pytest.raises(ValueError, match="batch is empty"):
        train_recurrent(rnet, dualtape.asarray(np.ones((3, 0, 2))),
                        dualtape.asarray(np.zeros((3, 0, 2))), SGD(0.1))


def test_a_nan_state_is_named_not_the_targets(backend):
    rnet = tiny_network()
    state = [dualtape.asarray(np.full((2, 3), np.nan))]
    with pytest.raises(FloatingPointError, match="NaN or inf in the initial state") as info:
        train_recurrent(rnet, dualtape.asarray(np.ones((3, 2, 2))),
                        dualtape.asarray(np.zeros((3, 2, 2))), SGD(0.1), state=state)
    assert "targets" not in str(info.value)


@pytest.mark.parametrize("make", [lambda: SGD(0.1, momentum=0.9), lambda: Adam(0.01)],
                         ids=["sgd-momentum", "adam"])
def test_a_learned_state_keeps_its_optimizer_state_across_calls(backend, make):
    rnet, optimizer = tiny_network(), make()
    state = [dualtape.asarray(np.full((2, 3), 0.5))]
    xs, targets = dualtape.asarray(np.ones((3, 2, 2))), dualtape.asarray(np.zeros((3, 2, 2)))
    for _ in range(3):
        train_recurrent(rnet, xs, targets, optimizer, state=state, learn_initial_state=True)
    assert optimizer.steps == 3 and (2, "0") in optimizer.state  # groups: LSTM, FC, state
    with pytest.raises(ValueError, match="other parameter groups"):
        train_recurrent(rnet, xs, targets, optimizer, state=[dualtape.asarray(np.zeros((2, 3)))],
                        learn_initial_state=True)


def test_backward_sequence_refuses_a_tape_of_another_network(backend):
    rnet = tiny_network()
    other = RecurrentNetwork([LSTM(2, 3, seed=4, dtype=F64), Logit()])
    xs = dualtape.asarray(np.ones((3, 2, 2)))
    tape, _, _ = other.forward_sequence(other.initial_state(2), xs)
    dys = dualtape.asarray(np.ones((3, 2, 2)))
    with pytest.raises(ValueError, match="tape 1 is a LogitTape, not one of layer 1"):
        rnet.backward_sequence(tape, None, dys)
    with pytest.raises(ValueError, match="expected the tape forward_sequence returned"):
        rnet.backward_sequence(tape.tapes, None, dys)


def test_a_layer_and_a_network_take_the_same_backward_sequence_call(backend):
    # backward_sequence(tape, dstate_T, dys), positionally or by keyword, on both.
    layer = LSTM(2, 3, seed=4, dtype=F64)
    rnet = RecurrentNetwork([layer])
    xs, dys, dstate_T = (dualtape.asarray(np.linspace(-1, 1, np.prod(s)).reshape(s))
                         for s in ((4, 2, 2), (4, 2, 3), (2, 3)))
    layer_tape, _, _ = layer.forward_sequence(layer.initial_state(2), xs)
    net_tape, _, _ = rnet.forward_sequence(rnet.initial_state(2), xs)
    from_layer = layer.backward_sequence(layer_tape, dstate_T, dys)
    from_net = rnet.backward_sequence(net_tape, [dstate_T], dys)
    by_keyword = rnet.backward_sequence(net_tape, dys=dys, dstate_T=[dstate_T])
    assert from_layer[0].keys() == from_net[0][0].keys() == by_keyword[0][0].keys()
    for name in from_layer[0]:
        assert np.array_equal(np64(from_layer[0][name]), np64(from_net[0][0][name]))
        assert np.array_equal(np64(by_keyword[0][0][name]), np64(from_net[0][0][name]))
    assert np.array_equal(np64(from_layer[1]), np64(from_net[1][0]))
    assert np.array_equal(np64(from_layer[2]), np64(from_net[2]))
    keyword = layer.backward_sequence(layer_tape, dys=dys, dstate_T=None)
    assert np.array_equal(np64(keyword[2]), np64(rnet.backward_sequence(net_tape, None, dys)[2]))


def test_backward_sequence_arguments_in_the_old_order_raise(backend):
    layer = LSTM(2, 3, seed=4, dtype=F64)
    rnet = RecurrentNetwork([layer, FullyConnected(3, 2, seed=5, dtype=F64)])
    xs = dualtape.asarray(np.ones((4, 2, 2)))
    tape, state_T, ys = rnet.forward_sequence(rnet.initial_state(2), xs)
    with pytest.raises(ValueError, match=r"takes \(tape, dstate_T, dys\).* dys in its place"):
        rnet.backward_sequence(tape, ys, state_T)  # the old (tape, dys, dstate_T)
    with pytest.raises(ValueError, match=r"got a \w+ of shape \(4, 2, 2\) as dstate_T"):
        rnet.backward_sequence(tape, ys, None)
    with pytest.raises(TypeError, match="dys"):
        rnet.backward_sequence(tape, ys)  # the old two-argument form
    layer_tape, c_T, hs = layer.forward_sequence(layer.initial_state(2), xs)
    with pytest.raises(ValueError, match=r"dstate_T of shape \(4, 2, 3\) and dys of shape "
                                         r"\(2, 3\): the two look swapped"):
        layer.backward_sequence(layer_tape, hs, c_T)
    one_tape, one_c, one_hs = layer.forward_sequence(layer.initial_state(), xs[:, 0, :])
    with pytest.raises(ValueError, match="look swapped"):  # single example: (T, o) and (o,)
        layer.backward_sequence(one_tape, one_hs, one_c)
    with pytest.raises(TypeError, match="dstate_last"):  # the old keyword is gone, not ignored
        layer.backward_sequence(layer_tape, dstate_last=c_T, dys=hs)


def test_a_read_only_state_from_forward_sequence_can_be_learned(backend):
    # forward_sequence hands out read-only states on numpy: the update then replaces them.
    rnet = tiny_network()
    xs, targets = dualtape.asarray(np.ones((3, 2, 2))), dualtape.asarray(np.zeros((3, 2, 2)))
    _, state, _ = rnet.forward_sequence(rnet.initial_state(2), xs)
    before = np64(state[0]).copy()
    train_recurrent(rnet, xs, targets, SGD(0.1, momentum=0.5), state=state,
                    learn_initial_state=True)
    assert not np.array_equal(np64(state[0]), before)


@pytest.mark.parametrize("steps", [1, 4])
def test_backprop_without_state_gradients_gives_none_and_the_same_weight_gradients(
    backend, steps
):
    """What train_recurrent asks for when it learns no initial state: the products that only
    lead to dstate_0 are skipped, on the generic and the fast paths alike."""
    rng = np.random.default_rng(8)
    rnet = grenade_stack()
    xs = dualtape.asarray(rng.normal(size=(steps, 2, 3)))
    state = [dualtape.asarray(rng.normal(size=(2, 5))), dualtape.asarray(rng.normal(size=(2, 4)))]
    tape, _, ys = rnet.forward_sequence(state, xs)
    xp = namespace_of(ys)
    full, dstates, _ = rnet._backward_sequence(xp, tape, None, ys)
    grads, none, _ = rnet._backward_sequence(xp, tape, None, ys, need_dstates=False)
    assert none == [None, None] and all(d is not None for d in dstates)
    assert_params_equal([{k: np64(v) for k, v in g.items()} for g in grads],
                        [{k: np64(v) for k, v in g.items()} for g in full])


# --- None for zeros --------------------------------------------------------------------------


@pytest.mark.parametrize("lead", [(), (2,)], ids=["single", "batch2"])
def test_a_state_of_none_starts_from_zeros_as_train_recurrent_does(backend, lead):
    rnet = grenade_stack()
    rng = np.random.default_rng(9)
    xs = dualtape.asarray(rng.normal(size=(4, *lead, 3)))
    zeros = rnet.initial_state(lead[0] if lead else None)
    expected = rnet.forward_sequence(zeros, xs)
    for state in (None, [None, None], [zeros[0], None]):
        tape, states, ys = rnet.forward_sequence(state, xs)
        np.testing.assert_array_equal(np64(ys), np64(expected[2]))
        assert [tuple(s.shape) for s in states] == [tuple(s.shape) for s in expected[1]]
        for a, b in zip(states, expected[1], strict=True):
            np.testing.assert_array_equal(np64(a), np64(b))
        next_state, y = rnet.step(state, xs[0, ...])
        np.testing.assert_array_equal(np64(y), np64(rnet.step(zeros, xs[0, ...])[1]))
    loss, _ = train_recurrent(rnet, xs, expected[2], SGD(0.1))
    assert loss == 0.0  # from zeros, as the targets were made


def test_a_state_gradient_entry_of_none_is_zeros(backend):
    rnet = grenade_stack()
    xs = dualtape.asarray(np.random.default_rng(10).normal(size=(4, 2, 3)))
    tape, states, ys = rnet.forward_sequence(None, xs)
    expected = rnet.backward_sequence(tape, None, ys)
    partial = rnet.backward_sequence(tape, [None, rnet.initial_state(2)[1]], ys)
    for a, b in zip(expected[1] + [expected[2]], partial[1] + [partial[2]], strict=True):
        np.testing.assert_array_equal(np64(a), np64(b))


def test_a_tuple_of_states_to_learn_is_refused_before_any_update(backend):
    rnet = tiny_network()
    before = host_params(rnet)
    state = (dualtape.asarray(np.zeros((2, 3))),)
    with pytest.raises(ValueError, match="learn_initial_state=True needs `state`, a list"):
        train_recurrent(rnet, dualtape.asarray(np.ones((3, 2, 2))),
                        dualtape.asarray(np.zeros((3, 2, 2))), SGD(0.1), state=state,
                        learn_initial_state=True)
    assert_params_equal(host_params(rnet), before)


@pytest.mark.parametrize("change", ["append", "remove"])
def test_a_recurrent_layer_put_in_or_taken_out_after_construction_counts(backend, change):
    """``layers`` is a list a user may change: the states follow it (one per recurrent layer
    it holds now), and training the changed network is training a network built so."""
    from dualtape import GRU, StandardLSTM

    first = [FullyConnected(3, 3, seed=1, dtype="float64")]
    rest = [StandardLSTM(3, 4, seed=2, dtype="float64"), GRU(4, 2, seed=3, dtype="float64")]
    net = RecurrentNetwork(first + rest[:1] if change == "append" else first + rest)
    if change == "append":
        net.layers.append(rest[1])
    else:
        del net.layers[2]
        net.layers.append(FullyConnected(4, 2, seed=4, dtype="float64"))
    built = RecurrentNetwork(list(net.layers))  # the same layers, built so
    xs = dualtape.asarray(np.random.default_rng(0).standard_normal((5, 2, 3)))
    targets = dualtape.asarray(np.zeros((5, 2, 2)))
    changed = dualtape.backpropagate_sequence(net, xs, targets)
    fresh = dualtape.backpropagate_sequence(built, xs, targets)
    assert len(net.initial_state(2)) == len(net.recurrent_layers) == (2 if change == "append"
                                                                       else 1)
    assert [tuple(s.shape) for s in changed.state] == [tuple(s.shape) for s in fresh.state]
    np.testing.assert_allclose(np64(changed.loss), np64(fresh.loss), rtol=1e-12)
