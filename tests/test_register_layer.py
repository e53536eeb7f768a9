"""Layers of your own in files: ``dualtape.register_layer`` lets ``save`` keep them and ``load``
build them, on every backend; an unregistered kind is refused in one line, before anything is
built, and registering checks the class."""

from __future__ import annotations

import json
import zipfile
from typing import Any, NamedTuple

import numpy as np
import pytest

import dualtape
from dualtape.layers import LAYER_KINDS, Layer
from dualtape.layers.edges import check_size

from .conftest import np64


class ScaleTape(NamedTuple):
    x: Any
    version: int


class Scale(Layer):
    """y = x * s, one learned factor per feature: a user's layer, as docs/custom-layer.md
    would write it."""

    kind = "Scale"

    def __init__(self, n: int, *, dtype: str = "float32") -> None:
        super().__init__()
        self.n_in = self.n_out = check_size(self.kind, "n", n)
        self.params = {"s": dualtape.asarray(np.linspace(0.5, 1.5, self.n_in),
                                             dtype=self._checked_dtype(dtype))}

    def config(self) -> dict[str, Any]:
        return {"n": self.n_in}

    @classmethod
    def param_shapes(cls, config: dict[str, Any]) -> dict[str, tuple[int, ...]]:
        return {"s": (check_size(cls.kind, "n", config["n"]),)}

    def _forward(self, xp: Any, x: Any) -> tuple[ScaleTape, Any]:
        return ScaleTape(x, self.params.version), x * self.params["s"]

    def _backward(self, xp: Any, tape: ScaleTape, dy: Any) -> tuple[dict[str, Any], Any]:
        self._check_version(tape)
        return {"s": xp.sum(dy * tape.x, axis=0)}, dy * self.params["s"]


@pytest.fixture
def registered():
    """``Scale`` registered for one test."""
    assert "Scale" not in LAYER_KINDS
    assert dualtape.register_layer(Scale) is Scale
    yield Scale
    LAYER_KINDS.pop("Scale", None)


def test_a_registered_layer_round_trips_through_save_and_load(backend, registered, tmp_path):
    net = dualtape.Network([dualtape.FullyConnected(3, 4, dtype="float64", seed=1),
                            Scale(4, dtype="float64"), dualtape.Tanh()])
    net.layers[1].params["s"] = dualtape.asarray([0.1, -2.0, 3.0, 0.7], dtype="float64")
    x = dualtape.asarray(np.random.default_rng(0).normal(size=(5, 3)), dtype="float64")
    path = tmp_path / "net.npz"
    dualtape.save(net, path)
    back = dualtape.load(path, backend=backend.name, device=backend.device)
    assert type(back.layers[1]) is Scale
    np.testing.assert_array_equal(np64(back.layers[1].params["s"]), [0.1, -2.0, 3.0, 0.7])
    np.testing.assert_array_equal(np64(back.forward(x)[1]), np64(net.forward(x)[1]))


def test_an_unregistered_layer_is_refused_by_save_in_one_line(tmp_path):
    net = dualtape.Network([Scale(2)])
    with pytest.raises(TypeError, match=r"^save: layer 0 is a Scale, which load cannot rebuild: "
                       r"register its class with dualtape.register_layer\(cls\)") as info:
        dualtape.save(net, tmp_path / "net.npz")
    assert "\n" not in str(info.value)
    assert list(tmp_path.iterdir()) == []


def test_a_file_naming_an_unregistered_kind_is_refused_before_anything_is_built(
        registered, tmp_path, monkeypatch):
    path = tmp_path / "net.npz"
    dualtape.save(dualtape.Network([Scale(2)]), path)
    del LAYER_KINDS["Scale"]
    built = []
    monkeypatch.setattr(Scale, "__init__", lambda *a, **k: built.append(a))
    with pytest.raises(ValueError, match=r"layer 0 has an unknown kind .*'Scale'.*; a layer class "
                       r"of your own loads once registered with dualtape.register_layer") as info:
        dualtape.load(path)
    assert "\n" not in str(info.value) and built == []


def test_a_hostile_files_settings_reach_the_registered_classes_own_checks(registered, tmp_path):
    path = tmp_path / "net.npz"
    dualtape.save(dualtape.Network([Scale(2)]), path)
    with zipfile.ZipFile(path) as archive:
        members = {n: archive.read(n) for n in archive.namelist()}
    header = json.loads(np.load(path)["__header__"].tobytes())
    header["layers"][0]["config"] = {"n": -3}
    raw = json.dumps(header).encode()
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            if name != "__header__.npy":
                archive.writestr(name, data)
        with archive.open("__header__.npy", "w") as f:
            np.lib.format.write_array(f, np.frombuffer(raw, np.uint8))
    with pytest.raises(ValueError, match="layer 0's settings .* are invalid .*n must be a "
                       "positive integer"):
        dualtape.load(path)


def test_registering_checks_the_class(monkeypatch):
    monkeypatch.setattr(dualtape.layers.registry, "LAYER_KINDS", dict(LAYER_KINDS))
    with pytest.raises(TypeError, match="is not a dualtape Layer subclass"):
        dualtape.register_layer(dict)
    with pytest.raises(ValueError, match="the kind 'FullyConnected' is .*FullyConnected's"):
        dualtape.register_layer(type("Mine", (Layer,), {"kind": "FullyConnected"}))
    with pytest.raises(ValueError, match="needs a kind of its own"):
        dualtape.register_layer(type("Unnamed", (dualtape.FullyConnected,), {}))
    with pytest.raises(ValueError, match="is a composite"):
        dualtape.register_layer(type("Mine", (dualtape.Sequential,), {"kind": "Mine"}))
    assert dualtape.register_layer(dualtape.Tanh) is dualtape.Tanh  # its own kind: nothing
