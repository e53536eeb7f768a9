"""A layer of your own, written as docs/custom-layer.md teaches: what the guide allows works
(a subclass with a kind of its own reusing its parent's tapes, a parameterless layer whose tape
ends in ``version``, one whose constructor takes no ``dtype``), and what cannot work says in
one line what to change (no ``kind``, a tape holding no array, a tape of another name)."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import pytest

import dualtape
from dualtape.layers import LAYER_KINDS, Layer

from .conftest import np64

X = np.random.default_rng(0).normal(size=(5, 6))


class ScaleTape(NamedTuple):
    x: Any
    version: int


class Scale(Layer):
    """y = x * s, one learned factor per feature."""

    kind = "Scale"

    def __init__(self, n: int, *, dtype: str = "float32") -> None:
        super().__init__()
        self.n_in = self.n_out = n
        self.params = {"s": dualtape.asarray(np.linspace(0.5, 1.5, n),
                                             dtype=self._checked_dtype(dtype))}

    def config(self) -> dict[str, Any]:
        return {"n": self.n_in}

    def _forward(self, xp: Any, x: Any) -> tuple[ScaleTape, Any]:
        return ScaleTape(x, self.params.version), x * self.params["s"]

    def _backward(self, xp: Any, tape: ScaleTape, dy: Any) -> tuple[dict[str, Any], Any]:
        self._check_version(tape)
        return {"s": xp.sum(dy * tape.x, axis=0)}, dy * self.params["s"]


class DoubleScale(Scale):
    """A subclass with a kind of its own that keeps its parent's forward pass (and tapes)."""

    kind = "DoubleScale"

    def _backward(self, xp: Any, tape: ScaleTape, dy: Any) -> tuple[dict[str, Any], Any]:
        return super()._backward(xp, tape, dy)


class SquareTape(NamedTuple):
    x: Any
    version: int  # as the guide says tapes end, parameters or not


class Square(Layer):
    """y = x², no parameters and no dtype argument."""

    kind = "Square"

    def _forward(self, xp: Any, x: Any) -> tuple[SquareTape, Any]:
        return SquareTape(x, self.params.version), x * x

    def _backward(self, xp: Any, tape: SquareTape, dy: Any) -> tuple[dict[str, Any], Any]:
        return {}, 2 * tape.x * dy


class NegateTape(NamedTuple):
    version: int


class Negate(Layer):
    """y = -x: its tape holds no array, so nothing tells backward what dy must look like."""

    kind = "Negate"

    def _forward(self, xp: Any, x: Any) -> tuple[NegateTape, Any]:
        return NegateTape(self.params.version), -x

    def _backward(self, xp: Any, tape: NegateTape, dy: Any) -> tuple[dict[str, Any], Any]:
        return {}, -dy


class Unnamed(Layer):
    """Square's passes in a layer whose author forgot the kind."""

    _forward, _backward = Square._forward, Square._backward


def test_a_subclass_with_a_kind_of_its_own_takes_its_parents_tapes(backend):
    layer = DoubleScale(6, dtype="float64")
    tape, _ = layer.forward(dualtape.asarray(X, dtype="float64"))
    assert type(tape) is ScaleTape
    grads, dx = layer.backward(tape, dualtape.asarray(np.ones((5, 6)), dtype="float64"))
    np.testing.assert_allclose(np64(dx), np.broadcast_to(np.linspace(0.5, 1.5, 6), (5, 6)))
    assert max(dualtape.check_gradients(layer, X).values()) < 1e-6
    net = dualtape.Network([layer, dualtape.Tanh()])
    tapes, _ = net.forward(dualtape.asarray(X, dtype="float64"))
    net.backward(tapes, dualtape.asarray(np.ones((5, 6)), dtype="float64"))


def test_a_tape_of_another_name_is_refused_saying_the_rule(backend):
    layer = Scale(6, dtype="float64")
    tape, _ = dualtape.Tanh().forward(dualtape.asarray(X, dtype="float64"))
    with pytest.raises(ValueError, match=r"^Scale\(6\): the tape is a TanhTape, not one of this "
                       r"layer \(its tape classes are named after its kind, as ScaleTape\); "
                       r"pass the tape its forward returned$"):
        layer.backward(tape, tape.y)
    net = dualtape.Network([dualtape.Tanh(), layer])
    tapes, y = net.forward(dualtape.asarray(X, dtype="float64"))
    with pytest.raises(ValueError, match=r"tape 1 is a TanhTape, not one of layer 1 Scale\(6\) "
                       r"\(its tape classes are named after its kind, as ScaleTape\)"):
        net.backward([tapes[0], tapes[0]], y)


def test_a_parameterless_layer_whose_tape_ends_in_version_checks_dy_by_its_last_array(backend):
    layer = Square()
    tape, y = layer.forward(dualtape.asarray(X, dtype="float64"))
    _, dx = layer.backward(tape, dualtape.asarray(np.ones((5, 6)), dtype="float64"))
    np.testing.assert_allclose(np64(dx), 2 * X)
    with pytest.raises(ValueError, match=r"dy must have shape \(5, 6\)"):
        layer.backward(tape, dualtape.asarray(np.ones((5, 4)), dtype="float64"))
    assert max(dualtape.check_gradients(layer, X).values()) < 1e-6


def test_a_tape_holding_no_array_asks_for_output_shape(backend):
    layer = Negate()
    tape, y = layer.forward(dualtape.asarray(X, dtype="float64"))
    with pytest.raises(TypeError, match=r"^Negate\(\): its tape, a NegateTape, holds no array; "
                       r"define _output_shape\(tape\), the shape dy must have$"):
        layer.backward(tape, y)


def test_a_parameterless_layer_without_a_dtype_argument_saves_and_loads(backend, tmp_path,
                                                                          monkeypatch):
    monkeypatch.setitem(LAYER_KINDS, "Square", Square)
    net = dualtape.Network([dualtape.FullyConnected(6, 3, dtype="float64", seed=1), Square()])
    dualtape.save(net, tmp_path / "net.npz")
    back = dualtape.load(tmp_path / "net.npz", backend=backend.name, device=backend.device)
    assert type(back.layers[1]) is Square
    x = dualtape.asarray(X, dtype="float64")
    np.testing.assert_array_equal(np64(back.forward(x)[1]), np64(net.forward(x)[1]))


def test_a_layer_without_a_kind_is_told_to_add_one(backend):
    layer = Unnamed()
    message = (r"^Unnamed has no kind: give the class one \(kind = 'Unnamed'\), the name its "
               r"tape classes begin with and files store$")
    for attempt in (lambda: dualtape.check_gradients(layer, X), lambda: layer.forward(X),
                    lambda: repr(layer), lambda: Unnamed.kind):
        with pytest.raises(AttributeError, match=message):
            attempt()
    assert getattr(layer, "kind", None) is None  # hasattr and getattr's default still work
