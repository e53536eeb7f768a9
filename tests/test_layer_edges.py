"""A feed-forward layer's public calls at their edges (``layers/base.py``'s ``Layer``): a single
image back as one image, the refusal of ``dy`` naming the layer, and which constructors
``from_config`` hands a ``dtype`` (``takes_keyword``)."""

from __future__ import annotations

import re

import numpy as np
import pytest

import dualtape
from dualtape.layers.base import takes_keyword

from .conftest import np64


@pytest.mark.parametrize("make", [lambda: dualtape.Crop(1, 0, 2, 1),
                                  lambda: dualtape.Convolution(2, 3, 2, seed=1, dtype="float64")],
                         ids=["crop", "convolution"])
def test_a_single_image_goes_back_as_one_image(backend, make):
    layer = make()
    rng = np.random.default_rng(5)
    image = rng.normal(size=(2, 4, 5))
    tape, y = layer.forward(dualtape.asarray(image))
    dy = rng.normal(size=tuple(y.shape))
    _, dx = layer.backward(tape, dualtape.asarray(dy))
    assert tuple(dx.shape) == image.shape
    batch_tape, batch_y = layer.forward(dualtape.asarray(image[None]))
    _, batch_dx = layer.backward(batch_tape, dualtape.asarray(dy[None]))
    np.testing.assert_array_equal(np64(y), np64(batch_y)[0])
    np.testing.assert_array_equal(np64(dx), np64(batch_dx)[0])


def test_a_dy_of_the_wrong_shape_is_refused_naming_the_layer(backend):
    layer = dualtape.FullyConnected(3, 2, seed=1, dtype="float64")
    tape, _ = layer.forward(dualtape.asarray(np.ones((2, 3))))
    message = "FullyConnected(3, 2): dy must have shape (2, 2), got (2, 5)"
    with pytest.raises(ValueError, match=rf"^{re.escape(message)}$"):
        layer.backward(tape, dualtape.asarray(np.ones((2, 5))))


class Named:
    def __init__(self, size: int, dtype: str = "float64") -> None: ...


class Positional:
    def __init__(self, dtype: str, /) -> None: ...


class Anything:
    def __init__(self, size: int, **options: object) -> None: ...


class Other:
    def __init__(self, size: int, scale: float = 1.0) -> None: ...


@pytest.mark.parametrize("cls, expected", [(Named, True), (Positional, False), (Anything, True),
                                           (Other, False)])
def test_takes_keyword_is_a_keyword_of_that_name_or_any(cls, expected):
    assert takes_keyword(cls, "dtype") is expected


def test_a_tape_not_of_the_layer_is_refused_in_whole_words(backend):
    layer = dualtape.FullyConnected(3, 2, seed=1, dtype="float64")
    x, dy = dualtape.asarray(np.ones((2, 3))), dualtape.asarray(np.ones((2, 2)))
    tape, _ = layer.forward(x)
    ids = type(tape)(dualtape.asarray(np.zeros((2, 5), dtype=np.int64)), *tape[1:])
    rule = "(its tape classes are named after its kind, as FullyConnectedTape)"
    alone = (f"FullyConnected(3, 2): the tape is a FullyConnectedTape, not one of this layer "
             f"{rule}; pass the tape its forward returned")
    with pytest.raises(ValueError, match=rf"^{re.escape(alone)}$"):
        layer.backward(ids, dy)  # integers pass only for a layer that takes one-hot ids
    tapes, _ = dualtape.Network([dualtape.Tanh()]).forward(x)
    inside = (f"Network: tape 0 is a TanhTape, not one of layer 0 FullyConnected(3, 2) {rule}; "
              "pass the tapes this network's forward returned")
    with pytest.raises(ValueError, match=rf"^{re.escape(inside)}$"):
        dualtape.Network([layer]).backward(tapes, dy)
