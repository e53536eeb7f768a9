"""Pooling: gradients against finite differences, the tie rule, NaN, and a tape of positions."""

from __future__ import annotations

import numpy as np
import pytest

import dualtape
from dualtape.backend import backend_of

from .conftest import np64

POOL_SIZES = {
    # id: (batch, channels, (H, W), kernel, stride)
    "basic": ((2, 2, 6, 4), (2, 2), None),
    "overlap": ((2, 1, 5, 6), (3, 2), (1, 1)),
    "stride-remainder": ((1, 3, 7, 8), (2, 3), (3, 2)),
    "kernel1": ((2, 2, 3, 3), (1, 1), (1, 1)),
    "kernel-is-image": ((3, 2, 4, 3), (4, 3), (1, 1)),
}


def distinct(shape, seed: int) -> np.ndarray:
    """Values at least 0.1 apart: no window's maximum changes within a finite-difference
    step."""
    rng = np.random.default_rng(seed)
    return rng.permutation(np.prod(shape)).reshape(shape) * 0.1 - 1.0


@pytest.mark.parametrize("shape, kernel, stride", list(POOL_SIZES.values()), ids=list(POOL_SIZES))
def test_gradients_match_finite_differences(backend, shape, kernel, stride):
    dualtape.check_gradients(dualtape.Pooling(kernel, stride), distinct(shape, seed=1))


def test_first_maximum_in_row_major_order_wins(backend):
    x = np.array([[[[1.0, 3.0, 3.0],
                    [3.0, 0.0, 3.0]]]])
    layer = dualtape.Pooling((2, 3))
    tape, y = layer.forward(dualtape.asarray(x))
    assert np64(y).ravel().tolist() == [3.0]
    assert int(dualtape.to_numpy(tape.argmax).ravel()[0]) == 1
    _, dx = layer.backward(tape, dualtape.asarray(np.ones((1, 1, 1, 1))))
    np.testing.assert_array_equal(np64(dx), [[[[0.0, 1.0, 0.0], [0.0, 0.0, 0.0]]]])


def test_overlapping_windows_add_their_gradients(backend):
    x = np.array([[[[0.0, 5.0, 1.0, 2.0]]]])
    layer = dualtape.Pooling((1, 2), (1, 1))
    tape, y = layer.forward(dualtape.asarray(x))
    np.testing.assert_array_equal(np64(y), [[[[5.0, 5.0, 2.0]]]])
    _, dx = layer.backward(tape, dualtape.asarray(np.array([[[[1.0, 10.0, 100.0]]]])))
    np.testing.assert_array_equal(np64(dx), [[[[0.0, 11.0, 0.0, 100.0]]]])


def test_nan_propagates_to_the_output(backend):
    x = np.array([[[[1.0, np.nan], [2.0, 0.0]]]])
    _, y = dualtape.Pooling(2).forward(dualtape.asarray(x))
    assert np.isnan(np64(y)).all()


def test_tape_keeps_positions_in_int8_not_the_input(backend):
    x = distinct((2, 3, 6, 6), seed=2)
    tape, y = dualtape.Pooling(3).forward(dualtape.asarray(x))
    assert type(tape).__name__ == "PoolingTape"
    assert type(tape)._fields == ("empty", "argmax", "shape")
    assert dualtape.to_numpy(tape.argmax).dtype == np.int8
    assert tuple(tape.argmax.shape) == tuple(y.shape) == (2, 3, 2, 2)
    assert tuple(tape.empty.shape) == (0,) and backend_of(tape.empty) == backend
    assert tape.shape == (2, 3, 6, 6)


@pytest.mark.parametrize("kernel, dtype", [((12, 12), np.int16), ((11, 11), np.int8)])
def test_large_windows_get_a_wide_enough_position_type(backend, kernel, dtype):
    x = distinct((1, 1, 12, 12), seed=3)
    layer = dualtape.Pooling(kernel)
    tape, y = layer.forward(dualtape.asarray(x))
    assert dualtape.to_numpy(tape.argmax).dtype == dtype
    _, dx = layer.backward(tape, dualtape.asarray(np.ones(tuple(y.shape))))
    window = x[:, :, :kernel[0], :kernel[1]]
    expected = np.zeros_like(x)
    expected[np.unravel_index(np.argmax(window), window.shape)] = 1.0
    np.testing.assert_array_equal(np64(dx), expected)


def test_stride_defaults_to_the_kernel():
    assert dualtape.Pooling((2, 3)).stride == (2, 3)
    assert dualtape.Pooling(2, 1).stride == (1, 1)
    assert dualtape.Pooling(3).config() == {"kernel": (3, 3), "stride": (3, 3)}


@pytest.mark.parametrize("name, value", [("kernel", (0, 0)), ("stride", (2, 0)),
                                         ("kernel", 1.5), ("stride", True)])
@pytest.mark.parametrize("make", [lambda: dualtape.Pooling(2),
                                  lambda: dualtape.Convolution(1, 1, 2, 2)], ids=["pool", "conv"])
def test_a_kernel_or_stride_assigned_after_construction_is_checked(tmp_path, name, value, make):
    layer = make()
    with pytest.raises(ValueError, match=rf"^{layer.kind}: {name} must be a positive integer"):
        setattr(layer, name, value)
    assert getattr(layer, name) == (2, 2)
    dualtape.save(dualtape.Network([layer]), tmp_path / "pool.npz")
    assert dualtape.load(tmp_path / "pool.npz").layers[0].config() == layer.config()
