"""The step in the backward pass: its refusals in their own words, the inputs the network
prepares first (one sequence, a list, another dtype or order) taken by the planned pass with
the prepared input's bits, and the choices kept between training calls against a fresh
network's (generated mutants of ``planned_backprop`` and ``route_choice``)."""

from __future__ import annotations

import numpy as np
import pytest

import dualtape
from dualtape import planned_backprop
from dualtape.backend import to_numpy

from .helpers import host_params
from .test_descent import fuses_here, stack

NOT_WEIGHT = "a weight that is not a C-order numpy array of one dtype"
READ_ONLY = "a parameter or gradient buffer that is read-only or not C order"
REASONS = {  # why the whole step declines, on numpy with the compiled loops
    "top": "a FullyConnected on top",
    "wrapper": "Wrapper is not SGD itself",
    "fortran-weight": NOT_WEIGHT,
    "read-only-weight": READ_ONLY,
}


class Wrapper:
    """An optimizer that is not an ``Optimizer`` (as ``DataParallel`` wraps one)."""

    def step(self, params, grads):
        raise AssertionError("not called")


@pytest.mark.parametrize("case", list(REASONS))
def test_each_refusal_of_the_whole_step_is_said_in_its_words(backend, case):
    if not fuses_here(backend):
        pytest.skip("the whole step runs on numpy with the compiled loops")
    net, optimizer = stack((3, 5, 4)), dualtape.SGD(0.1)
    xs = np.random.default_rng(1).uniform(-1, 1, (6, 2, 3))
    if case == "top":
        net.layers.append(dualtape.FullyConnected(4, 2, seed=3, dtype="float64"))
    elif case == "wrapper":
        optimizer = Wrapper()
    elif case == "fortran-weight":
        net.layers[1].params["W"] = np.asfortranarray(net.layers[1].params["W"])
    elif case == "read-only-weight":
        net.layers[1].params["U"].flags.writeable = False
    took = dualtape.route(net, xs, xs[..., :net.n_out], optimizer=optimizer)
    assert dict(took.declined)["whole-step"] == REASONS[case]


def test_a_failed_step_kernel_is_said_in_its_words(backend, monkeypatch):
    if not fuses_here(backend):
        pytest.skip("the whole step runs on numpy with the compiled loops")
    monkeypatch.setattr(planned_backprop, "stack_loops", lambda like, check: None)
    xs = np.random.default_rng(1).uniform(-1, 1, (6, 2, 3))
    took = dualtape.route(stack((3, 5, 4)), xs, xs[..., :4], optimizer=dualtape.SGD(0.1))
    assert took.taken == "planned" and dict(took.declined)["whole-step"] == (
        "the compiled SGD step of a stack failed its self-check")


def prepared_forms(host):
    """Each form of input the network prepares anew, by name, from a ``(T, 1, i)`` float32
    array ``host`` (the network's dtype)."""
    return {"one-sequence": host[:, 0], "list": host.tolist(), "float64": host.astype(np.float64),
            "fortran": np.asfortranarray(host), "batch-first": host.transpose(1, 0, 2).copy()
            .transpose(1, 0, 2)}


@pytest.mark.parametrize("form", list(prepared_forms(np.zeros((1, 1, 1)))))
@pytest.mark.parametrize("optimizer", ["sgd", "adam", "none"])
@pytest.mark.parametrize("steps", [6, 1])
def test_an_input_the_network_prepares_takes_the_planned_pass_with_its_bits(backend, form,
                                                                           optimizer, steps):
    """The same call with the input as given and as the network prepares it (C order, its
    dtype, with the batch axis): the same route, loss, states and weights, bit for bit
    (``"none"``: ``backpropagate_sequence``, its gradients too). At one step, one row: the
    gradients' planned pass declines, and the layers take the prepared input."""
    rng = np.random.default_rng(4)
    host = rng.uniform(-1, 1, (steps, 1, 3)).astype(np.float32)
    given = prepared_forms(host)[form]
    if backend.name != "numpy" and form != "list":  # the forms of numpy's order: C order
        given = dualtape.asarray(np.asarray(given))
    targets = rng.uniform(-1, 1, (steps, 1, 4)).astype(np.float32)
    single = form == "one-sequence"
    pairs = [(given, targets[:, 0] if single else targets),
             (dualtape.asarray(host), targets)]
    results, nets = [], []
    for xs, ts in pairs:
        net = stack((3, 5, 4), dtype="float32")
        ts = dualtape.asarray(ts)
        if optimizer == "none":
            found = dualtape.backpropagate_sequence(net, xs, ts)
            results.append((found.loss, found.state, found.grads))
            verb = "backpropagate_sequence"
        else:
            step = dualtape.SGD(0.1) if optimizer == "sgd" else dualtape.Adam(0.01)
            results.append(dualtape.train_recurrent(net, xs, ts, step))
            verb = "train_recurrent"
        nets.append(net)
    routes = [dualtape.last_route(net, verb) for net in nets]
    assert routes[0] == routes[1]
    if fuses_here(backend):
        assert routes[0].taken == ("whole-step" if optimizer == "sgd" else
                                   "planned" if steps > 1 else "layers")
    (loss, states, *grads), (want_loss, want_states, *want_grads) = results
    assert float(loss) == float(want_loss)
    for got, want in zip(states, want_states, strict=True):
        assert got.shape == (want.shape[1:] if single else want.shape)
        assert np.array_equal(to_numpy(got).reshape(-1), to_numpy(want).reshape(-1))
    for got, want in zip(host_params(nets[0]), host_params(nets[1]), strict=True):
        assert all(np.array_equal(got[k], want[k]) for k in got)
    for got, want in zip(*grads, *want_grads, strict=True):
        assert all(np.array_equal(to_numpy(got[k]), to_numpy(want[k])) for k in got)


CHANGES = ["none", "fortran-input", "fortran-targets", "float32-targets", "read-only-weights",
           "new-arrays", "new-layers"]


def twin(net):
    """A network never trained, of ``net``'s layers and weights (and read-only flags)."""
    fresh = dualtape.RecurrentNetwork([dualtape.LSTM(layer.n_in, layer.n_out, seed=9,
                                                     dtype="float64") for layer in net.layers])
    for mine, its in zip(fresh.layers, net.layers, strict=True):
        for name, value in its.params.items():
            mine.params[name][...] = dualtape.asarray(to_numpy(value).copy())
            if type(value) is np.ndarray and not value.flags.writeable:
                mine.params[name].flags.writeable = False
    return fresh


@pytest.mark.parametrize("change", CHANGES)
def test_a_change_between_default_calls_is_decided_as_a_fresh_network_decides_it(backend,
                                                                                 change):
    """After a call with ``train_recurrent``'s defaults, a change of input form, weight or
    layer: the next call takes the route a fresh network of the same weights takes, with its
    bits."""
    rng = np.random.default_rng(2)
    xs, targets = (dualtape.asarray(rng.uniform(-1, 1, (6, 3, n))) for n in (3, 4))
    net = stack((3, 5, 4))
    dualtape.train_recurrent(net, xs, targets, dualtape.SGD(0.1))
    numpy = backend.name == "numpy"
    if change == "fortran-input" and numpy:
        xs = np.asfortranarray(xs)
    elif change == "fortran-targets" and numpy:
        targets = np.asfortranarray(targets)
    elif change == "float32-targets":
        targets = dualtape.asarray(to_numpy(targets).astype(np.float32))
    elif change == "read-only-weights" and numpy:  # every one: none left to write
        for group in net.params:
            for w in group.values():
                w.flags.writeable = False
    elif change == "new-arrays":  # in every layer: each stamp changed
        for layer in net.layers:
            layer.params["W"] = layer.params["W"] * 0.5
    elif change == "new-layers":  # every one: each layer's own arrays are new too
        net.layers[:] = [dualtape.LSTM(layer.n_in, layer.n_out, seed=7, dtype="float64")
                         for layer in net.layers]
    fresh = twin(net)
    losses = [dualtape.train_recurrent(n, xs, targets, dualtape.SGD(0.1))[0] for n in (net, fresh)]
    took, want = (dualtape.last_route(n, "train_recurrent") for n in (net, fresh))
    assert took == want and losses[0] == losses[1]
    for mine, its in zip(host_params(net), host_params(fresh), strict=True):
        assert all(np.array_equal(mine[k], its[k]) for k in mine)


@pytest.mark.parametrize("wrong", ["input", "targets"])
def test_a_call_of_the_wrong_width_gets_the_networks_or_the_losss_error(backend, wrong):
    """With ``train_recurrent``'s defaults too: four input features for a first LSTM of
    three, or targets of five for a last LSTM of four, named as the layer path names them."""
    rng = np.random.default_rng(3)
    xs, targets = (dualtape.asarray(rng.uniform(-1, 1, (6, 3, n)))
                   for n in ((4, 4) if wrong == "input" else (3, 5)))
    net = stack((3, 5, 4))
    before = host_params(net)
    message = {"input": r"input sequence must have shape \(time, batch, 3\) or \(time, 3\)",
               "targets": r"target must have shape \(6, 3, 4\), got \(6, 3, 5\)"}[wrong]
    with pytest.raises(ValueError, match=message):
        dualtape.train_recurrent(net, xs, targets, dualtape.SGD(0.1))
    for b, a in zip(before, host_params(net), strict=True):
        assert all(np.array_equal(b[k], a[k]) for k in b)
