"""The spatial layers in networks: shapes chained at construction, single images, Pad, Crop,
Reshape and Trivial, hostile input, aliasing, stale tapes, save and load."""

from __future__ import annotations

import numpy as np
import pytest

import dualtape
from dualtape.backend import backend_of

from .conftest import np64
from .helpers import other_backend_array, other_device_array


def mnist_net(dtype: str = "float64") -> dualtape.Network:
    """Grenade's README network, small: Pad, Convolution, Relu, Pooling, Reshape, FC."""
    return dualtape.Network([
        dualtape.Pad(1, 1, 1, 1),
        dualtape.Convolution(1, 3, (3, 3), seed=1, dtype=dtype), dualtape.Relu(),
        dualtape.Pooling((2, 2)), dualtape.Reshape((3, 4, 4), (48,)),
        dualtape.FullyConnected(48, 5, seed=2, dtype=dtype), dualtape.Softmax(),
    ])


SHAPE_LAYERS = {
    "pad": (lambda: dualtape.Pad(1, 0, 2, 3), (2, 2, 3, 4)),
    "crop": (lambda: dualtape.Crop(1, 2, 0, 1), (2, 2, 5, 4)),
    "reshape-flat": (lambda: dualtape.Reshape((2, 3, 4), (24,)), (2, 2, 3, 4)),
    "reshape-image": (lambda: dualtape.Reshape((12,), (3, 2, 2)), (3, 12)),
    "trivial": (lambda: dualtape.Trivial(), (2, 5)),
}


@pytest.mark.parametrize("name", list(SHAPE_LAYERS))
def test_shape_layers_gradients_match_finite_differences(backend, name):
    make, shape = SHAPE_LAYERS[name]
    dualtape.check_gradients(make(), np.random.default_rng(0).normal(size=shape))


def test_crop_undoes_pad(backend):
    x = np.random.default_rng(1).normal(size=(2, 3, 4, 5))
    net = dualtape.Network([dualtape.Pad(2, 1, 0, 3), dualtape.Crop(2, 1, 0, 3)])
    assert net.out_shape == ("channels", "height", "width")
    _, y = net.forward(dualtape.asarray(x))
    np.testing.assert_array_equal(np64(y), x)


def test_network_gradients_match_finite_differences(backend):
    x = np.random.default_rng(2).normal(size=(2, 1, 8, 8))
    errors = dualtape.check_gradients(mnist_net(), x, seed=3)
    assert {"input", "layer 1 (Convolution) parameter W", "layer 5 (FullyConnected) parameter W"
            } <= set(errors)


def test_a_single_image_comes_back_in_its_own_form(backend):
    net = dualtape.Network([dualtape.Convolution(2, 3, (2, 2), seed=4, dtype="float64"),
                            dualtape.Tanh(), dualtape.Pooling(2, 1)])
    x = np.random.default_rng(4).normal(size=(2, 5, 4))
    tapes, y = net.forward(dualtape.asarray(x))
    assert tuple(y.shape) == (3, 3, 2)
    _, batched = net.forward(dualtape.asarray(x[None]))
    np.testing.assert_array_equal(np64(y), np64(batched)[0])
    dy = np.random.default_rng(5).normal(size=(3, 3, 2))
    grads, dx = net.backward(tapes, dualtape.asarray(dy))
    assert tuple(dx.shape) == (2, 5, 4)
    batch_tapes, _ = net.forward(dualtape.asarray(x[None]))
    batch_grads, batch_dx = net.backward(batch_tapes, dualtape.asarray(dy[None]))
    np.testing.assert_array_equal(np64(dx), np64(batch_dx)[0])
    np.testing.assert_array_equal(np64(grads[0]["W"]), np64(batch_grads[0]["W"]))


def test_a_single_image_to_features_and_back(backend):
    net = mnist_net()
    x = np.random.default_rng(6).normal(size=(1, 8, 8))
    tapes, y = net.forward(dualtape.asarray(x))
    assert tuple(y.shape) == (5,)
    _, dx = net.backward(tapes, dualtape.asarray(np.ones(5)))
    assert tuple(dx.shape) == (1, 8, 8)
    layer = dualtape.Reshape((12,), (3, 2, 2))
    tape, image = layer.forward(dualtape.asarray(np.arange(12.0)))
    assert tuple(image.shape) == (3, 2, 2)
    assert tuple(layer.backward(tape, image)[1].shape) == (12,)


def test_train_steps_a_convolutional_network(backend):
    net = mnist_net()
    rng = np.random.default_rng(7)
    x, labels = rng.normal(size=(4, 1, 8, 8)), rng.integers(0, 5, size=4)
    before = np64(net.layers[1].params["W"]).copy()
    loss = dualtape.train(net, dualtape.asarray(x), dualtape.asarray(labels), dualtape.SGD(0.1),
                          loss="cross_entropy")
    assert np.isfinite(loss) and not np.array_equal(np64(net.layers[1].params["W"]), before)


# --- shapes chained at construction ----------------------------------------------------------


@pytest.mark.parametrize("layers, message", [
    (lambda: [dualtape.Convolution(1, 4, 3), dualtape.Convolution(3, 2, 3)],
     r"layer 1 Convolution\(3, 2, \(3, 3\), \(1, 1\)\) takes examples of shape "
     r"\(3, height, width\) but layer 0 Convolution\(1, 4, \(3, 3\), \(1, 1\)\) gives "
     r"examples of shape \(4, height, width\)"),
    (lambda: [dualtape.Convolution(1, 4, 3), dualtape.Relu(), dualtape.Pooling(2),
              dualtape.Reshape((4, 2, 2), (16,)), dualtape.FullyConnected(15, 2)],
     r"layer 4 FullyConnected\(15, 2\) takes 15 features but layer 3 Reshape"),
    (lambda: [dualtape.FullyConnected(3, 4), dualtape.Tanh(), dualtape.Pooling(2)],
     r"layer 2 Pooling\(\(2, 2\), \(2, 2\)\) takes examples of shape \(channels, height, "
     r"width\) but layer 0 FullyConnected\(3, 4\) gives 4 features"),
    (lambda: [dualtape.Reshape((4,), (1, 2, 2)), dualtape.Convolution(1, 1, (3, 1))],
     r"layer 1 Convolution\(1, 1, \(3, 1\), \(1, 1\)\): the input's height 2 is smaller "
     r"than the kernel's 3"),
    (lambda: [dualtape.Reshape((4,), (1, 2, 2)), dualtape.Crop(0, 1, 0, 1)],
     r"layer 1 Crop\(0, 1, 0, 1\): cropping 2 of the input's height 2 leaves nothing"),
    (lambda: [dualtape.Reshape((1, 3, 3), (9,)), dualtape.Reshape((1, 3, 3), (9,))],
     r"layer 1 Reshape.* takes examples of shape \(1, 3, 3\) but layer 0 Reshape.* gives "
     r"9 features"),
], ids=["channels", "features", "features-into-pooling", "smaller-than-kernel", "crop-all",
        "reshape"])
def test_shapes_that_do_not_chain_fail_at_construction(layers, message):
    with pytest.raises(ValueError, match=message):
        dualtape.Network(layers())


@pytest.mark.parametrize("margins, axis", [
    ((3, 0, 0, 0), "width"), ((0, 0, 3, 0), "width"), ((1, 0, 2, 0), "width"),
    ((0, 4, 0, 0), "height"), ((0, 0, 0, 4), "height"), ((0, 2, 0, 2), "height")],
    ids=["left", "right", "left-and-right", "top", "bottom", "top-and-bottom"])
def test_a_crop_that_leaves_nothing_is_refused_whichever_margins_cut(backend, margins, axis):
    crop = dualtape.Crop(*margins)
    cut, size = (sum(margins[1::2]), 4) if axis == "height" else (sum(margins[::2]), 3)
    message = rf"cropping {cut} of the input's {axis} {size} leaves nothing"
    with pytest.raises(ValueError, match=message):
        crop.output_shape((1, 4, 3))
    with pytest.raises(ValueError, match=rf"^Crop\(.*\): {message}"):
        crop.forward(dualtape.asarray(np.ones((2, 1, 4, 3)), dtype="float32"))
    with pytest.raises(ValueError, match=rf"layer 1 Crop.*: {message}"):
        dualtape.Network([dualtape.Reshape((12,), (1, 4, 3)), crop])


@pytest.mark.parametrize("margins", [(1, 0, 2, 1), (2, 1, 1, 0), (0, 2, 3, 1)],
                         ids=["right-wider", "left-wider", "right-only"])
def test_a_crop_says_the_shape_it_gives_whichever_margins_differ(backend, margins):
    crop = dualtape.Crop(*margins)
    left, top, right, bottom = margins
    expected = (2, 5 - top - bottom, 6 - left - right)
    assert crop.output_shape((2, 5, 6)) == expected
    x = np.arange(2 * 2 * 5 * 6, dtype=np.float64).reshape(2, 2, 5, 6)
    _, y = crop.forward(dualtape.asarray(x))
    assert tuple(y.shape[1:]) == expected
    np.testing.assert_array_equal(np64(y), x[:, :, top:5 - bottom, left:6 - right])
    net = dualtape.Network([dualtape.Reshape((60,), (2, 5, 6)), crop])
    assert net.out_shape == expected


def test_the_network_knows_its_example_shapes():
    net = mnist_net()
    assert net.in_shape == ("channels", "height", "width") and net.out_shape == (5,)
    assert net.n_in is None and net.n_out == 5
    feature_net = dualtape.Network([dualtape.FullyConnected(3, 2), dualtape.Tanh()])
    assert (feature_net.in_shape, feature_net.n_in) == ((3,), 3)
    images = dualtape.Network([dualtape.Reshape((6,), (1, 2, 3)),
                               dualtape.Convolution(1, 2, (2, 2)), dualtape.Relu()])
    assert images.in_shape == (6,) and images.out_shape == (2, 1, 2)


def test_a_network_spells_its_shapes_as_a_layer_does():
    net = mnist_net()
    assert net.input_shape == net.in_shape == ("channels", "height", "width")
    assert net.output_shape() == net.out_shape == (5,)
    assert net.output_shape((1, 8, 8)) == (5,)
    with pytest.raises(ValueError):
        net.output_shape((2, 8, 8))  # the convolution takes one channel
    images = dualtape.Network([dualtape.Reshape((6,), (1, 2, 3)),
                               dualtape.Convolution(1, 2, (2, 2)), dualtape.Relu()])
    assert images.input_shape == (6,) and images.output_shape() == (2, 1, 2)
    sequential = images.as_layer()
    assert sequential.input_shape == images.input_shape
    assert sequential.output_shape(None) == images.output_shape()


def test_an_image_smaller_than_the_kernel_fails_in_forward(backend):
    layer = dualtape.Convolution(1, 1, (3, 3))
    with pytest.raises(ValueError, match=r"Convolution\(1, 1, \(3, 3\), \(1, 1\)\): the input's "
                                         r"width 2 is smaller than the kernel's 3"):
        layer.forward(dualtape.asarray(np.ones((1, 1, 3, 2)), dtype="float32"))
    _, y = layer.forward(dualtape.asarray(np.ones((1, 1, 3, 3)), dtype="float32"))
    assert tuple(y.shape) == (1, 1, 1, 1)


def test_sizes_a_network_could_not_check_are_checked_by_the_layer(backend):
    net = dualtape.Network([dualtape.Convolution(1, 2, 3), dualtape.Reshape((2, 2, 2), (8,))])
    with pytest.raises(ValueError, match=r"Reshape\(\(2, 2, 2\), \(8,\)\): input must have "
                                         r"shape \(batch, 2, 2, 2\), got \(1, 2, 3, 3\)"):
        net.forward(dualtape.asarray(np.ones((1, 1, 5, 5)), dtype="float32"))


def test_recurrent_network_refuses_images():
    with pytest.raises(TypeError, match=r"layer 0 Convolution.* works on images"):
        dualtape.RecurrentNetwork([dualtape.Convolution(1, 1, 1), dualtape.LSTM(1, 1)])


# --- hostile input ---------------------------------------------------------------------------


@pytest.mark.parametrize("make, message", [
    (lambda: dualtape.Convolution(1, 2, 3, stride=0), "stride must be a positive integer"),
    (lambda: dualtape.Convolution(1, 2, (3, 0)), "kernel must be a positive integer"),
    (lambda: dualtape.Convolution(1, 2, (True, 2)), "kernel must be a positive integer"),
    (lambda: dualtape.Convolution(1, 2, (3, 3, 3)), "kernel must be a positive integer"),
    (lambda: dualtape.Convolution(0, 2, 3), "channels_in must be a positive integer"),
    (lambda: dualtape.Convolution(1, 2.0, 3), "channels_out must be a positive integer"),
    (lambda: dualtape.Pooling(2, (1, 0)), "stride must be a positive integer"),
    (lambda: dualtape.Pooling("2"), "kernel must be a positive integer"),
    (lambda: dualtape.Pad(1, -1, 0, 0), "left and top must be a non-negative integer"),
    (lambda: dualtape.Crop(0, 0, 1.5, 0), "right and bottom must be a non-negative integer"),
    (lambda: dualtape.Reshape((2, 3), (5,)), r"shape_in \(2, 3\) has 6 elements but shape_out"),
    (lambda: dualtape.Reshape((2, 0), (0,)), "shape_in must be a tuple of positive sizes"),
], ids=["stride0", "kernel0", "kernel-bool", "kernel3d", "channels0", "channels-float",
        "pool-stride0", "pool-str", "pad-negative", "crop-float", "reshape-count", "reshape-0"])
def test_bad_arguments_are_one_line_errors(make, message):
    with pytest.raises(ValueError, match=message) as info:
        make()
    assert "\n" not in str(info.value)


def test_one_number_is_a_square():
    layer = dualtape.Convolution(1, 1, 3, 2)
    assert (layer.kernel, layer.stride) == ((3, 3), (2, 2))


@pytest.mark.parametrize("shape, message", [
    ((1, 2, 4, 4), r"input must have shape \(batch, 1, height, width\) or \(1, height, width\), "
                   r"got \(1, 2, 4, 4\)"),
    ((4, 4), r"got \(4, 4\)"),
    ((1, 1, 1, 4, 4), r"got \(1, 1, 1, 4, 4\)"),
])
def test_wrong_image_shapes_are_refused(backend, shape, message):
    with pytest.raises(ValueError, match=message):
        dualtape.Convolution(1, 1, 2).forward(dualtape.asarray(np.ones(shape), dtype="float32"))


def test_integer_images_are_refused(backend):
    with pytest.raises(TypeError, match="must be floating point"):
        mnist_net().forward(dualtape.asarray(np.ones((1, 1, 8, 8), dtype=np.int32)))


def test_nan_images_give_nan_and_train_refuses_them(backend):
    net = mnist_net()
    x = np.zeros((2, 1, 8, 8))
    x[0, 0, 3, 3] = np.nan
    _, y = net.forward(dualtape.asarray(x))
    assert np.isnan(np64(y)[0]).all() and np.isfinite(np64(y)[1]).all()
    with pytest.raises(FloatingPointError, match="the input holds NaN"):
        dualtape.train(net, dualtape.asarray(x), dualtape.asarray(np.array([0, 1])),
                       dualtape.SGD(0.1), loss="cross_entropy")


def test_an_image_of_another_backend_is_refused(backend):
    layer = dualtape.Convolution(1, 1, 2)
    other, name = other_backend_array(backend, np.ones((1, 1, 3, 3), dtype=np.float32))
    with pytest.raises((TypeError, ValueError), match=name):
        layer.forward(other)


def test_an_image_on_another_device_is_refused(backend):
    layer = dualtape.Convolution(1, 1, 2)
    other, name = other_device_array(backend, np.ones((1, 1, 3, 3)))
    with pytest.raises((TypeError, ValueError), match=name):
        layer.forward(other)


def test_a_gradient_of_the_wrong_shape_is_refused(backend):
    layer = dualtape.Pooling(2)
    tape, _ = layer.forward(dualtape.asarray(np.ones((2, 1, 4, 4))))
    with pytest.raises(ValueError, match=r"dy must have shape \(2, 1, 2, 2\), got \(2, 1, 2, 3\)"):
        layer.backward(tape, dualtape.asarray(np.ones((2, 1, 2, 3))))


def test_a_tape_of_another_layer_is_refused(backend):
    tape, _ = dualtape.Pooling(2).forward(dualtape.asarray(np.ones((1, 1, 4, 4))))
    with pytest.raises(ValueError, match="the tape is a PoolingTape, not one of this layer"):
        dualtape.Pad(1, 1, 1, 1).backward(tape, dualtape.asarray(np.ones((1, 1, 4, 4))))


@pytest.mark.parametrize("kind", [dualtape.Convolution, dualtape.Deconvolution])
def test_a_stale_filter_tape_is_refused(backend, kind):
    layer = kind(1, 1, 2, dtype="float64")
    tape, y = layer.forward(dualtape.asarray(np.ones((1, 1, 3, 3))))
    dualtape.SGD(0.1).step([layer.params], [{k: v * 0 + 1 for k, v in layer.params.items()}])
    with pytest.raises(RuntimeError, match="this tape was made with other parameters"):
        layer.backward(tape, dualtape.asarray(np.ones(tuple(y.shape))))


# --- aliasing --------------------------------------------------------------------------------


@pytest.mark.parametrize("first", ["crop", "reshape", "trivial", "conv", "pad", "pool"])
def test_writing_to_the_input_afterwards_never_changes_a_tape(first):
    lead = {"crop": dualtape.Crop(1, 0, 0, 1), "reshape": dualtape.Reshape((1, 4, 4), (1, 4, 4)),
            "trivial": dualtape.Trivial(), "conv": dualtape.Convolution(1, 1, 1, seed=0,
                                                                          dtype="float64"),
            "pad": dualtape.Pad(1, 0, 0, 0), "pool": dualtape.Pooling(1)}[first]
    net = dualtape.Network([lead, dualtape.Convolution(1, 2, (2, 2), seed=1, dtype="float64")])
    x = np.random.default_rng(8).normal(size=(2, 1, 4, 4))
    tapes, y = net.forward(x)
    dy = np.ones(tuple(y.shape))
    expected = net.backward(tapes, dy)
    x[...] = 100.0
    again = net.backward(tapes, dy)
    np.testing.assert_array_equal(np64(again[1]), np64(expected[1]))
    np.testing.assert_array_equal(np64(again[0][1]["W"]), np64(expected[0][1]["W"]))


@pytest.mark.parametrize("layer", [dualtape.Crop(1, 0, 0, 1), dualtape.Trivial(),
                                   dualtape.Reshape((1, 4, 4), (16,)), dualtape.Pooling(2),
                                   dualtape.Convolution(1, 1, 2, dtype="float64")],
                         ids=["crop", "trivial", "reshape", "pool", "conv"])
def test_outputs_are_read_only_on_numpy(layer):
    """(Standalone, Trivial takes features, as the activations do; in a network any shape.)"""
    shape = (1, 16) if isinstance(layer, dualtape.Trivial) else (1, 1, 4, 4)
    _, y = layer.forward(np.ones(shape))
    assert not y.flags.writeable


# --- save and load ---------------------------------------------------------------------------


def test_save_and_load_round_trip(backend, tmp_path):
    net = dualtape.Network([
        dualtape.Pad(1, 2, 0, 1), dualtape.Convolution(2, 3, (3, 2), (2, 1), seed=3,
                                                       dtype="float64"),
        dualtape.Elu(), dualtape.Deconvolution(3, 3, (1, 1), seed=5, dtype="float64"),
        dualtape.Pooling((2, 2), (1, 1)), dualtape.Crop(0, 1, 1, 0),
        dualtape.Trivial(), dualtape.Sinusoid(), dualtape.Reshape((3, 2, 3), (18,)),
        dualtape.FullyConnected(18, 2, seed=4, dtype="float64"),
    ])
    dualtape.save(net, tmp_path / "net.npz")
    loaded = dualtape.load(tmp_path / "net.npz")
    assert repr(loaded) == repr(net)
    assert [layer.config() for layer in loaded.layers] == [layer.config() for layer in net.layers]
    x = dualtape.asarray(np.random.default_rng(9).normal(size=(2, 2, 7, 5)))
    np.testing.assert_array_equal(np64(loaded.predict(x)), np64(net.predict(x)))
    assert backend_of(loaded.layers[1].params["W"]) == backend


def test_a_saved_kernel_of_the_wrong_size_is_refused(tmp_path):
    import json
    net = dualtape.Network([dualtape.Convolution(1, 1, 2, dtype="float64")])
    dualtape.save(net, tmp_path / "net.npz")
    with np.load(tmp_path / "net.npz") as data:
        arrays = {k: data[k] for k in data.files}
    header = json.loads(arrays["__header__"].tobytes())
    header["layers"][0]["config"]["kernel"] = [-1, 2]
    arrays["__header__"] = np.frombuffer(json.dumps(header).encode(), dtype=np.uint8)
    np.savez(tmp_path / "bad.npz", **arrays)
    with pytest.raises(ValueError, match="kernel must be a positive integer") as info:
        dualtape.load(tmp_path / "bad.npz")
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("axis", ["height", "width"])
@pytest.mark.parametrize("make", [
    lambda: dualtape.Deconvolution(1, 2, 2, stride=2), lambda: dualtape.Convolution(1, 2, 2),
    lambda: dualtape.Pooling(2), lambda: dualtape.Crop(0, 0, 0, 0)],
    ids=["deconvolution", "convolution", "pooling", "crop"])
def test_an_empty_height_or_width_is_refused_in_one_line_naming_the_layer(backend, make, axis):
    layer = make()
    shape = (1, 1, 0, 4) if axis == "height" else (1, 1, 4, 0)
    with pytest.raises(ValueError, match=rf"^{layer.kind}\(.*\): .*{axis} (is )?0") as caught:
        layer.forward(dualtape.asarray(np.ones(shape), dtype="float32"))
    assert "\n" not in str(caught.value)
