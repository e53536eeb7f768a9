"""A tape does not pin the weights: a change to a layer's parameters between forward and
backward (an optimizer step, in place or not, ``params[k] = ...``, ``update``, ``net.to``)
makes every backward pass of that tape raise, public or private, instead of mixing old
activations with new weights."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest

import dualtape
from dualtape.backend import namespace_of
from dualtape.layers.params import ParamDict

from .conftest import np64

F64 = "float64"
STALE = "this tape was made with other parameters"


def feed_forward() -> dualtape.Network:
    return dualtape.Network([dualtape.FullyConnected(3, 4, seed=1, dtype=F64), dualtape.Tanh(),
                             dualtape.FullyConnected(4, 2, seed=2, dtype=F64)])


def recurrent() -> dualtape.RecurrentNetwork:
    return dualtape.RecurrentNetwork([dualtape.LSTM(3, 4, seed=1, dtype=F64),
                                      dualtape.FullyConnected(4, 2, seed=2, dtype=F64)])


def data(*shape: int):
    return dualtape.asarray(np.random.default_rng(sum(shape)).uniform(-1, 1, shape))


def zero_grads(net) -> list[dict]:
    return [{k: dualtape.asarray(np.zeros(tuple(v.shape))) for k, v in g.items()}
            for g in net.params]


def sgd_step(net) -> None:
    dualtape.SGD(0.1).step(net.params, zero_grads(net))  # even a step that changes no value


def adam_step(net) -> None:
    dualtape.Adam(0.1).step(net.params, zero_grads(net))


def generic_step(net) -> None:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DUALTAPE_FUSED", "0")
        dualtape.SGD(0.1, momentum=0.5).step(net.params, zero_grads(net))


def replace_one(net) -> None:
    for group in net.params:
        if group:
            group["W"] = dualtape.asarray(np64(group["W"]).copy())


def update(net) -> None:
    for group in net.params:
        group.update({k: v for k, v in group.items()})


def assign_dict(net) -> None:
    for layer in net.layers:
        layer.params = dict(layer.params)


def move_away_and_back(net) -> None:
    here = net.backend
    net.to("numpy" if here.name != "numpy" else "array_api_strict")
    net.to(here)


CHANGES = {"sgd-in-place": sgd_step, "adam": adam_step, "generic-step": generic_step,
           "params[k] = ...": replace_one, "update": update, "params = {...}": assign_dict,
           "to": move_away_and_back}


def feed_forward_backwards(net, tapes, dy) -> dict:
    """Every backward pass of a Network's tapes: the public call, the private one ``train``
    makes, and the last layer's own."""
    xp = namespace_of(dy)
    return {"Network.backward": lambda: net.backward(tapes, dy),
            "Network._backward": lambda: net._backward(xp, tapes, dy),
            "layer.backward": lambda: net.layers[-1].backward(tapes[-1], dy)}


def recurrent_backwards(rnet, tape, dys) -> dict:
    """Every backward pass of a RecurrentNetwork's tape: public, the private one the training
    functions make (with gradient buffers, without the input's and the states' gradients),
    and the LSTM's own."""
    xp = namespace_of(dys)
    layer_tape = tape.tapes[0]
    dhs = data(tape.steps, tape.batch, 4)
    return {
        "backward_sequence": lambda: rnet.backward_sequence(tape, None, dys),
        "_backward_sequence": lambda: rnet._backward_sequence(
            xp, tape, None, dys, need_dxs=False,
            grads_out=dualtape.recurrent.gradient_buffers(rnet), need_dstates=False),
        "LSTM.backward_sequence": lambda: rnet.layers[0].backward_sequence(layer_tape, None,
                                                                           dhs),
    }


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_a_feed_forward_tape_is_refused_after_its_parameters_changed(backend, change):
    net = feed_forward()
    tapes, y = net.forward(data(5, 3))
    dy = data(5, 2)
    for call in feed_forward_backwards(net, tapes, dy).values():
        call()  # fresh: fine
    CHANGES[change](net)
    for call in feed_forward_backwards(net, tapes, dy).values():
        with pytest.raises(RuntimeError, match=STALE):
            call()
    tapes_again, _ = net.forward(data(5, 3))
    net.backward(tapes_again, dy)  # a tape made after the change is fine


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_a_sequence_tape_is_refused_after_its_parameters_changed(backend, change):
    rnet = recurrent()
    tape, _, ys = rnet.forward_sequence(None, data(4, 2, 3))
    dys = data(4, 2, 2)
    for call in recurrent_backwards(rnet, tape, dys).values():
        call()
    CHANGES[change](rnet)
    for call in recurrent_backwards(rnet, tape, dys).values():
        with pytest.raises(RuntimeError, match=STALE) as info:
            call()
        assert "LSTM(3, 4)" in str(info.value) or "FullyConnected(4, 2)" in str(info.value)
    fresh, _, _ = rnet.forward_sequence(None, data(4, 2, 3))
    rnet.backward_sequence(fresh, None, dys)


def test_a_step_tape_is_refused_after_an_update(backend):
    layer = dualtape.LSTM(3, 4, seed=1, dtype=F64)
    tape, _, y = layer.forward(layer.initial_state(2), data(2, 3))
    layer.backward(tape, None, data(2, 4))
    dualtape.SGD(0.1).step([layer.params], [{k: v * 0 for k, v in layer.params.items()}])
    with pytest.raises(RuntimeError, match=r"LSTM\(3, 4\): " + STALE):
        layer.backward(tape, None, data(2, 4))


def test_training_calls_make_fresh_tapes_each_time(backend):
    net, rnet = feed_forward(), recurrent()
    seen = [g.version for g in net.params + rnet.params]
    for _ in range(3):
        dualtape.train(net, data(5, 3), data(5, 2), dualtape.Adam(0.01))
        dualtape.train_recurrent(rnet, data(4, 2, 3), data(4, 2, 2), dualtape.SGD(0.1))
        seen += [g.version for g in net.params + rnet.params]
    assert len(set(seen)) == len(seen) == 5 * 4  # a new stamp per dict and step, none shared


def test_what_is_not_a_change_keeps_the_tape(backend):
    net = feed_forward()
    tapes, _ = net.forward(data(5, 3))
    before = [g.version for g in net.params]
    net.to(net.backend)  # already there: nothing moves
    optimizer = dualtape.SGD(0.1)
    bad = zero_grads(net)
    bad[2]["W"] = dualtape.asarray(np.zeros((4, 2)))
    with pytest.raises(ValueError):
        optimizer.step(net.params, bad)  # a step that raises changes nothing, version included
    assert [g.version for g in net.params] == before
    net.backward(tapes, data(5, 2))


def test_writing_into_a_parameter_array_is_not_seen():
    """The documented limit: only changes made through the dict or by dualtape are counted."""
    with dualtape.use_backend("numpy"):
        net = feed_forward()
        tapes, _ = net.forward(data(5, 3))
        net.layers[0].params["W"][...] += 1.0
        net.backward(tapes, data(5, 2))


def test_activation_tapes_keep_no_version(backend):
    tape, y = dualtape.Tanh().forward(data(2, 3))
    assert type(tape)._fields == ("y",)


# --- ParamDict -------------------------------------------------------------------------------


MUTATIONS = {
    "setitem": lambda d: d.__setitem__("W", d["W"]),
    "delitem": lambda d: d.__delitem__("b"),
    "update": lambda d: d.update(),
    "ior": lambda d: d.__ior__({"W": d["W"]}),
    "pop": lambda d: d.pop("b"),
    "popitem": lambda d: d.popitem(),
    "setdefault": lambda d: d.setdefault("c", d["W"]),
    "clear": lambda d: d.clear(),
    "touch": lambda d: d.touch(),
}


@pytest.mark.parametrize("mutate", MUTATIONS.values(), ids=MUTATIONS.keys())
def test_every_change_through_the_dict_counts(mutate):
    params = dualtape.FullyConnected(2, 3, seed=0).params
    assert isinstance(params, ParamDict)
    before = params.version
    mutate(params)
    assert params.version > before


def test_reading_does_not_count():
    params = dualtape.FullyConnected(2, 3, seed=0).params
    before = params.version
    dict(params), params.get("W"), list(params.items()), params.copy(), "W" in params
    assert params.version == before


def test_assigning_a_dict_gives_a_paramdict_of_a_new_version():
    layer = dualtape.FullyConnected(2, 3, seed=0)
    layer.params["W"] = layer.params["W"]
    old = layer.params.version
    replacement = {k: v for k, v in layer.params.items()}
    layer.params = replacement
    assert isinstance(layer.params, ParamDict) and layer.params is not replacement
    assert layer.params.version > old and layer.params["W"] is replacement["W"]
    shared = ParamDict(replacement)
    stamp = shared.version
    layer.params = shared  # a ParamDict is kept as it is: its stamp already says its state
    assert layer.params is shared and shared.version == stamp > old


@pytest.mark.parametrize("duplicate", [lambda n: pickle.loads(pickle.dumps(n)), copy.deepcopy],
                         ids=["pickle", "deepcopy"])
def test_a_copied_network_keeps_paramdicts_and_trains(duplicate):
    with dualtape.use_backend("numpy"):
        net = feed_forward()
        dualtape.train(net, data(5, 3), data(5, 2), dualtape.SGD(0.1))
        twin = duplicate(net)
        assert all(isinstance(group, ParamDict) for group in twin.params)
        tapes, y = twin.forward(data(5, 3))
        twin.backward(tapes, data(5, 2))
        dualtape.train(twin, data(5, 3), data(5, 2), dualtape.SGD(0.1))


# --- tapes of other parameters of the same architecture -----------------------------------


def test_fresh_dicts_never_share_a_stamp():
    """Two networks built alike (their versions were both 0 before): no stamp in common."""
    stamps = [g.version for _ in range(3) for g in feed_forward().params + recurrent().params]
    assert len(set(stamps)) == len(stamps)


def test_another_feed_forward_networks_tape_is_refused(backend):
    net, twin = feed_forward(), feed_forward()  # same seeds: same architecture and weights
    dualtape.SGD(0.1).step(twin.params, zero_grads(twin))  # and as many steps
    dualtape.SGD(0.1).step(net.params, zero_grads(net))
    tapes, _ = twin.forward(data(5, 3))
    for call in feed_forward_backwards(net, tapes, data(5, 2)).values():
        with pytest.raises(RuntimeError, match=STALE):
            call()


@pytest.mark.parametrize("tape_policy", ["full", "sqrt", 2])
def test_another_recurrent_networks_tape_is_refused(backend, tape_policy):
    rnet, twin = recurrent(), recurrent()
    tape, _, _ = twin.forward_sequence(None, data(4, 2, 3), tape=tape_policy)
    with pytest.raises(RuntimeError, match=r"(LSTM\(3, 4\)|FullyConnected\(4, 2\)): " + STALE):
        rnet.backward_sequence(tape, None, data(4, 2, 2))
    layer, other = dualtape.LSTM(3, 4, seed=1, dtype=F64), dualtape.LSTM(3, 4, seed=1, dtype=F64)
    tape, _, _ = other.forward_sequence(None, data(4, 2, 3), tape=tape_policy)
    with pytest.raises(RuntimeError, match=STALE):
        layer.backward_sequence(tape, None, data(4, 2, 4))
    step_tape, _, _ = other.forward(other.initial_state(2), data(2, 3))
    with pytest.raises(RuntimeError, match=STALE):
        layer.backward(step_tape, None, data(2, 4))


def test_a_composites_tape_from_another_is_refused(backend):
    inner = [dualtape.FullyConnected(3, 4, seed=1, dtype=F64), dualtape.Tanh()]
    block = dualtape.Sequential(inner)
    twin = dualtape.Sequential([dualtape.FullyConnected(3, 4, seed=1, dtype=F64),
                                dualtape.Tanh()])
    tape, _ = twin.forward(data(5, 3))
    with pytest.raises(RuntimeError, match=STALE):
        block.backward(tape, data(5, 4))


@pytest.mark.parametrize("duplicate", [lambda n: pickle.loads(pickle.dumps(n)), copy.deepcopy],
                         ids=["pickle", "deepcopy"])
def test_a_copy_takes_stamps_of_its_own(duplicate):
    """An unpickled network (perhaps from another process, whose counter gave other
    parameters the same numbers) and a deep copy are other parameters from the start."""
    with dualtape.use_backend("numpy"):
        net = feed_forward()
        twin = duplicate(net)
        assert not {g.version for g in twin.params} & {g.version for g in net.params}
        tapes, _ = net.forward(data(5, 3))
        with pytest.raises(RuntimeError, match=STALE):
            twin.backward(tapes, data(5, 2))


# --- what may be set as a parameter ----------------------------------------------------------


def wrong_replacements(W):
    """Values that cannot stand for a FullyConnected(3, 4)'s ``W`` (float64, shape (4, 3)),
    with the message each must give."""
    host = np64(W)
    return {
        "list": (host.tolist(), TypeError, r"FullyConnected.params\['W'\] must be an array"),
        "float32": (dualtape.asarray(host.astype(np.float32)), ValueError, "dtype float64"),
        "transposed": (dualtape.asarray(host.T.copy()), ValueError, r"shape \(4, 3\)"),
        "integers": (dualtape.asarray(host.astype(np.int64)), TypeError, "must be an array"),
    }


@pytest.mark.parametrize("name", ["list", "float32", "transposed", "integers"])
@pytest.mark.parametrize("how", ["setitem", "update"])
def test_a_parameter_is_checked_where_it_is_set(backend, name, how):
    layer = dualtape.FullyConnected(3, 4, seed=1, dtype=F64)
    before, stamp = layer.params["W"], layer.params.version
    value, error, message = wrong_replacements(before)[name]
    with pytest.raises(error, match=message):
        if how == "setitem":
            layer.params["W"] = value
        else:
            layer.params.update(W=value)
    assert layer.params["W"] is before and layer.params.version == stamp  # nothing changed


def test_a_parameter_of_another_backend_is_refused_by_setitem():
    with dualtape.use_backend("numpy"):
        layer = dualtape.FullyConnected(3, 4, seed=1, dtype=F64)
    import array_api_strict as strict
    other = strict.asarray(np64(layer.params["W"]))
    with pytest.raises(TypeError, match=r"FullyConnected.params\['W'\] is a array_api_strict"):
        layer.params["W"] = other


def test_a_right_parameter_and_new_keys_are_taken(backend):
    layer = dualtape.FullyConnected(3, 4, seed=1, dtype=F64)
    fresh = dualtape.asarray(np64(layer.params["W"]) * 2)
    layer.params["W"] = fresh
    layer.params.update(b=dualtape.asarray(np.zeros(4)))
    assert layer.params["W"] is fresh
    layer.params.setdefault("extra", fresh)  # a key not there yet: nothing to compare with


def test_the_stale_tape_message_says_what_to_do(backend):
    layer = dualtape.FullyConnected(3, 2, seed=1, dtype=F64)
    tape, y = layer.forward(dualtape.asarray(np.ones((1, 3))))
    layer.params = dict(layer.params)
    with pytest.raises(RuntimeError) as info:
        layer.backward(tape, y)
    assert str(info.value) == (
        "FullyConnected(3, 2): this tape was made with other parameters (another network's, or "
        "these before an optimizer step, params[...] = ..., update or net.to(...)), so backward "
        "would mix its activations with these weights; pass the tape this layer's forward "
        "returned, run forward again, or take the gradients before updating")


def test_a_recurrent_layers_state_and_batch_are_named_with_it(backend):
    layer = dualtape.LSTM(3, 4, seed=1, dtype=F64)
    assert layer.initial_state().shape == (4,) and layer.initial_state(2).shape == (2, 4)
    assert np64(layer.initial_state(2)).tolist() == [[0.0] * 4] * 2
    with pytest.raises(ValueError, match=r"^LSTM\(3, 4\): batch must be a positive integer, "
                       "got 0$"):
        layer.initial_state(0)
    with pytest.raises(ValueError, match=r"^LSTM\(3, 4\): state must have shape \(1, 4\) or "
                       r"\(4,\), got \(1, 2\)$"):
        layer.forward(dualtape.asarray(np.ones((1, 2))), dualtape.asarray(np.ones((1, 3))))
