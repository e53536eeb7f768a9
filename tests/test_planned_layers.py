"""The planned pass off the compiled stack of LSTMs (``planned_backprop``): StandardLSTM, GRU,
mixed stacks, an Embedding first and checkpointed tapes run the layers' own functions with the
plan's checks made once; both verbs give the layer path's bits and say so on the record."""

from __future__ import annotations

import numpy as np
import pytest

import dualtape
from dualtape import planned_backprop, route_choice
from dualtape.checkpointing import CheckpointedTape
from dualtape.kernels import overlap, selfcheck
from dualtape.recurrent import gradient_buffers
from dualtape.training import objective_for

from .test_descent import fuses_here
from .test_planned_backprop import assert_same_bits, entropy, results
from .test_planned_step import (
    assert_refused_before_any_step,
    assert_same_training,
    last_step_mask,
    on_the_layer_path,
)

STACKS = {  # the layers (after any Embedding), whether ids feed them, why no compiled stack
    "standard-lstm": (("StandardLSTM", "StandardLSTM"), False, "StandardLSTM or GRU layers"),
    "gru": (("GRU", "GRU"), False, "StandardLSTM or GRU layers"),
    "gru-ids": (("GRU",), True, "StandardLSTM or GRU layers"),
    "lstm-then-gru": (("LSTM", "GRU"), False, "StandardLSTM or GRU layers"),
    "embedding-lstm": (("Embedding", "LSTM"), True, "an Embedding first"),
    "embedding-standard-lstm": (("Embedding", "StandardLSTM"), True, "an Embedding first"),
    "embedding-wide": (("Embedding", "GRU"), True, "an Embedding first"),
    "lstm-sqrt-tape": (("LSTM", "LSTM"), False, "a checkpointed tape"),
}
TAPES = {"lstm-sqrt-tape": "sqrt", "standard-lstm": 2}
"""The cases whose calls take a checkpointed tape: the planned pass's form includes it."""
VOCAB = {"embedding-wide": 30}
"""An Embedding of more rows than the 18 a call looks up, which looks them up itself (else it
hands its table to the layer after it: ``stack.fuses``)."""


def stack(case, dtype="float64", top=3):
    """``case``'s network: its layers of 5 then 4 cells (an Embedding of 4 first), fed ids of
    7 (``VOCAB``) or 3 features, a FullyConnected of ``top`` outputs on top."""
    kinds, by_id, _ = STACKS[case]
    vocab = VOCAB.get(case, 7)
    layers, n_in = [], vocab if by_id else 3
    for k, kind in enumerate(kinds):
        if kind == "Embedding":
            layers.append(dualtape.Embedding(vocab, 4, seed=k, dtype=dtype))
            n_in = 4
            continue
        n = (5, 4)[k % 2]
        layers.append(getattr(dualtape, kind)(n_in, n, seed=k + 1, dtype=dtype))
        n_in = n
    layers.append(dualtape.FullyConnected(n_in, top, seed=9, dtype=dtype))
    return dualtape.RecurrentNetwork(layers)


def inputs(case, steps=6, batch=3, dtype="float64", seed=2):
    rng = np.random.default_rng(seed)
    vocab = VOCAB.get(case, 7)
    xs = rng.integers(0, vocab, (steps, batch)) if STACKS[case][1] else rng.uniform(
        -1, 1, (steps, batch, 3)).astype(dtype)
    return dualtape.asarray(xs), dualtape.asarray(rng.integers(0, 3, (steps, batch)))


def given_states(net, batch, seed=5):
    """A state per recurrent layer of ``net``, not zeros (None for a second)."""
    rng = np.random.default_rng(seed)
    states = [dualtape.asarray(rng.uniform(-1, 1, (batch, layer.state_size)))
              for layer in net.layers if layer.recurrent]
    return states[:1] + [None] * (len(states) - 1)


def options_of(case, given, net, batch):
    options = {"tape": TAPES.get(case, "full")}
    if given == "mask":
        options["mask"] = last_step_mask(6, batch)
    elif given == "state":
        options["state"] = given_states(net, batch)
    return options


@pytest.mark.parametrize("case", list(STACKS))
@pytest.mark.parametrize("given", ["defaults", "mask", "state"])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_backpropagate_sequence_is_planned_with_the_layer_paths_bits(backend, monkeypatch,
                                                                     case, given, dtype):
    """Two calls (the second from the kept plan): the loss, the gradients and the last states
    bit for bit with the layers' route; the record says planned where the compiled loops
    run, and the plan says why it is not the compiled stack."""
    net = stack(case, dtype)
    options = options_of(case, given, net, 3)
    for seed in (2, 3):
        xs, labels = inputs(case, dtype=dtype, seed=seed)
        found = dualtape.backpropagate_sequence(net, xs, labels, loss=entropy, **options)
        took = dualtape.last_route(net, "backpropagate_sequence")
        if fuses_here(backend) and options["tape"] == "full":  # into the kept buffers, as
            # the compiled loops write them (through a checkpointed tape: new arrays)
            kept = gradient_buffers(net)
            assert all(found.grads[k][name] is buffers[name] for k, buffers in
                       enumerate(kept) if buffers is not None for name in buffers)
        got = results(found)
        want = results(on_the_layer_path(monkeypatch, dualtape.backpropagate_sequence, net,
                                         xs, labels, loss=entropy, **options))
        assert_same_bits(got, want)
    assert took.taken == ("planned" if fuses_here(backend) else "layers")
    if fuses_here(backend):
        plan = planned_backprop.planned(net, xs, options["tape"])
        assert plan.stacked == STACKS[case][2]
        assert took.declined == (("compiled stack", plan.stacked),)
        assert str(took) == ("backpropagate_sequence: planned, compiled loops (declined "
                             f"compiled stack: {plan.stacked})")


@pytest.mark.parametrize("case", list(STACKS))
@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_train_recurrent_is_planned_with_the_layer_paths_bits(backend, monkeypatch, case,
                                                              optimizer):
    """Two calls each way: the losses, the last states and the weights after each step bit for
    bit; the step in place declines in the plan's words (plain SGD) and the optimizer steps."""
    nets = [stack(case), stack(case)]
    make = {"sgd": lambda: dualtape.SGD(0.1), "adam": lambda: dualtape.Adam(0.01)}[optimizer]
    optimizers = [make(), make()]
    options = {"tape": TAPES.get(case, "full"), "mask": last_step_mask(6, 3)}
    for seed in (2, 3):
        xs, labels = inputs(case, seed=seed)
        got = dualtape.train_recurrent(nets[0], xs, labels, optimizers[0], loss=entropy,
                                       **options)
        want = on_the_layer_path(monkeypatch, dualtape.train_recurrent, nets[1], xs, labels,
                                 optimizers[1], loss=entropy, **options)
        assert dualtape.last_route(nets[1], "train_recurrent").taken == "layers"
        assert_same_training(got, want, nets)
    took = dualtape.last_route(nets[0], "train_recurrent")
    assert took == dualtape.route(nets[0], xs, labels, optimizer=optimizers[0], loss=entropy,
                                  **options)
    if fuses_here(backend):
        assert took.taken == "planned" and took.loops == "compiled"
        why = STACKS[case][2] if optimizer == "sgd" else "Adam is not SGD itself"
        assert took.declined == (("whole-step", why), ("compiled stack", STACKS[case][2]))
    else:
        assert took.taken == "layers"


@pytest.mark.parametrize("kind", ["StandardLSTM", "GRU"])
@pytest.mark.parametrize(("steps", "batch"), [(6, 1), (1, 1)])
def test_one_sequence_is_planned_and_its_states_come_back_in_its_form(backend, monkeypatch,
                                                                      kind, steps, batch):
    """A sequence (T, i) without a batch axis, and a single row: the network's preparation of
    it planned, the states (s,) each as the layers give them, the same bits."""
    net = dualtape.RecurrentNetwork([getattr(dualtape, kind)(3, 4, seed=1, dtype="float64"),
                                     dualtape.FullyConnected(4, 2, seed=2, dtype="float64")])
    rng = np.random.default_rng(3)
    xs = dualtape.asarray(rng.uniform(-1, 1, (steps, 3)))
    targets = dualtape.asarray(rng.uniform(-1, 1, (steps, 2)))
    got = results(dualtape.backpropagate_sequence(net, xs, targets))
    took = dualtape.last_route(net, "backpropagate_sequence")
    want = results(on_the_layer_path(monkeypatch, dualtape.backpropagate_sequence, net, xs,
                                     targets))
    assert_same_bits(got, want)
    assert [s.shape for s in got[2]] == [(net.layers[0].state_size,)]
    assert took.taken == ("planned" if fuses_here(backend) else "layers")


def test_the_plan_is_made_per_tape_and_a_full_tape_of_lstms_stays_compiled(backend):
    """The tape is part of the plan's form: a full tape of LSTMs plans the compiled stack, a
    checkpointed one of the same network and input the layers' functions (whose pass keeps
    a checkpointed tape), each kept; an input the network prepares first keeps its tape."""
    net = stack("lstm-sqrt-tape")
    xs, labels = inputs("lstm-sqrt-tape")
    full = planned_backprop.planned(net, xs)
    sqrt = planned_backprop.planned(net, xs, "sqrt")
    if not fuses_here(backend):
        assert isinstance(full, str) and isinstance(sqrt, str)
        return
    assert full.stacked is None and sqrt.stacked == "a checkpointed tape"
    assert planned_backprop.planned(net, xs, 3) is sqrt  # the same segments: 3 = ⌈√6⌉
    done = planned_backprop.planned_forward(sqrt, net, xs, labels, objective_for(
        entropy, net, "test"), None, None, False, False)
    assert isinstance(done.tapes, CheckpointedTape) and done.tapes.every == 3
    assert planned_backprop.planned(net, xs, 2) is not sqrt
    one = dualtape.to_numpy(xs)[:, 0, :]  # one sequence, (T, i): planned once prepared
    plan, taken, _, prepared, single = route_choice.planned_choice(net, one, "sqrt")
    assert taken == "planned" and single and prepared.shape == (6, 1, 3)
    assert plan.stacked == "a checkpointed tape" and plan.every == 3
    with pytest.raises(ValueError, match="tape must be 'full', 'sqrt' or a number"):
        planned_backprop.planned(net, xs, "half")


@pytest.mark.parametrize("case", ["gru", "embedding-standard-lstm"])
def test_the_layers_hand_their_weight_gradients_to_a_second_core_as_the_record_says(
        backend, monkeypatch, case):
    """Inside ``overlap_gradients()`` (every product large enough to hand over) the planned
    pass of the layers' functions hands over what the layers hand over: the layer path's
    bits, on the record as a second core's."""
    monkeypatch.setattr(overlap, "HAND_OVER_FROM", 0)
    monkeypatch.setattr(overlap, "HAND_OVER_ROWS", 0)
    net = stack(case)
    xs, labels = inputs(case)
    with overlap.overlap_gradients():
        foreseen = dualtape.route(net, xs, labels, verb="backpropagate_sequence", loss=entropy)
        got = results(dualtape.backpropagate_sequence(net, xs, labels, loss=entropy))
    took = dualtape.last_route(net, "backpropagate_sequence")
    assert took == foreseen and took.second_core == (backend.name == "numpy")
    assert took.taken == ("planned" if fuses_here(backend) else "layers")
    assert_same_bits(got, results(on_the_layer_path(
        monkeypatch, dualtape.backpropagate_sequence, stack(case), xs, labels, loss=entropy)))


def test_without_the_compiled_loops_a_gru_takes_the_layers_and_says_why(backend, monkeypatch):
    monkeypatch.setenv("DUALTAPE_JIT", "0")
    net = stack("gru")
    xs, labels = inputs("gru")
    dualtape.backpropagate_sequence(net, xs, labels, loss=entropy)
    took = dualtape.last_route(net, "backpropagate_sequence")
    assert took.taken == "layers"
    if backend.name == "numpy":
        assert dict(took.declined)["planned"] == "DUALTAPE_JIT=0 asks for the ufunc loop"


def test_an_id_outside_an_embeddings_vocabulary_gets_the_layer_paths_error(backend):
    """The plan checks ids against the Embedding's vocabulary (not its width) and declines;
    the layers then refuse the call in their words."""
    net = stack("embedding-lstm")
    xs, labels = inputs("embedding-lstm")
    host = dualtape.to_numpy(xs).copy()
    host[2, 1] = 5  # within the Embedding's 7, beyond its width of 4: planned
    dualtape.backpropagate_sequence(net, dualtape.asarray(host), labels, loss=entropy)
    assert dualtape.last_route(net, "backpropagate_sequence").taken == (
        "planned" if fuses_here(backend) else "layers")
    host[2, 1] = 7
    with pytest.raises(ValueError, match=r"takes ids in \[0, 7\)"):
        dualtape.backpropagate_sequence(net, dualtape.asarray(host), labels, loss=entropy)
    if fuses_here(backend):
        assert planned_backprop.planned(net, host) == "an id outside the vocabulary"


def test_an_embedding_given_real_inputs_gets_the_layer_paths_error(backend):
    net = stack("embedding-lstm")
    xs, labels = inputs("standard-lstm")
    with pytest.raises((TypeError, ValueError), match="Embedding"):
        dualtape.backpropagate_sequence(net, xs, labels, loss=entropy)
    if backend.name == "numpy":
        assert planned_backprop.planned(net, xs) == planned_backprop.OTHER_FORM


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_a_non_finite_input_gives_a_nan_loss_or_moves_nothing(backend, monkeypatch, bad):
    """As on the layer path: ``backpropagate_sequence``'s loss NaN with the layer path's
    gradients; ``train_recurrent`` raises before any weight moves or the record changes."""
    net = stack("standard-lstm")
    xs, labels = inputs("standard-lstm")
    host = dualtape.to_numpy(xs).copy()
    host[3, 1, 2] = bad
    xs = dualtape.asarray(host)
    got = results(dualtape.backpropagate_sequence(net, xs, labels, loss=entropy))
    assert np.isnan(got[0])
    assert dualtape.last_route(net, "backpropagate_sequence").taken == (
        "planned" if fuses_here(backend) else "layers")
    assert_same_bits(got, results(on_the_layer_path(
        monkeypatch, dualtape.backpropagate_sequence, net, xs, labels, loss=entropy)))
    assert_refused_before_any_step(net, xs, labels)


def test_a_failed_self_check_of_a_cells_loops_keeps_the_layer_path(monkeypatch):
    """Where a GRU's compiled loops fail their self-check (one warning), the plan declines in
    its words and the layers run their generic loops: the same bits as the layers' route."""
    if not fuses_here(dualtape.backend.resolve_backend("numpy")):
        pytest.skip("the planned pass runs with the compiled loops")
    monkeypatch.setattr(selfcheck, "_VERDICTS", {})
    monkeypatch.setattr(dualtape.GRU, "_self_check", staticmethod(lambda loops, like: "planted"))
    net = stack("lstm-then-gru")
    xs, labels = inputs("lstm-then-gru")
    with pytest.warns(RuntimeWarning, match="fast GRU loops"):
        got = results(dualtape.backpropagate_sequence(net, xs, labels, loss=entropy))
    took = dualtape.last_route(net, "backpropagate_sequence")
    assert took.taken == "layers"
    assert dict(took.declined)["planned"] == "the compiled GRU loops failed their self-check"
    assert_same_bits(got, results(on_the_layer_path(
        monkeypatch, dualtape.backpropagate_sequence, net, xs, labels, loss=entropy)))
