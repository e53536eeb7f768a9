"""``save`` checks every layer's settings as ``load`` will, with the one check ``load`` makes
(``io._checked_settings``): a setting edited after construction to a value ``load`` would
refuse fails the save with the message the load would give, and the old file is kept.
Reshape's shapes are checked when assigned, as Pooling's kernel and Dropout's rate are."""

from __future__ import annotations

import json

import numpy as np
import pytest

import dualtape

from .conftest import np64


def spatial_net() -> dualtape.Network:
    """(1, 4, 4) images through every layer kind whose settings can be edited afterwards."""
    return dualtape.Network([
        dualtape.Pad(1, 1, 1, 1), dualtape.Convolution(1, 2, 3, seed=1, dtype="float64"),
        dualtape.Pooling(2), dualtape.Dropout(0.1, seed=3), dualtape.Reshape((2, 2, 2), (8,)),
        dualtape.Sequential([dualtape.FullyConnected(8, 6, seed=2, dtype="float64"),
                             dualtape.Reshape((6,), (2, 3))]),
    ])


def recurrent_net() -> dualtape.RecurrentNetwork:
    return dualtape.RecurrentNetwork([dualtape.LSTM(3, 4, seed=1, dtype="float64"),
                                      dualtape.FullyConnected(4, 2, seed=2, dtype="float64")])


def layer_at(net, where: str):
    first, *inner = map(int, where.split("."))
    layer = net.layers[first]
    for i in inner:
        layer = layer.children[i]
    return layer


def spec_at(header: dict, where: str) -> dict:
    first, *inner = map(int, where.split("."))
    spec = header["layers"][first]
    for i in inner:
        spec = spec["layers"][i]
    return spec


EDITS = [
    pytest.param(spatial_net, "4", "shape_out", (9,),
                 r"\(Reshape: shape_in \(2, 2, 2\) has 8 elements but shape_out \(9,\) has 9\)",
                 id="reshape-sizes"),
    pytest.param(spatial_net, "5.1", "shape_in", (7,), "has 7 elements but shape_out",
                 id="reshape-inside-a-composite"),
    pytest.param(spatial_net, "0", "margins", (-1, 1, 1, 1),
                 "Pad: left and top must be a non-negative integer", id="pad-margins"),
    pytest.param(spatial_net, "3", "seed", -1, "seed must be None or an integer >= 0",
                 id="dropout-seed"),
    pytest.param(spatial_net, "5.0", "n_in", 0, "FullyConnected: n_in must be a positive",
                 id="sizes"),
    pytest.param(recurrent_net, "0", "init", "xavier", "LSTM: init must be one of",
                 id="lstm-init"),
]


@pytest.mark.parametrize("make, where, name, value, reason", EDITS)
def test_a_setting_load_would_refuse_fails_the_save_as_the_load_and_keeps_the_old_file(
        tmp_path, make, where, name, value, reason):
    path = tmp_path / "net.npz"
    dualtape.save(make(), path)
    before = path.read_bytes()
    net = make()
    setattr(layer_at(net, where), name, value)
    with pytest.raises(ValueError, match=rf"^save: layer {where}'s settings .* are invalid "
                                         rf".*{reason}") as refused:
        dualtape.save(net, path)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == [path.name]
    assert "\n" not in str(refused.value)
    # the file such a save would have written: load refuses it with the same message
    with np.load(path) as archive:
        arrays = {k: archive[k] for k in archive.files}
    header = json.loads(arrays["__header__"].tobytes())
    spec_at(header, where)["config"] = json.loads(json.dumps(layer_at(net, where).config()))
    arrays["__header__"] = np.frombuffer(json.dumps(header).encode(), dtype=np.uint8)
    bad = tmp_path / "bad.npz"
    np.savez(bad, **arrays)
    with pytest.raises(ValueError) as loading:
        dualtape.load(bad)
    assert str(loading.value) == str(refused.value).replace("save:", f"{bad}:", 1)


def test_settings_json_cannot_hold_fail_the_save_naming_the_layer(tmp_path):
    net = spatial_net()
    net.layers[0].margins = (np.int64(1), 1, 1, 1)
    with pytest.raises(TypeError, match=r"^save: layer 0 \(Pad\) has settings that JSON "
                                        "cannot hold"):
        dualtape.save(net, tmp_path / "net.npz")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name, value", [("shape_in", (0, 8)), ("shape_out", ()),
                                         ("shape_out", 8), ("shape_in", (2.5,))])
def test_a_reshape_shape_assigned_after_construction_is_checked(name, value):
    layer = dualtape.Reshape((2, 4), (8,))
    with pytest.raises(ValueError, match=rf"^Reshape: {name} must be a tuple of positive sizes"):
        setattr(layer, name, value)
    assert layer.config() == {"shape_in": (2, 4), "shape_out": (8,)}


def test_edited_settings_load_accepts_round_trip(tmp_path):
    net = spatial_net()
    net.layers[4].shape_out = [2, 4]  # a list, held as a tuple
    net.layers[5] = dualtape.Sequential([dualtape.Reshape((2, 4), (8,)),
                                         dualtape.FullyConnected(8, 6, seed=2, dtype="float64")])
    net.layers[2].stride = [2, 2]
    net.layers[5].children[0].shape_in = (8, 1)
    net.layers[5].children[0].shape_in = (2, 4)
    dualtape.save(net, tmp_path / "net.npz")
    loaded = dualtape.load(tmp_path / "net.npz")
    assert [layer.config() for layer in loaded.leaves()] == \
        [layer.config() for layer in net.leaves()]
    x = np.random.default_rng(0).normal(size=(2, 1, 4, 4))
    net.set_training(False)
    loaded.set_training(False)
    np.testing.assert_array_equal(np64(loaded.predict(x)), np64(net.predict(x)))
