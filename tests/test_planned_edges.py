"""The planned backward pass's refusals in their own words, its plan kept per network and input
form, and its self-checks' answers per input kind (generated mutants of ``planned_backprop``)."""

from __future__ import annotations

import numpy as np
import pytest

import dualtape
from dualtape import planned_backprop
from dualtape.backend import to_numpy

from .helpers import assert_params_equal, host_params
from .test_descent import fuses_here
from .test_planned_backprop import (
    assert_same_bits,
    entropy,
    layer_path,
    network,
    results,
    sequences,
)

NOT_NUMPY = "the input is not a numpy array"
NOT_FORM = "the input is not (T, B) int64 ids or (T, B, i), C order, not empty"
REASONS = {
    "two-top-layers": ("not a stack of LSTM, StandardLSTM or GRU layers with at most an "
                       "Embedding first and a FullyConnected on top"),
    "fortran-weight": "a weight that is not a C-order numpy array of one dtype",
    "read-only-weight": "a parameter or gradient buffer that is read-only or not C order",
}
PREPARED = {  # planned's reasons for an input the network then prepares into its form
    "float32-input": "the input's dtype is not the weights'",
    "fortran-order": NOT_FORM,
    "int32-ids": NOT_FORM,
}


def case_call(case):
    """The network, input and labels of ``case``, changed on numpy only (the other backends
    decline any input as not numpy's)."""
    net, (xs, labels) = network(7), sequences(7)
    numpy = type(xs) is np.ndarray
    if case == "two-top-layers":
        net = dualtape.RecurrentNetwork([*network(7, (5,), 4).layers,
                                         dualtape.FullyConnected(4, 3, seed=4, dtype="float64")])
    elif case == "float32-input":
        net, (xs, labels) = network(0), sequences(0, dtype="float32")
    elif case == "fortran-order" and numpy:
        net, (xs, labels) = network(0), sequences(0)
        xs = np.asfortranarray(xs)
    elif case == "int32-ids" and numpy:
        xs = xs.astype(np.int32)
    elif case == "fortran-weight" and numpy:
        net.layers[1].params["W"] = np.asfortranarray(net.layers[1].params["W"])
    elif case == "read-only-weight" and numpy:
        net.layers[1].params["U"].flags.writeable = False
    return net, xs, labels


@pytest.mark.parametrize("case", list(REASONS))
def test_each_refusal_of_the_planned_pass_is_said_in_its_words(backend, case):
    """``route`` gives the planned pass's reason word for word; off numpy, the input's."""
    net, xs, labels = case_call(case)
    took = dualtape.route(net, xs, labels, verb="backpropagate_sequence", loss=entropy)
    want = REASONS[case] if backend.name == "numpy" else NOT_NUMPY
    assert took.taken == "layers" and dict(took.declined)["planned"] == want


@pytest.mark.parametrize("case", list(PREPARED))
def test_an_input_of_another_form_is_planned_once_the_network_prepared_it(backend, case):
    """``planned`` declines the input as given in its words; the call plans the network's
    preparation of it (``route_choice.planned_choice``) on numpy, with the layer path's bits
    for that input in C order and the network's dtype."""
    net, xs, labels = case_call(case)
    numpy = backend.name == "numpy"
    assert planned_backprop.planned(net, xs) == (PREPARED[case] if numpy else NOT_NUMPY)
    took = dualtape.route(net, xs, labels, verb="backpropagate_sequence", loss=entropy)
    got = results(dualtape.backpropagate_sequence(net, xs, labels, loss=entropy))
    assert took == dualtape.last_route(net, "backpropagate_sequence")
    assert took.taken == ("planned" if fuses_here(backend) else "layers")
    host = to_numpy(xs)  # ids (all but float32-input and fortran-order on numpy) or reals
    prepared = dualtape.asarray(host.astype(np.int64 if host.dtype.kind == "i" else np.float64))
    assert_same_bits(got, layer_path(case_call(case)[0], prepared, labels))


@pytest.mark.parametrize("case", ["two-top-layers", "float32-input"])
def test_a_call_prepares_its_input_once(backend, monkeypatch, case):
    """Declined for another reason than the input's form (two layers on top), the input is not
    prepared for the plan; prepared for it (another dtype), the layers do not prepare it
    again where the plan then declines (one row)."""
    net, xs, labels = case_call(case)
    if case == "float32-input":
        xs, labels = xs[:1, :1, ...], labels[:1, :1]
    prepared, right = [], dualtape.RecurrentNetwork._prepare_sequence

    def counted(self, *args, **kwargs):
        prepared.append(args[0])
        return right(self, *args, **kwargs)

    monkeypatch.setattr(dualtape.RecurrentNetwork, "_prepare_sequence", counted)
    dualtape.backpropagate_sequence(net, xs, labels, loss=entropy)
    assert dualtape.last_route(net, "backpropagate_sequence").taken == "layers"
    assert len(prepared) == 1


def test_an_id_outside_the_vocabulary_is_declined_in_its_words(backend):
    net, (xs, _) = network(7), sequences(7)
    host = to_numpy(xs).copy()
    host[1, 2] = 7
    want = "an id outside the vocabulary" if fuses_here(backend) else None
    got = planned_backprop.planned(net, dualtape.asarray(host))
    assert got == want or (want is None and isinstance(got, str))


def test_an_input_of_another_width_gets_the_layer_paths_error(backend):
    """Inputs of four features for a first LSTM of three are not planned: the network's
    error, naming the shape it takes."""
    net, (xs, labels) = network(0), sequences(0, inputs=4)
    with pytest.raises(ValueError, match=r"must have shape \(time, batch, 3\) or \(time, 3\)"):
        dualtape.backpropagate_sequence(net, xs, labels, loss=entropy)


def test_a_plan_is_made_once_per_network_and_input_form(backend):
    """The same plan serves each call of one form; a new form makes a new one, then kept."""
    net, (xs, _) = network(7), sequences(7)
    first = planned_backprop.planned(net, xs)
    if not fuses_here(backend):
        assert isinstance(first, str)
        return
    assert planned_backprop.planned(net, sequences(7, seed=4)[0]) is first
    other = sequences(7, steps=4)[0]
    second = planned_backprop.planned(net, other)
    assert second is not first and planned_backprop.planned(net, other) is second


@pytest.mark.parametrize("failing", ["gradients", "row-sums"])
def test_a_failed_kernel_is_said_in_its_words_and_only_where_it_serves(backend, monkeypatch,
                                                                      failing):
    """The stack's gradients serve every input, the row sums by id only ids: with the row
    sums failed, real-valued inputs are still planned (each kind's choice kept apart)."""
    if not fuses_here(backend):
        pytest.skip("the planned pass runs with the compiled loops")
    name = "grads_loops" if failing == "gradients" else "scatter_loops"
    monkeypatch.setattr(planned_backprop, name, lambda like, check: None)
    words = {"gradients": "the compiled gradients of a stack failed their self-check",
             "row-sums": "the compiled row sums by id failed their self-check"}[failing]
    for vocab in (7, 0):
        net, (xs, labels) = network(vocab), sequences(vocab)
        took = dualtape.route(net, xs, labels, verb="backpropagate_sequence", loss=entropy)
        if vocab or failing == "gradients":
            assert dict(took.declined)["planned"] == words
        else:
            assert took.taken == "planned"


def test_a_gradient_buffer_kept_in_fortran_order_is_not_planned(backend):
    """A weight once in Fortran order leaves a kept gradient buffer in that order (the layer
    path's ``empty_like``); after the weight is made C-ordered again the plan declines that
    buffer rather than write it as C-ordered: the layer path's bits."""
    net, (xs, labels) = network(0), sequences(0)
    if backend.name == "numpy":
        net.layers[1].params["W"] = np.asfortranarray(net.layers[1].params["W"])
        dualtape.backpropagate_sequence(net, xs, labels, loss=entropy)
        net.layers[1].params["W"] = np.ascontiguousarray(net.layers[1].params["W"])
    got = results(dualtape.backpropagate_sequence(net, xs, labels, loss=entropy))
    took = dualtape.last_route(net, "backpropagate_sequence")
    assert_same_bits(got, layer_path(net, xs, labels))
    want = REASONS["read-only-weight"] if backend.name == "numpy" else NOT_NUMPY
    assert dict(took.declined)["planned"] == want


@pytest.mark.parametrize("verb", ["backpropagate_sequence", "train_recurrent"])
def test_an_empty_sequence_is_refused_by_both_verbs_and_moves_nothing(backend, verb):
    """No time steps: the layer path's words, before any weight moves (a plan made for it
    would train on nothing)."""
    net = dualtape.RecurrentNetwork([dualtape.LSTM(3, 4, seed=1, dtype="float64"),
                                     dualtape.LSTM(4, 3, seed=2, dtype="float64")])
    xs = dualtape.asarray(np.zeros((0, 2, 3)))
    before = host_params(net)
    with pytest.raises(ValueError, match=r"the input sequence is empty \(T = 0\)"):
        if verb == "train_recurrent":
            dualtape.train_recurrent(net, xs, xs, dualtape.SGD(0.1))
        else:
            dualtape.backpropagate_sequence(net, xs, xs)
    assert_params_equal(host_params(net), before)
