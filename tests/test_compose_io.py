"""Saving and loading composite layers: nested round trips, optimizer state of branch
parameters, and hostile headers (nesting bombs, entries that lie about shapes)."""

from __future__ import annotations

import json

import numpy as np
import pytest

import dualtape

from .conftest import np64
from .helpers import assert_params_equal, away_from_kinks, host_params
from .test_compose import fc, image_net
from .test_io import header_of, read_archive, rewrite


def feature_net() -> dualtape.Network:
    """Composites nested three deep, a Sequential of three layers among them."""
    return dualtape.Network([
        fc(3, 4, 1),
        dualtape.Merge(dualtape.Trivial(), dualtape.Sequential([
            fc(4, 3, 2), dualtape.Tanh(), dualtape.Concat(fc(3, 1, 3), [fc(3, 3, 4),
                                                                        dualtape.Elu()])])),
        fc(4, 2, 5),
    ])


@pytest.mark.parametrize("make, shape", [(feature_net, (3, 3)), (image_net, (2, 2, 4, 4))],
                         ids=["features", "images"])
def test_composites_round_trip(backend, tmp_path, make, shape):
    net = make()
    dualtape.save(net, tmp_path / "net.npz")
    loaded = dualtape.load(tmp_path / "net.npz")
    assert repr(loaded) == repr(net)
    assert [type(a) for a in loaded.leaves()] == [type(a) for a in net.leaves()]
    assert_params_equal(host_params(loaded), host_params(net))
    x = dualtape.asarray(away_from_kinks(shape, seed=1))
    np.testing.assert_array_equal(np64(loaded.predict(x)), np64(net.predict(x)))


def test_adam_state_of_branch_parameters_round_trips(backend, tmp_path):
    net, x, labels = feature_net(), away_from_kinks((4, 3), seed=2), np.array([0, 1, 1, 0])
    adam = dualtape.Adam(0.01)
    for _ in range(2):
        dualtape.train(net, dualtape.asarray(x), dualtape.asarray(labels), adam,
                       loss="softmax_cross_entropy")
    assert max(k for k, _ in adam.state) > len(net.layers)  # keys are leaf groups
    dualtape.save(net, tmp_path / "net.npz", optimizer=adam)
    resumed = dualtape.Adam(0.01)
    loaded = dualtape.load(tmp_path / "net.npz", optimizer=resumed)
    for model, opt in ((net, adam), (loaded, resumed)):
        dualtape.train(model, dualtape.asarray(x), dualtape.asarray(labels), opt,
                       loss="softmax_cross_entropy")
    assert_params_equal(host_params(loaded), host_params(net))


def test_save_refuses_optimizer_state_of_another_network(backend, tmp_path):
    net, other = feature_net(), dualtape.Network([fc(3, 4, 1)])
    adam = dualtape.Adam()
    tapes, y = net.forward(dualtape.asarray(np.ones((1, 3))))
    adam.step(net.params, net.backward(tapes, y)[0])
    with pytest.raises(ValueError, match="fits no parameter"):
        dualtape.save(other, tmp_path / "net.npz", optimizer=adam)


@pytest.fixture
def saved(tmp_path):
    target = tmp_path / "net.npz"
    with dualtape.use_backend("numpy"):
        dualtape.save(feature_net(), target)
    return target


def nested_entry(header: dict, *path: int) -> dict:
    entry = header["layers"][path[0]]
    for i in path[1:]:
        entry = entry["layers"][i]
    return entry


def edit(path, change) -> None:
    arrays = read_archive(path)
    header = header_of(arrays)
    change(header, arrays)
    rewrite(path, arrays, header)


def bomb(depth: int):
    def change(header, arrays):
        entry = {"kind": "Tanh", "config": {}, "params": {}}
        for _ in range(depth):
            entry = {"kind": "Sequential", "config": {}, "params": {}, "layers": [entry]}
        header["layers"][1]["layers"][0] = entry
    return change


def lying_branch(header, arrays):
    """The Concat's first branch becomes FullyConnected(3, 2), parameters to match: the
    branches then give 2 + 3 features where the next layer takes 4."""
    entry = nested_entry(header, 1, 1, 2, 0)
    entry["config"], entry["params"]["W"], entry["params"]["b"] = {"n_in": 3, "n_out": 2}, \
        [2, 3], [2]
    arrays["layer1.1.2.0/W"], arrays["layer1.1.2.0/b"] = np.zeros((2, 3)), np.zeros(2)


def merge_of_two_shapes(header, arrays):
    entry = nested_entry(header, 1)
    entry["layers"][0] = {"kind": "Reshape", "config": {"shape_in": [4], "shape_out": [2, 2]},
                          "params": {}}


def merge_of_one(header, arrays):
    nested_entry(header, 1)["layers"].pop(1)
    for name in [n for n in arrays if n.startswith("layer1.1")]:
        del arrays[name]


def set_entry(*path: int, **changes):
    def change(header, arrays):
        nested_entry(header, *path).update(changes)
    return change


def drop_entry(*path: int, key: str):
    def change(header, arrays):
        del nested_entry(header, *path)[key]
    return change


def nested_parameter(name: str, make):
    def change(header, arrays):
        arrays[name] = make(arrays[name])
    return change


HOSTILE = [
    pytest.param(bomb(40), "nest more than 32 deep .*refused unread", id="nesting-bomb"),
    pytest.param(bomb(32), r"nest more than 32 deep at layer 1(\.0){32};", id="one-too-deep"),
    pytest.param(lying_branch, r"gives examples of shape \(5,\) but branch 0 gives \(4,\)",
                 id="branch-lies-about-sizes"),
    pytest.param(merge_of_two_shapes, "Merge adds outputs of one shape", id="merge-shapes"),
    pytest.param(set_entry(1, 1, layers=[]), "not a non-empty list", id="no-layers"),
    pytest.param(set_entry(1, 1, layers="fc"), "not a non-empty list", id="layers-not-list"),
    pytest.param(drop_entry(1, key="layers"), "lists no layers", id="composite-without-layers"),
    pytest.param(set_entry(0, layers=[{"kind": "Tanh"}]), "lists layers of its own",
                 id="leaf-with-layers"),
    pytest.param(set_entry(1, config={"n_in": 4}), "a composite has none", id="composite-sizes"),
    pytest.param(set_entry(1, 1, 2, 1, 0, kind="Conv9"), r"layer 1.1.2.1.0 has an unknown kind",
                 id="unknown-nested-kind"),
    pytest.param(merge_of_one, "at least two branches", id="merge-of-one"),
    pytest.param(nested_parameter("layer1.1.0/W", lambda w: w.T),
                 r"layer 1.1.0 \(FullyConnected\(4, 3\)\) parameter W should be", id="w-lies"),
    pytest.param(nested_parameter("layer1.1.0/b", lambda b: b[:-1]), "parameter b should be",
                 id="short-nested-bias"),
]


@pytest.mark.parametrize("change, message", HOSTILE)
def test_hostile_composite_headers_are_one_line_errors(saved, change, message):
    edit(saved, change)
    with pytest.raises(ValueError, match=message) as info:
        dualtape.load(saved)
    assert "\n" not in str(info.value) and str(saved) in str(info.value)


def test_composites_as_deep_as_allowed_load(saved):
    edit(saved, bomb(31))
    assert len(dualtape.load(saved).params) == 8


def test_a_recursion_bomb_is_a_one_line_error(saved):
    arrays = read_archive(saved)
    text = json.dumps(header_of(arrays))
    tanh = '{"kind": "Tanh", "config": {}, "params": {}}'
    opening = '{"kind": "Sequential", "config": {}, "params": {}, "layers": ['
    deep = opening * 100_000 + tanh + "]}" * 100_000
    text = text.replace(tanh, deep, 1)
    arrays["__header__"] = np.frombuffer(text.encode(), dtype=np.uint8)
    rewrite(saved, arrays)
    with pytest.raises(ValueError, match="not a dualtape file|nest more than 32") as info:
        dualtape.load(saved)
    assert "\n" not in str(info.value)


def test_an_undeclared_nested_member_is_refused(saved):
    def change(header, arrays):
        del nested_entry(header, 1, 1, 0)["params"]["W"]
    edit(saved, change)
    with pytest.raises(ValueError, match="declares the parameters"):
        dualtape.load(saved)
    with dualtape.use_backend("numpy"):
        net = feature_net()
    net.layers[1].children[1].children[0].params.pop("W")
    with pytest.raises(ValueError, match=r"save: layer 1.1.0 .* has parameters \['b'\]"):
        dualtape.save(net, saved)


def test_save_refuses_a_nested_layer_load_cannot_rebuild(backend, tmp_path):
    class Custom(dualtape.Tanh):
        kind = "Tanh"

    net = dualtape.Network([dualtape.Merge(dualtape.Trivial(), dualtape.Sequential([Custom()]))])
    with pytest.raises(TypeError, match="save: layer 0.1.0 is a Custom"):
        dualtape.save(net, tmp_path / "net.npz")
    assert not (tmp_path / "net.npz").exists()
