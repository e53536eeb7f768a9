"""Sequential, Merge and Concat at their edges: each refusal names the composite in its whole
words, the input shape takes the sizes any branch states, a Sequential's output for a given
shape, and its repr."""

from __future__ import annotations

import re

import numpy as np
import pytest

import dualtape

from .conftest import np64


def fc(n_in: int, n_out: int) -> dualtape.FullyConnected:
    return dualtape.FullyConnected(n_in, n_out, seed=1, dtype="float64")


def conv(c_in: int, c_out: int) -> dualtape.Convolution:
    return dualtape.Convolution(c_in, c_out, 1, seed=2, dtype="float64")


@pytest.mark.parametrize("make, error, message", [
    (lambda: dualtape.Sequential([fc(3, 4), 3]), TypeError,
     "Sequential: layer 1 is a int, not a Layer, a list of layers or a Network"),
    (lambda: dualtape.Merge(fc(3, 4), "fc"), TypeError,
     "Merge: branch 1 is a str, not a Layer, a list of layers or a Network"),
    (lambda: dualtape.Sequential([fc(3, 4), fc(5, 2)]), ValueError,
     "Sequential: layer 1 FullyConnected(5, 2) takes 5 features but layer 0 "
     "FullyConnected(3, 4) gives 4"),
    (lambda: dualtape.Concat(fc(3, 2), fc(4, 2)), ValueError,
     "Concat: branch 1 FullyConnected(4, 2) takes 4 features but branch 0 "
     "FullyConnected(3, 2) takes 3 features; the branches run on one input"),
    (lambda: dualtape.Sequential([fc(3, 4)]).output_shape((5,)), ValueError,
     "Sequential: layer 0 FullyConnected(3, 4) takes 3 features but it is given 5"),
    (lambda: dualtape.Network([dualtape.Reshape((12,), (1, 4, 3)),
                               dualtape.Concat(dualtape.Crop(3, 0, 0, 0), dualtape.Trivial())]),
     ValueError, "Network: layer 1 Concat(Crop(3, 0, 0, 0), Trivial()): Concat: branch 0 "
     "Crop(3, 0, 0, 0): cropping 3 of the input's width 3 leaves nothing"),
    (lambda: dualtape.Concat(dualtape.Reshape((1, 4, 3), (1, 4, 3)), dualtape.Crop(3, 0, 0, 0)),
     ValueError, "Concat: branch 1 Crop(3, 0, 0, 0): cropping 3 of the input's width 3 leaves "
     "nothing"),
], ids=["sequential-item", "merge-item", "sequential-chain", "branch-inputs",
        "sequential-given-shape", "branch-output", "branch-output-of-the-common-input"])
def test_each_refusal_names_the_composite_in_whole_words(make, error, message):
    with pytest.raises(error, match=rf"^{re.escape(message)}$"):
        make()


@pytest.mark.parametrize("order", [1, -1], ids=["size-first", "size-last"])
def test_the_input_shape_takes_the_sizes_any_branch_states(backend, order):
    sized = [dualtape.Reshape((2, 2, 3), (12,)), dualtape.Reshape((12,), (2, 2, 3))]
    branches = [sized, conv(2, 2)][::order]
    concat = dualtape.Concat(*branches)
    assert concat.input_shape == (2, 2, 3)
    x = np.arange(24.0).reshape(2, 2, 2, 3)
    _, y = concat.forward(dualtape.asarray(x, dtype="float64"))
    assert tuple(y.shape) == (2, 4, 2, 3)
    with pytest.raises(ValueError, match=r"^Concat\(.*\): input must have shape \(batch, 2, 2, "
                       r"3\) or \(2, 2, 3\), got \(1, 2, 3, 3\)$"):
        concat.forward(dualtape.asarray(np.ones((1, 2, 3, 3)), dtype="float64"))


def test_a_sequential_gives_the_output_of_the_shape_it_is_given(backend):
    layer = dualtape.Sequential([dualtape.Pad(1, 0, 2, 1), dualtape.Crop(0, 1, 1, 0)])
    assert layer.output_shape(None) == ("channels", "height", "width")
    assert layer.output_shape((2, 4, 5)) == (2, 4, 7)
    _, y = layer.forward(dualtape.asarray(np.ones((3, 2, 4, 5)), dtype="float64"))
    assert tuple(y.shape) == (3, 2, 4, 7)
    np.testing.assert_array_equal(np64(y)[:, :, :, :1], 0.0)


def test_a_sequential_reads_as_its_layers():
    assert repr(dualtape.Sequential([fc(3, 4), dualtape.Tanh()])) == \
        "Sequential([FullyConnected(3, 4), Tanh()])"
