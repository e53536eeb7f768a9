"""Sinusoid: sin forwards, cos of the kept input backwards, on features and on images."""

from __future__ import annotations

import numpy as np

import dualtape
from dualtape.backend import backend_of

from .conftest import np64


def test_forward_is_the_sine(backend):
    x = np.linspace(-7.0, 7.0, 12).reshape(3, 4)
    tape, y = dualtape.Sinusoid().forward(dualtape.asarray(x))
    assert backend_of(y) == backend
    np.testing.assert_allclose(np64(y), np.sin(x), rtol=1e-13, atol=1e-15)
    assert type(tape).__name__ == "SinusoidTape"
    np.testing.assert_array_equal(np64(tape.x), x)


def test_gradients_match_finite_differences(backend):
    dualtape.check_gradients(dualtape.Sinusoid(), np.random.default_rng(0).normal(size=(3, 5)) * 3)


def test_gradient_has_the_cosines_sign(backend):
    """sin x alone cannot give the gradient: x and π − x share it, their gradients differ."""
    x = np.array([[0.5, np.pi - 0.5]])
    layer = dualtape.Sinusoid()
    tape, y = layer.forward(dualtape.asarray(x))
    _, dx = layer.backward(tape, dualtape.asarray(np.ones((1, 2))))
    np.testing.assert_allclose(np64(dx), np.cos(x), rtol=1e-13)


def test_images_in_a_network_and_a_single_example(backend):
    net = dualtape.Network([dualtape.Convolution(1, 2, 2, seed=0, dtype="float64"),
                            dualtape.Sinusoid()])
    x = np.random.default_rng(1).normal(size=(1, 3, 3))
    tapes, y = net.forward(dualtape.asarray(x))
    assert tuple(y.shape) == (2, 2, 2)
    _, dx = net.backward(tapes, dualtape.asarray(np.ones((2, 2, 2))))
    assert tuple(dx.shape) == (1, 3, 3)


def test_writing_to_the_input_afterwards_leaves_the_tape():
    x = np.ones((2, 3))
    tape, _ = dualtape.Sinusoid().forward(x)
    x[...] = 5.0
    np.testing.assert_array_equal(np64(tape.x), np.ones((2, 3)))
