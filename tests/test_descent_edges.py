"""The fused SGD step's refusals in their own words, and the choices kept between training
calls against a fresh network's (generated mutants of ``descent``)."""

from __future__ import annotations

import numpy as np
import pytest

import dualtape
from dualtape import descent
from dualtape.backend import to_numpy

from .helpers import host_params
from .test_descent import fuses_here, stack

NOT_INPUT = "the input is not a numpy array of (T, B, i) of the weights' dtype"
NOT_WEIGHT = "a weight that is not a writeable C-order numpy array of one dtype"
REASONS = {  # the fused step's reason on numpy; elsewhere the input is not numpy's
    "top": "a layer other than LSTM",
    "wrapper": "Wrapper is not SGD itself",
    "float32-input": NOT_INPUT,
    "one-sequence": NOT_INPUT,
    "fortran-weight": NOT_WEIGHT,
    "read-only-weight": NOT_WEIGHT,
}


class Wrapper:
    """An optimizer that is not an ``Optimizer`` (as ``DataParallel`` wraps one)."""

    def step(self, params, grads):
        raise AssertionError("not called")


@pytest.mark.parametrize("case", list(REASONS))
def test_each_refusal_of_the_fused_step_is_said_in_its_words(backend, case):
    net, optimizer = stack((3, 5, 4)), dualtape.SGD(0.1)
    xs = np.random.default_rng(1).uniform(-1, 1, (6, 2, 3))
    numpy = backend.name == "numpy"
    if case == "top":
        net.layers.append(dualtape.FullyConnected(4, 2, seed=3))
    elif case == "wrapper":
        optimizer = Wrapper()
    elif case == "float32-input":
        xs = xs.astype(np.float32)
    elif case == "one-sequence":
        xs = xs[:, 0].copy()
    elif case == "fortran-weight" and numpy:
        net.layers[1].params["W"] = np.asfortranarray(net.layers[1].params["W"])
    elif case == "read-only-weight" and numpy:
        net.layers[1].params["U"].flags.writeable = False
    want = REASONS[case] if numpy or case in ("top", "wrapper") else NOT_INPUT
    assert descent.fused_declines(net, optimizer, dualtape.asarray(xs), True) == want


def test_a_failed_step_kernel_is_said_in_its_words(backend, monkeypatch):
    if not fuses_here(backend):
        pytest.skip("the fused step runs with the compiled loops")
    monkeypatch.setattr(descent, "stack_loops", lambda like, check: None)
    xs = np.random.default_rng(1).uniform(-1, 1, (6, 2, 3))
    assert descent.fused_declines(stack((3, 5, 4)), dualtape.SGD(0.1), xs, True) == (
        "the compiled SGD step of a stack failed its self-check")


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
