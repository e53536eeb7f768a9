"""``backpropagate_sequence`` in few calls (``planned_backprop``): the layer path's bits, and
the layer path wherever the plan does not apply."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import dualtape
from dualtape import planned_backprop
from dualtape.backend import to_numpy
from dualtape.kernels import numba_grads, overlap, selfcheck
from dualtape.layers import lstm
from dualtape.losses import softmax_cross_entropy

from .test_descent import fuses_here
from .test_flush import needs_flushing, saturated, subnormals


def compiled_stack(net, verb="backpropagate_sequence"):
    """Whether ``net``'s latest call of ``verb`` ran the planned pass's compiled stack of
    LSTMs, as the route record says (its route planned or the whole step, the compiled stack
    not declined)."""
    took = dualtape.last_route(net, verb)
    return took is not None and took.taken in ("planned", "whole-step") and (
        "compiled stack" not in dict(took.declined))


def network(vocab=0, sizes=(5, 4), top=3, dtype="float64", seed=1, inputs=3):
    """LSTMs of ``sizes`` fed ids of ``vocab`` (or ``inputs`` features), a FullyConnected of
    ``top`` outputs on top (0: none)."""
    first = vocab or inputs
    layers = [dualtape.LSTM(a, b, seed=seed + k, dtype=dtype)
              for k, (a, b) in enumerate(zip((first, *sizes[:-1]), sizes, strict=True))]
    if top:
        layers.append(dualtape.FullyConnected(sizes[-1], top, seed=seed + 9, dtype=dtype))
    return dualtape.RecurrentNetwork(layers)


def sequences(vocab=0, steps=6, batch=3, inputs=3, outputs=3, dtype="float64", seed=2):
    rng = np.random.default_rng(seed)
    xs = rng.integers(0, vocab, (steps, batch)) if vocab else rng.uniform(
        -1, 1, (steps, batch, inputs)).astype(dtype)
    labels = rng.integers(0, outputs, (steps, batch))
    return dualtape.asarray(xs), dualtape.asarray(labels)


def entropy(xp, ys, labels, weights=None):
    return softmax_cross_entropy(xp, ys, labels, weights)


def results(found):
    """A ``Backprop``'s loss, gradients and states as host copies."""
    return (float(found.loss), [{k: to_numpy(v).copy() for k, v in g.items()}
                                for g in found.grads], [to_numpy(s).copy() for s in found.state])


def assert_same_bits(a, b):
    assert a[0] == b[0] or (np.isnan(a[0]) and np.isnan(b[0]))
    for ga, gb in zip(a[1], b[1], strict=True):
        assert sorted(ga) == sorted(gb) and all(np.array_equal(ga[k], gb[k], equal_nan=True)
                                                for k in ga)
    assert all(np.array_equal(x, y, equal_nan=True) for x, y in zip(a[2], b[2], strict=True))


def layer_path(net, xs, labels, loss=entropy):
    """``backpropagate_sequence`` on the layer path: the initial states' gradient is not
    planned (and changes nothing else)."""
    return results(dualtape.backpropagate_sequence(net, xs, labels, loss=loss,
                                                   need_dstate=True))


@pytest.mark.parametrize(("vocab", "sizes", "top"), [
    (7, (5, 4), 3), (7, (6,), 3), (0, (5, 4), 3), (0, (5, 4, 6), 0), (0, (4,), 0)],
    ids=["ids-2-top", "ids-1-top", "inputs-2-top", "inputs-3", "inputs-1"])
@pytest.mark.parametrize(("steps", "batch"), [(6, 3), (1, 2), (5, 1)])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_the_planned_pass_gives_the_layer_paths_bits(backend, vocab, sizes, top, steps,
                                                     batch, dtype):
    """Two calls (the second from the kept plan): the loss, every gradient and the last
    states bit for bit; the gradients in the network's kept buffers."""
    net = network(vocab, sizes, top, dtype)
    outputs = top or sizes[-1]
    xs, labels = sequences(vocab, steps, batch, outputs=outputs, dtype=dtype)
    for seed in (2, 3):
        xs, labels = sequences(vocab, steps, batch, outputs=outputs, dtype=dtype, seed=seed)
        got = dualtape.backpropagate_sequence(net, xs, labels, loss=entropy)
        assert got.dstate is None and compiled_stack(net) == fuses_here(backend)
        assert_same_bits(results(got), layer_path(net, xs, labels))


def test_the_planned_pass_agrees_with_the_generic_code(backend, monkeypatch):
    """Against ``DUALTAPE_FUSED=0`` (the array-API code), to rounding."""
    xs, labels = sequences(7)
    found = {}
    for switch in ("1", "0"):
        monkeypatch.setenv("DUALTAPE_FUSED", switch)
        found[switch] = results(dualtape.backpropagate_sequence(network(7), xs, labels,
                                                                loss=entropy))
    assert found["1"][0] == pytest.approx(found["0"][0], rel=1e-12)
    for a, b in zip(found["1"][1], found["0"][1], strict=True):
        for k in a:
            np.testing.assert_allclose(a[k], b[k], rtol=1e-10, atol=1e-13)


@pytest.mark.parametrize("case", [
    "dstate", "ufunc-loop", "one-row", "two-top-layers", "fully-connected-only", "read-only-weight",
    "memory-mapped-weight"])
def test_the_other_calls_take_the_layer_path(backend, monkeypatch, tmp_path, case):
    """None of these is planned, as the record says and ``route`` foresaw; each still gives
    the layer path's gradients."""
    net, (xs, labels), options, loss = network(7), sequences(7), {}, entropy
    if case == "dstate":
        options = {"need_dstate": True}
    elif case == "ufunc-loop":
        monkeypatch.setenv("DUALTAPE_JIT", "0")
    elif case == "one-row":
        xs, labels = sequences(7, steps=1, batch=1)
    elif case == "fully-connected-only":
        xs, labels = sequences(0)
        net = dualtape.RecurrentNetwork([dualtape.FullyConnected(3, 3, seed=1, dtype="float64")])
    elif case == "two-top-layers":
        net = dualtape.RecurrentNetwork([*network(7, (5,), 4).layers,
                                         dualtape.FullyConnected(4, 3, seed=4, dtype="float64")])
    elif case == "read-only-weight" and backend.name == "numpy":
        net.layers[1].params["U"].flags.writeable = False  # frozen: numba types it apart
    elif case == "memory-mapped-weight" and backend.name == "numpy":
        mapped = np.memmap(tmp_path / "W", "float64", "w+", shape=(16, 5))
        mapped[...] = net.layers[1].params["W"]
        net.layers[1].params["W"] = np.memmap(tmp_path / "W", "float64", "r", shape=(16, 5))
    foreseen = dualtape.route(net, xs, labels, verb="backpropagate_sequence", loss=loss,
                              **options)
    found = dualtape.backpropagate_sequence(net, xs, labels, loss=loss, **options)
    took = dualtape.last_route(net, "backpropagate_sequence")
    assert took == foreseen and took.taken == "layers" and "planned" in dict(took.declined)
    assert np.isfinite(float(found.loss))
    assert any(np.abs(to_numpy(g)).sum() > 0 for g in found.grads[-1].values())


@pytest.mark.parametrize("vocab", [7, 0], ids=["ids", "inputs"])
@pytest.mark.parametrize("sizes", [(5, 4), (6,), (5, 6, 4)], ids=["2", "1", "3"])
@pytest.mark.parametrize("joined", [True, False], ids=["joined", "apart"])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_the_planned_pass_hands_each_layers_weight_gradients_to_a_second_core(
        backend, monkeypatch, vocab, sizes, joined, dtype):
    """Inside ``overlap_gradients()`` (every product large enough to hand over here) the
    planned pass is taken, its weight gradients (the top's and each LSTM's) run on the worker
    or, where the worker has not begun them when the pass ends, by the caller: the layer
    path's bits all the same. The worker is held back on its first, so the caller runs the
    rest after the whole chain: each layer's blocks must still be its own by then."""
    monkeypatch.setattr(overlap, "HAND_OVER_FROM", 0)
    monkeypatch.setattr(overlap, "HAND_OVER_ROWS", 0)
    if not joined:
        monkeypatch.setattr(lstm, "JOIN_UP_TO", 0)
        monkeypatch.setattr(planned_backprop, "JOIN_UP_TO", 0)
    handed, right = [], overlap._run

    def recording(call, args, control):
        handed.append(call.__name__)
        if threading.current_thread() is not threading.main_thread():
            time.sleep(0.05)
        right(call, args, control)

    monkeypatch.setattr(overlap, "_run", recording)
    net = network(vocab, sizes, dtype=dtype)
    xs, labels = sequences(vocab, dtype=dtype)
    with overlap.overlap_gradients():
        foreseen = dualtape.route(net, xs, labels, verb="backpropagate_sequence", loss=entropy)
        got = results(dualtape.backpropagate_sequence(net, xs, labels, loss=entropy))
    took = dualtape.last_route(net, "backpropagate_sequence")
    assert took == foreseen and took.second_core == (backend.name == "numpy")
    assert ("weight gradients on a second core" in str(took)) == took.second_core
    if fuses_here(backend):
        assert str(took) == ("backpropagate_sequence: planned, compiled loops, weight gradients "
                             "on a second core")
    assert_same_bits(got, layer_path(network(vocab, sizes, dtype=dtype), xs, labels))
    if fuses_here(backend):
        assert took.taken == "planned"
        assert sorted(handed) == ["layer_grads"] * len(sizes) + ["top_grads"]


@pytest.mark.parametrize(("case", "error", "message"), [
    ("id-too-large", ValueError, r"ids from 0 to 7, but .* takes ids in \[0, 7\)"),
    ("negative-id", ValueError, r"ids from -1 to 6, but .* takes ids in \[0, 7\)"),
    ("label-too-large", ValueError, r"class labels must lie in \[0, 3\)"),
    ("short-loss-gradient", ValueError, r"backpropagate_sequence: the loss gradient must have "
                                        r"shape \(6, 3, 3\), got \(6, 3, 1\)"),
])
def test_a_refused_call_raises_the_layer_paths_error(backend, case, error, message):
    """Ids outside the vocabulary, labels outside the classes, a loss gradient of another
    shape (never read past its end): the layer path's error, no route on the record (nor
    anything written)."""
    net, (xs, labels) = network(7), sequences(7)
    host_xs, host_labels = to_numpy(xs).copy(), to_numpy(labels).copy()
    loss = entropy
    if case == "id-too-large":
        host_xs[2, 1] = 7
    elif case == "negative-id":
        host_xs[0, 0] = -1
    elif case == "label-too-large":
        host_labels[3, 2] = 3
    else:
        def loss(xp, ys, labels):  # (T, B, 1) for (T, B, 3) outputs
            value, dys = entropy(xp, ys, labels)
            return value, dys[..., :1]
    for state in (None, [None, None]):  # planned, and the layer path
        with pytest.raises(error, match=message):
            dualtape.backpropagate_sequence(net, dualtape.asarray(host_xs),
                                            dualtape.asarray(host_labels), loss=loss,
                                            state=state)
    assert dualtape.last_route(net, "backpropagate_sequence") is None


def test_a_read_only_gradient_buffer_is_replaced_not_written(backend):
    """A caller keeps a call's gradients by making them read-only: the next call writes new
    buffers (the layer path's bits, planned again), the kept ones hold what they held."""
    if backend.name != "numpy":
        pytest.skip("gradient buffers are kept on numpy and CuPy (which has no read-only flag)")
    net, (xs, labels) = network(7), sequences(7)
    first = dualtape.backpropagate_sequence(net, xs, labels, loss=entropy).grads
    assert compiled_stack(net) == fuses_here(backend)
    kept = first[0]["U"]
    kept.flags.writeable = False
    held = kept.copy()
    xs, labels = sequences(7, seed=5)
    second = dualtape.backpropagate_sequence(net, xs, labels, loss=entropy)
    assert compiled_stack(net) == fuses_here(backend)
    assert np.array_equal(kept, held) and second.grads[0]["U"] is not kept
    assert all(g.flags.writeable for group in second.grads for g in group.values())
    assert_same_bits(results(second), layer_path(net, xs, labels))


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_a_non_finite_input_gives_a_nan_loss(backend, bad):
    """As on the layer path: the loss NaN, whatever the saturating layers made of it."""
    net, (xs, labels) = network(0), sequences(0)
    host = to_numpy(xs).copy()
    host[3, 1, 2] = bad
    xs = dualtape.asarray(host)
    got = results(dualtape.backpropagate_sequence(net, xs, labels, loss=entropy))
    assert np.isnan(got[0]) and compiled_stack(net) == fuses_here(backend)
    assert_same_bits(got, layer_path(net, xs, labels))


class _Doubled(dualtape.FullyConnected):
    """A FullyConnected whose output is twice the plain one's: not planned."""

    def _forward(self, xp, x):
        tape, y = super()._forward(xp, x)
        return tape, 2 * y

    def _backward(self, xp, tape, dy, grads_out=None):
        return super()._backward(xp, tape, 2 * dy, grads_out)


@pytest.mark.parametrize("change", ["new-array", "in-place", "new-form", "new-layer",
                                    "subclass-same-arrays", "new-buffers"])
def test_a_change_between_calls_is_taken_into_account(backend, change):
    """The plan is made again after a new array, layer, buffer or input form; an in-place
    write is read as it is."""
    net, (xs, labels) = network(7), sequences(7)
    dualtape.backpropagate_sequence(net, xs, labels, loss=entropy)
    assert compiled_stack(net) == fuses_here(backend)
    if change == "new-array":
        net.layers[0].params["W"] = net.layers[0].params["W"] * 0.5
    elif change == "in-place":
        net.layers[1].params["U"][...] *= 0.5
    elif change == "new-form":
        xs, labels = sequences(7, steps=4, batch=2, seed=5)
    elif change == "new-layer":
        net.layers[1] = dualtape.LSTM(5, 4, seed=7, dtype="float64")
    elif change == "subclass-same-arrays":  # only the layer itself tells it apart
        doubled = _Doubled(4, 3, seed=8, dtype="float64")
        doubled.params.update(net.layers[-1].params)
        net.layers[-1] = doubled
    else:  # the kept buffers dropped: the next call's are new arrays
        dualtape.recurrent._GRADIENT_BUFFERS.pop(net)
    got = results(dualtape.backpropagate_sequence(net, xs, labels, loss=entropy))
    again = compiled_stack(net)
    assert_same_bits(got, layer_path(net, xs, labels))
    if fuses_here(backend):
        assert again == (change != "subclass-same-arrays")
        if change == "subclass-same-arrays":
            return
        buffers = dualtape.recurrent.gradient_buffers(net)
        found = dualtape.backpropagate_sequence(net, xs, labels, loss=entropy)
        assert all(g is b for fg, bg in zip(found.grads, buffers, strict=True)
                   for g, b in zip(fg.values(), bg.values(), strict=True))


def test_a_named_loss_is_planned_too(backend):
    net, (xs, _) = network(0, top=0), sequences(0)
    targets = dualtape.asarray(np.random.default_rng(4).uniform(-1, 1, (6, 3, 4)))
    got = results(dualtape.backpropagate_sequence(net, xs, targets))
    assert compiled_stack(net) == fuses_here(backend)
    want = results(dualtape.backpropagate_sequence(net, xs, targets, need_dstate=True))
    assert_same_bits(got, want)


@pytest.mark.parametrize("form", ["strided", "F order", "float32"])
def test_a_loss_gradient_in_another_form_is_taken_as_the_layer_path_takes_it(backend, form):
    """A loss may hand back its gradient as any view of the right shape, or in another float
    dtype (cast to the network's, as ``backward`` takes ``dy``): the layer path's bits, the
    loss called once. A strided one is not planned (the layer path's products of it are not
    those of its C-ordered copy): the layer path takes the loss's first result."""
    calls = []

    def loss(xp, ys, labels):
        calls.append(form)
        value, dys = entropy(xp, ys, labels)
        if form == "strided":  # every other float of a wider array
            return value, xp.stack([dys, xp.zeros_like(dys)], axis=-1)[..., 0]
        if form == "float32":
            return value, xp.astype(dys, xp.float32)
        return value, np.asfortranarray(dys) if type(dys) is np.ndarray else dys

    net, (xs, labels) = network(7), sequences(7)
    got = results(dualtape.backpropagate_sequence(net, xs, labels, loss=loss))
    assert calls == [form]
    assert compiled_stack(net) == (form == "float32" and fuses_here(backend))
    assert_same_bits(got, layer_path(net, xs, labels, loss))


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_the_compiled_gradients_pass_their_self_check(dtype):
    pytest.importorskip("numba")
    assert numba_grads.check_compiled(numba_grads, np.zeros(1, dtype)) is None


class _Planted:
    """``numba_grads`` with one buffer of one layer off by one part in 10⁹ after the call."""

    StackGrads = numba_grads.StackGrads

    def __init__(self, where: str) -> None:
        self.where = where

    def stack_grads(self, operands, work, xs, *args):
        numba_grads.stack_grads(operands, work, xs, *args)
        target = {"top": operands.top[1][0] if operands.top else operands.dbs[-1],
                  "first": operands.dWs[0], "bias": operands.dbs[-1]}[self.where]
        target *= 1 + 1e-9 * (xs.ndim == 2 if self.where == "first" else 1)


@pytest.mark.parametrize("where", ["top", "first", "bias"])
def test_the_self_check_catches_planted_bugs(where):
    pytest.importorskip("numba")
    assert "differ from numpy's" in numba_grads.check_compiled(_Planted(where), np.zeros(1))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_saturated_network_gives_the_layer_paths_bits_with_no_subnormal(backend, dtype):
    """Flushed as the layer path is: the same bits where its unflushed loops would make
    subnormals (``tests/test_flush.py``), and none in the gradients."""
    if backend.name != "numpy":
        pytest.skip("the flushing is numpy's (the CPU fast paths)")
    needs_flushing()
    net, xs = saturated("LSTM", dtype)
    targets = np.zeros((20, 2, 6), dtype)
    got = results(dualtape.backpropagate_sequence(net, xs, targets))
    assert compiled_stack(net) == fuses_here(backend)
    assert_same_bits(got, results(dualtape.backpropagate_sequence(net, xs, targets,
                                                                  need_dstate=True)))
    assert subnormals([a for g in got[1] for a in g.values()]) == 0



@pytest.mark.parametrize(("failing", "warned"), [
    ("own", "compiled gradients of a stack disagree"),
    ("lstm-loops", "compiled CPU LSTM loops disagree"),
    ("row-sums", "compiled row sums by id disagree")])
def test_a_failed_self_check_keeps_the_layer_path(monkeypatch, failing, warned):
    """Where its own self-check, the LSTM loops' or the row sums by id's fails (one warning),
    ids are not planned, with the layer path's bits; inputs still are where only the row sums
    by id failed (the layer path then sums by numpy's sort: other bits)."""
    if not fuses_here(dualtape.backend.resolve_backend("numpy")):
        pytest.skip("the planned pass runs with the compiled loops")
    monkeypatch.setattr(selfcheck, "_VERDICTS", {})
    if failing == "lstm-loops":
        for module in (lstm, planned_backprop):
            monkeypatch.setattr(module, "fused_disagreement", lambda path, like: "planted")
    else:
        monkeypatch.setattr(planned_backprop,
                            "check_compiled" if failing == "own" else "check_scatter",
                            lambda loops, like: "planted")
    net, (xs, labels) = network(7), sequences(7)
    with pytest.warns(RuntimeWarning, match=warned):
        got = results(dualtape.backpropagate_sequence(net, xs, labels, loss=entropy))
    took = dualtape.last_route(net, "backpropagate_sequence")
    assert took.taken == "layers" and "self-check" in dict(took.declined)["planned"]
    assert_same_bits(got, layer_path(net, xs, labels))
    net, (xs, labels) = network(0), sequences(0)
    dualtape.backpropagate_sequence(net, xs, labels, loss=entropy)
    took = dualtape.last_route(net, "backpropagate_sequence")
    assert (took.taken == "planned") == (failing == "row-sums")
