"""The compiled window loops (``kernels.numba_spatial``) against the spatial layers' generic
code: every shape the layers' tests use, both dtypes, strides with remainders, a padded input,
strided inputs, pooling's ties and NaN, the switches, and the self-check that guards them."""

from __future__ import annotations

import numpy as np
import pytest

import dualtape
from dualtape.kernels import numba_lstm, numba_spatial, selfcheck, spatial_loops
from dualtape.layers import convolution, deconvolution, pooling

from .test_convolution import ODD_SIZES
from .test_pooling import POOL_SIZES, distinct

WHY_NOT = numba_lstm.unavailable()
pytestmark = pytest.mark.skipif(WHY_NOT is not None, reason=f"no compiled loops: {WHY_NOT}")
TOLERANCE = {"float32": {"rtol": 1e-5, "atol": 1e-5}, "float64": {"rtol": 1e-12, "atol": 1e-12}}
FILTER_SIZES = {
    **ODD_SIZES,
    # the digits network's padded 8x8 input, and the bench layer's at a smaller batch
    "digits-padded": (3, 1, 16, (10, 10), (3, 3), (1, 1)),
    "bench-layer": (2, 8, 16, (28, 28), (3, 3), (1, 1)),
    "wide-stride": (2, 2, 3, (9, 11), (2, 3), (3, 4)),
}
DTYPES = ["float32", "float64"]


def arrays(dtype: str, seed: int, *shapes: tuple[int, ...]) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.uniform(-1, 1, s).astype(dtype) for s in shapes]


def assert_close(fast, generic, dtype: str) -> None:
    """Equal within ``TOLERANCE``, its absolute part scaled by the array's largest entry: a
    weight gradient sums a thousand products, so an entry near 0 is a cancellation whose
    float32 rounding depends on the BLAS kernel's order of the sum (OpenBLAS's Sandybridge
    kernel put 1.3e-5 on one such entry of the bench layer's, whose largest is ~38)."""
    for got, expected in zip(fast, generic, strict=True):
        assert got.dtype == expected.dtype and got.shape == expected.shape
        scale = max(1.0, float(np.max(np.abs(expected), initial=0.0)))
        np.testing.assert_allclose(got, expected, rtol=TOLERANCE[dtype]["rtol"],
                                   atol=TOLERANCE[dtype]["atol"] * scale)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", list(FILTER_SIZES.values()), ids=list(FILTER_SIZES))
def test_convolution_equals_the_generic_code(case, dtype):
    batch, c_in, c_out, (h, w), kernel, stride = case
    rows, cols = (h - kernel[0]) // stride[0] + 1, (w - kernel[1]) // stride[1] + 1
    x, W, b, dy = arrays(dtype, 1, (batch, c_in, h, w), (c_out, c_in, *kernel), (c_out,),
                         (batch, c_out, rows, cols))
    assert_close([numba_spatial.convolution_forward(x, W, b, stride)],
                 [convolution.generic_forward(np, x, W, b, stride)], dtype)
    assert_close(numba_spatial.convolution_backward(x, W, dy, stride),
                 convolution.generic_backward(np, x, W, dy, stride), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", list(FILTER_SIZES.values()), ids=list(FILTER_SIZES))
def test_deconvolution_equals_the_generic_code(case, dtype):
    batch, c_in, c_out, (h, w), kernel, stride = case
    shape = (batch, c_out, (h - 1) * stride[0] + kernel[0], (w - 1) * stride[1] + kernel[1])
    x, W, b, dy = arrays(dtype, 2, (batch, c_in, h, w), (c_in, c_out, *kernel), (c_out,),
                         shape)
    assert_close([numba_spatial.deconvolution_forward(x, W, b, shape, stride)],
                 [deconvolution.generic_forward(np, x, W, b, shape, stride)], dtype)
    assert_close(numba_spatial.deconvolution_backward(x, W, dy, stride),
                 deconvolution.generic_backward(np, x, W, dy, stride), dtype)


def test_an_empty_batch_gives_the_generic_shapes_and_zero_gradients():
    x, W, b = np.zeros((0, 2, 6, 5)), *arrays("float64", 9, (3, 2, 3, 2), (3,))
    fast = [numba_spatial.convolution_forward(x, W, b, (2, 1)),
            *numba_spatial.convolution_backward(x, W, np.zeros((0, 3, 2, 4)), (2, 1))]
    generic = [convolution.generic_forward(np, x, W, b, (2, 1)),
               *convolution.generic_backward(np, x, W, np.zeros((0, 3, 2, 4)), (2, 1))]
    for got, expected in zip(fast, generic, strict=True):
        assert got.shape == expected.shape
        np.testing.assert_array_equal(got, expected)
    shape, x = (0, 3, 7, 5), np.zeros((0, 2, 3, 4))
    fast = [numba_spatial.deconvolution_forward(x, W.reshape(2, 3, 3, 2), b, shape, (2, 1)),
            *numba_spatial.deconvolution_backward(x, W.reshape(2, 3, 3, 2), np.zeros(shape),
                                                  (2, 1))]
    assert [a.shape for a in fast] == [shape, (2, 3, 3, 2), (3,), x.shape]
    assert not any(np.any(a) for a in fast)


def test_operands_the_compiled_code_cannot_read_safely_are_refused():
    """The loops read their operands through raw pointers and unchecked indices: another
    dtype, a gradient of another shape, filters of other channels, a kernel larger than the
    image or an output the input does not fill are refused before any is read."""
    x, W, b = arrays("float64", 10, (2, 3, 7, 6), (4, 3, 3, 2), (4,))
    dy = np.zeros((2, 4, 5, 5))
    with pytest.raises(TypeError, match="one dtype"):
        numba_spatial.convolution_forward(x, W.astype("float32"), b, (1, 1))
    with pytest.raises(TypeError, match="one dtype"):
        numba_spatial.convolution_backward(x, W, dy.astype("float32"), (1, 1))
    with pytest.raises(ValueError, match=r"dy must have shape \(2, 4, 5, 5\)"):
        numba_spatial.convolution_backward(x, W, dy[:, :, :4], (1, 1))
    with pytest.raises(ValueError, match=r"x must have shape \(2, 5, 7, 6\)"):
        numba_spatial.convolution_forward(x, np.zeros((4, 5, 3, 2)), b, (1, 1))
    with pytest.raises(ValueError, match="does not fit"):
        numba_spatial.convolution_forward(x, np.zeros((4, 3, 8, 2)), b, (1, 1))
    Wd = np.zeros((3, 4, 3, 2))
    with pytest.raises(ValueError, match=r"x must have shape \(2, 3, 4, 4\)"):
        numba_spatial.deconvolution_forward(x, Wd, b, (2, 4, 6, 5), (1, 1))
    with pytest.raises(ValueError, match=r"x must have shape \(2, 3, 4, 4\)"):
        numba_spatial.deconvolution_backward(x, Wd, np.zeros((2, 4, 6, 5)), (1, 1))
    with pytest.raises(TypeError, match="one dtype"):
        numba_spatial.deconvolution_forward(x, Wd, b.astype("float32"), (2, 4, 9, 7), (1, 1))
    with pytest.raises(ValueError, match=r"b must have shape \(4,\)"):
        numba_spatial.convolution_forward(x, W, b[:3], (1, 1))
    with pytest.raises(ValueError, match=r"the output's channels must have shape \(4,\)"):
        numba_spatial.deconvolution_forward(x, Wd, b, (2, 3, 9, 7), (1, 1))
    with pytest.raises(ValueError, match=r"b must have shape \(4,\)"):
        numba_spatial.deconvolution_forward(x, Wd, b[:2], (2, 4, 9, 7), (1, 1))
    with pytest.raises(ValueError, match=r"dy's channels must have shape \(4,\)"):
        numba_spatial.deconvolution_backward(x, Wd, np.zeros((2, 3, 9, 7)), (1, 1))


POOLS = {**POOL_SIZES, "digits": ((32, 16, 8, 8), (2, 2), None),
         "int16-positions": ((1, 2, 13, 12), (12, 12), (1, 1))}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape, kernel, stride", list(POOLS.values()), ids=list(POOLS))
def test_pooling_equals_the_generic_code(shape, kernel, stride, dtype):
    """The maxima and their positions bit for bit; the input gradient too where windows do
    not overlap (where they do, the same terms summed in another order)."""
    stride = stride or kernel
    small = np.int8 if kernel[0] * kernel[1] <= 127 else np.int16
    x = distinct(shape, seed=3).astype(dtype)
    y, argmax = numba_spatial.max_pool(x, kernel, stride, small)
    y0, argmax0 = pooling.generic_pool(np, x, kernel, stride, small)
    assert argmax.dtype == argmax0.dtype == small
    np.testing.assert_array_equal(y, y0)
    np.testing.assert_array_equal(argmax, argmax0)
    (dy,) = arrays(dtype, 4, y.shape)
    dx = numba_spatial.max_pool_back(dy, argmax, shape, kernel, stride)
    dx0 = pooling.generic_pool_back(np, dy, argmax0, shape, kernel, stride)
    if stride == kernel:
        np.testing.assert_array_equal(dx, dx0)
    assert_close([dx], [dx0], dtype)


def test_pooling_ties_and_nan_follow_the_generic_rule():
    """The first maximum wins, and the first NaN, which propagates; -inf is a maximum too."""
    x = np.array([[[[1.0, 3.0, 3.0, -np.inf], [3.0, 0.0, 3.0, -np.inf]],
                   [[1.0, np.nan, 2.0, np.nan], [np.nan, 5.0, 0.0, 1.0]]]])
    y, argmax = numba_spatial.max_pool(x, (2, 2), (2, 2), np.int8)
    y0, argmax0 = pooling.generic_pool(np, x, (2, 2), (2, 2), np.int8)
    np.testing.assert_array_equal(y, y0)
    np.testing.assert_array_equal(argmax, argmax0)
    assert argmax.ravel().tolist() == [1, 0, 1, 1]


def test_strided_inputs_are_taken_as_their_values():
    """A transposed view (a layer's output may be one) gives what its C-order copy gives."""
    base = np.random.default_rng(5).normal(size=(2, 7, 6, 3))
    x = np.transpose(base, (0, 3, 1, 2))
    (W, b) = arrays("float64", 6, (2, 3, 3, 2), (2,))
    dy = np.transpose(np.random.default_rng(7).normal(size=(2, 3, 5, 2)), (0, 3, 1, 2))
    copies = np.ascontiguousarray(x), np.ascontiguousarray(dy)
    np.testing.assert_array_equal(numba_spatial.convolution_forward(x, W, b, (2, 1)),
                                  numba_spatial.convolution_forward(copies[0], W, b, (2, 1)))
    for got, expected in zip(numba_spatial.convolution_backward(x, W, dy, (2, 1)),
                             numba_spatial.convolution_backward(*copies[:1], W, copies[1],
                                                                (2, 1)), strict=True):
        np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(numba_spatial.max_pool(x, (2, 2), (1, 2), np.int8)[0],
                                  numba_spatial.max_pool(copies[0], (2, 2), (1, 2), np.int8)[0])


@pytest.mark.parametrize("switch", ["DUALTAPE_FUSED", "DUALTAPE_JIT"])
def test_either_switch_off_keeps_the_generic_code(monkeypatch, switch):
    monkeypatch.setenv(switch, "0")
    assert spatial_loops("Convolution", np.ones(1), convolution.fast_disagreement) is None


def test_only_float_numpy_arrays_take_the_compiled_loops(monkeypatch):
    monkeypatch.delenv("DUALTAPE_JIT", raising=False)
    check = pooling.fast_disagreement
    assert spatial_loops("Pooling", np.ones(1, "float16"), check) is None
    assert spatial_loops("Pooling", np.ones(1, "int64"), check) is None
    assert spatial_loops("Pooling", np.ones(1, "float32"), check) is numba_spatial


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_self_checks_pass_and_run_once_per_kind_and_dtype(monkeypatch, dtype):
    monkeypatch.setattr(selfcheck, "_VERDICTS", {})
    monkeypatch.delenv("DUALTAPE_JIT", raising=False)
    like = np.ones(1, dtype)
    for module in (convolution, deconvolution, pooling):
        assert module.fast_disagreement(numba_spatial, like) is None
    calls = []
    for _ in range(3):
        spatial_loops("Convolution", like, lambda loops, a: calls.append(loops))
    assert calls == [numba_spatial]


def test_loops_that_disagree_are_not_used_and_the_layer_falls_back(monkeypatch):
    """A planted bug (the bias left out) fails the self-check: one warning, then the generic
    code gives the layer's numbers."""
    monkeypatch.setattr(selfcheck, "_VERDICTS", {})
    monkeypatch.delenv("DUALTAPE_JIT", raising=False)
    right = numba_spatial.convolution_forward
    monkeypatch.setattr(numba_spatial, "convolution_forward",
                        lambda x, W, b, stride: right(x, W, 0 * b, stride))
    layer = dualtape.Convolution(2, 3, (3, 2), (2, 1), seed=5, dtype="float64")
    layer.params["b"] = dualtape.asarray(np.linspace(-0.5, 0.5, 3))
    x = np.random.default_rng(4).normal(size=(2, 2, 7, 5))
    with pytest.warns(RuntimeWarning, match=r"compiled Convolution loops disagree .*y differ"):
        _, y = layer.forward(x)
    expected = convolution.generic_forward(np, x, layer.params["W"], layer.params["b"], (2, 1))
    np.testing.assert_array_equal(y, expected)


def test_the_digits_network_trains_alike_either_way(monkeypatch):
    """One Adam step of the benchmark's network (Pad, Convolution, Pooling, ...) on both
    paths: the same parameters to float rounding."""
    from dualtape.benchmarks.digits import conv_net

    results = []
    for setting in ("1", "0"):
        monkeypatch.setenv("DUALTAPE_FUSED", setting)
        net = conv_net(0, "float64")
        x = np.random.default_rng(8).uniform(0, 1, (5, 1, 8, 8))
        dualtape.train(net, x, np.arange(5), dualtape.Adam(0.01), loss="softmax_cross_entropy")
        results.append([np.array(p) for group in net.params for p in group.values()])
    for got, expected in zip(*results, strict=True):
        np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)


def test_results_do_not_share_the_scratch_buffers_with_the_next_call():
    """The windows and the input gradient's products live in per-thread buffers reused by the
    next call: what a call returns must not be a view of them."""
    x1, x2, W, b, dy = arrays("float64", 7, (2, 3, 9, 8), (2, 3, 9, 8), (4, 3, 3, 3), (4,),
                              (2, 4, 7, 6))
    y1 = numba_spatial.convolution_forward(x1, W, b, (1, 1))
    grads1 = numba_spatial.convolution_backward(x1, W, dy, (1, 1))
    kept = [a.copy() for a in (y1, *grads1)]
    numba_spatial.convolution_forward(x2, W, b, (1, 1))
    numba_spatial.convolution_backward(x2, W, 2 * dy, (1, 1))
    for got, expected in zip((y1, *grads1), kept, strict=True):
        np.testing.assert_array_equal(got, expected)


def test_threads_running_convolutions_at_once_each_get_their_own_numbers():
    """Two threads, each with its own images, forwards and back many times at once (the
    compiled passes release the GIL): the results of a serial run."""
    import threading

    W, b = arrays("float32", 8, (16, 8, 3, 3), (16,))
    images = arrays("float32", 9, (4, 8, 28, 28), (4, 8, 28, 28))  # one shape: one buffer

    def run(x):
        y = numba_spatial.convolution_forward(x, W, b, (1, 1))
        return (y, *numba_spatial.convolution_backward(x, W, y, (1, 1)))

    expected = [run(x) for x in images]
    failures = []

    def worker(k):
        for _ in range(30):
            for got, want in zip(run(images[k]), expected[k], strict=True):
                if not np.array_equal(got, want):
                    failures.append(k)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
