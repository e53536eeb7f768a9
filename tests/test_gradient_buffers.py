"""train_recurrent writes the LSTM gradients into arrays reused between calls (numpy, CuPy)."""

from __future__ import annotations

import numpy as np
import pytest

import dualtape
from dualtape.backend import out_module
from dualtape.kernels import cpu_path
from dualtape.layers.linear_algebra import EINSUM_MIN, batch_outer
from dualtape.recurrent import gradient_buffers

from .conftest import np64
from .helpers import assert_params_equal, host_params


class Recording:
    """An SGD that remembers the gradient arrays it was given."""

    def __init__(self) -> None:
        self.inner, self.seen = dualtape.SGD(0.1, momentum=0.5), []

    def step(self, params, grads):
        self.seen.append([dict(g) for g in grads])
        self.inner.step(params, grads)


def seed_net(dtype="float64", hidden=5):
    return dualtape.RecurrentNetwork([dualtape.LSTM(3, hidden, seed=1, dtype=dtype),
                                      dualtape.LSTM(hidden, 3, seed=2, dtype=dtype)])


def test_training_reuses_the_gradient_arrays_where_they_take_writes(backend):
    net, optimizer = seed_net(), Recording()
    xs = dualtape.asarray(np.random.default_rng(0).uniform(-1, 1, (4, 2, 3)))
    for _ in range(2):
        dualtape.train_recurrent(net, xs, xs, optimizer)
    first, second = optimizer.seen
    reused = [first[k][name] is second[k][name] for k in range(2) for name in first[k]]
    assert all(reused) if backend.name in ("numpy", "cupy") else not any(reused)


@pytest.mark.parametrize(("steps", "hidden"), [(5, 5), (1, 5), (1, 64)],
                         ids=["products", "outer", "einsum-outer"])
def test_reused_buffers_give_the_same_training_as_fresh_gradients(backend, steps, hidden):
    """One step at batch 1 writes outer products, of U (3·64 × 64) through einsum; the
    initial cells are not zero, so U's gradient is not zero either."""
    rng = np.random.default_rng(1)
    xs, targets = (dualtape.asarray(rng.uniform(-1, 1, (steps, 1, 3))) for _ in range(2))
    trained, by_hand = seed_net(hidden=hidden), seed_net(hidden=hidden)
    state = [dualtape.asarray(rng.uniform(-1, 1, (1, n))) for n in (hidden, 3)]
    fast, plain = dualtape.SGD(0.1, momentum=0.5), dualtape.SGD(0.1, momentum=0.5)
    for _ in range(3):
        loss = dualtape.train_recurrent(trained, xs, targets, fast, state=state)[0]
        tape, _, ys = by_hand.forward_sequence(state, xs)
        grads, _, _ = by_hand.backward_sequence(tape, None, ys - targets)
        plain.step(by_hand.params, grads)
        assert loss == pytest.approx(0.5 * float(np.sum((np64(ys) - np64(targets)) ** 2)),
                                     rel=1e-12)
    assert_params_equal(host_params(trained), host_params(by_hand))


def test_buffers_follow_the_parameters_shape_and_place(backend):
    net = seed_net()
    buffers = gradient_buffers(net)
    assert gradient_buffers(net) is buffers
    if backend.name not in ("numpy", "cupy"):
        assert buffers == [None, None]
        return
    assert [{k: b.shape for k, b in group.items()} for group in buffers] == [
        {k: p.shape for k, p in layer.params.items()} for layer in net.layers]
    net.to("array_api_strict")
    assert gradient_buffers(net) == [None, None], "no out= writes on array_api_strict"
    net.to(backend.name)
    assert all(b.dtype == np.float64 for group in gradient_buffers(net) for b in group.values())


@pytest.mark.parametrize("shape", [(1, 7, 9), (1, 96, 128), (4, 96, 128)],
                         ids=["one-row", "one-row-einsum", "rows"])
def test_batch_outer_into_a_buffer_is_the_product_bit_for_bit(backend, shape):
    rows, m, n = shape
    rng = np.random.default_rng(3)
    a, b = (rng.uniform(-1, 1, (rows, k)) for k in (m, n))
    out = dualtape.asarray(np.full((m, n), np.nan))
    if out_module(out) is None:
        pytest.skip(f"{backend.name} arrays take no out= writes")
    assert (m * n >= EINSUM_MIN) == (shape[1] == 96)
    result = batch_outer(dualtape.asarray(a), dualtape.asarray(b), out)
    assert result is out
    np.testing.assert_array_equal(np64(out), a.T @ b if rows > 1 else a.T * b)


def test_buffers_follow_a_parameter_dict_replaced_by_another_dtype_or_layer(backend):
    if backend.name not in ("numpy", "cupy"):
        pytest.skip(f"{backend.name}: no gradient buffers (no out= writes)")
    net = seed_net()
    first = gradient_buffers(net)
    layer = net.layers[0]
    layer.params = {k: backend.xp.astype(p, backend.xp.float32) for k, p in layer.params.items()}
    again = gradient_buffers(net)
    assert again is not first
    assert [b.dtype for b in again[0].values()] == [np.float32] * 3
    net.layers.append(dualtape.LSTM(net.layers[-1].n_out, 2, seed=5, dtype="float64"))
    assert len(gradient_buffers(net)) == 3  # a layer added: one more entry, not an error


@pytest.mark.parametrize("tape", ["full", 2], ids=["full-tape", "checkpointed"])
def test_a_fully_connected_layer_fills_its_buffers_too(backend, tape):
    """Its gradients come back in the same arrays each call where they take writes, and train
    as fresh ones do, through either tape (a checkpointed one adds later segments' buffers
    into the first segment's new arrays)."""
    rng = np.random.default_rng(4)
    xs, targets = (dualtape.asarray(rng.uniform(-1, 1, (5, 1, 3))) for _ in range(2))
    nets = [dualtape.RecurrentNetwork([dualtape.LSTM(3, 4, seed=1, dtype="float64"),
                                       dualtape.FullyConnected(4, 3, seed=2, dtype="float64")])
            for _ in range(2)]
    recording, plain = Recording(), dualtape.SGD(0.1, momentum=0.5)
    for _ in range(2):
        dualtape.train_recurrent(nets[0], xs, targets, recording, tape=tape)
        found, _, ys = nets[1].forward_sequence(None, xs, tape=tape)
        grads, _, _ = nets[1].backward_sequence(found, None, ys - targets)
        plain.step(nets[1].params, grads)
    first, second = recording.seen
    buffered = backend.name in ("numpy", "cupy") and tape == "full"
    assert all((first[1][k] is second[1][k]) == buffered for k in ("W", "b"))
    assert_params_equal(host_params(nets[0]), host_params(nets[1]))


CELLS = ("StandardLSTM", "GRU")


@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize(("inputs", "steps", "tape"), [
    ("rows", 5, "full"), ("rows", 1, "full"), ("ids", 5, "full"), ("embedding", 5, "full"),
    ("rows", 5, 2)], ids=["products", "one-step", "ids", "embedding", "checkpointed"])
def test_the_standard_cells_fill_their_buffers_and_train_as_fresh_gradients(
        backend, cell, inputs, steps, tape):
    """StandardLSTM and GRU (torch's layout, two biases; StandardLSTM's share one gradient)
    receive their gradients in the same arrays each call where they take writes, fed rows,
    ids or an Embedding's table (``stack.fuses``), and train bit for bit as the fresh
    gradients of the public passes do."""
    rng = np.random.default_rng(5)
    kind = getattr(dualtape, cell)

    def net() -> dualtape.RecurrentNetwork:
        first = [dualtape.Embedding(3, 2, seed=3, dtype="float64"), kind(2, 4, seed=1,
                                                                         dtype="float64")] \
            if inputs == "embedding" else [kind(3, 4, seed=1, dtype="float64")]
        return dualtape.RecurrentNetwork([*first, kind(4, 3, seed=2, dtype="float64")])

    nets = [net(), net()]
    if inputs in ("ids", "embedding"):
        xs = dualtape.asarray(rng.integers(0, 3, (steps, 2)))
    else:
        xs = dualtape.asarray(rng.uniform(-1, 1, (steps, 2, 3)))
    targets = dualtape.asarray(rng.uniform(-1, 1, (steps, 2, 3)))
    recording, plain = Recording(), dualtape.SGD(0.1, momentum=0.5)
    for _ in range(3):
        dualtape.train_recurrent(nets[0], xs, targets, recording, tape=tape)
        found, _, ys = nets[1].forward_sequence(None, xs, tape=tape)
        grads, _, _ = nets[1].backward_sequence(found, None, (ys - targets) / 2)  # batch 2
        plain.step(nets[1].params, grads)
    first, last = recording.seen[0], recording.seen[-1]
    fast = backend.name == "cupy" or (backend.name == "numpy" and cpu_path()[0] == "compiled")
    buffered = fast and tape == "full"  # the ufunc loop is the LSTM's alone
    cells = range(len(nets[0].layers) - 2, len(nets[0].layers))  # (an Embedding's: new)
    assert [first[k][name] is last[k][name] for k in cells for name in first[k]] == \
        [buffered] * 8
    assert_params_equal(host_params(nets[0]), host_params(nets[1]))


@pytest.mark.parametrize("cell", CELLS)
def test_the_standard_cells_generic_path_returns_fresh_gradients(backend, cell, monkeypatch):
    """Without the fast paths (``DUALTAPE_FUSED=0``) the generic code, the reference, writes
    into no buffers, as the LSTM's."""
    if backend.name not in ("numpy", "cupy"):
        pytest.skip(f"{backend.name}: no gradient buffers (no out= writes)")
    monkeypatch.setenv("DUALTAPE_FUSED", "0")
    net = dualtape.RecurrentNetwork([getattr(dualtape, cell)(3, 4, seed=1, dtype="float64")])
    rng = np.random.default_rng(6)
    xs, targets = (dualtape.asarray(rng.uniform(-1, 1, (4, 2, n))) for n in (3, 4))
    found = dualtape.backpropagate_sequence(net, xs, targets)
    buffers = gradient_buffers(net)[0]
    assert not any(found.grads[0][name] is buffers[name] for name in buffers)


@pytest.mark.parametrize("net", ["lstm", "gru", "fully-connected"])
def test_a_gradient_made_read_only_is_replaced_not_written(backend, net):
    """A caller that made a call's gradients read-only (to keep them) gets new buffers on the
    next call, which trains as fresh gradients do; what it kept holds what it held."""
    if backend.name != "numpy":
        pytest.skip("numpy's read-only flag (CuPy has none)")
    cell = {"lstm": dualtape.LSTM, "gru": dualtape.GRU}.get(net)
    layers = [cell(3, 4, seed=1, dtype="float64")] if cell else [
        dualtape.LSTM(3, 4, seed=1, dtype="float64"),
        dualtape.FullyConnected(4, 4, seed=2, dtype="float64")]
    nets = [dualtape.RecurrentNetwork(layers), dualtape.RecurrentNetwork(
        [type(layer)(layer.n_in, layer.n_out, seed=k + 1, dtype="float64")
         for k, layer in enumerate(layers)])]
    rng = np.random.default_rng(7)
    xs, targets = (dualtape.asarray(rng.uniform(-1, 1, (4, 2, n))) for n in (3, 4))
    recording, plain = Recording(), dualtape.SGD(0.1, momentum=0.5)
    for call in range(2):
        dualtape.train_recurrent(nets[0], xs, targets, recording)
        if call == 0:
            kept = recording.seen[0][-1]
            for g in kept.values():
                g.flags.writeable = False
            held = {k: g.copy() for k, g in kept.items()}
        found, _, ys = nets[1].forward_sequence(None, xs)
        grads, _, _ = nets[1].backward_sequence(found, None, (ys - targets) / 2)  # batch 2
        plain.step(nets[1].params, grads)
    assert all(np.array_equal(kept[k], held[k]) for k in kept)
    assert all(recording.seen[1][-1][k] is not kept[k] for k in kept)
    assert_params_equal(host_params(nets[0]), host_params(nets[1]))
