"""Composite layers: Sequential (a network as a layer), Merge and Concat branches, residual
blocks; gradients, optimizers, stale tapes, shapes, hostile use."""

from __future__ import annotations

import numpy as np
import pytest

import dualtape
from dualtape.backend import backend_of

from .conftest import np64
from .helpers import away_from_kinks, other_backend_array

F64 = {"dtype": "float64"}


def fc(n_in: int, n_out: int, seed: int) -> dualtape.FullyConnected:
    return dualtape.FullyConnected(n_in, n_out, seed=seed, **F64)


def conv(c_in: int, c_out: int, kernel, seed: int) -> dualtape.Convolution:
    return dualtape.Convolution(c_in, c_out, kernel, seed=seed, **F64)


def reshape(shape: tuple, n: int = 4) -> dualtape.Reshape:
    """``n`` features as an example of ``shape``."""
    return dualtape.Reshape((n,), shape)


def residual(channels: int, seed: int) -> dualtape.Merge:
    """Grenade's residual block: two padded 3x3 convolutions, merged with the identity."""
    return dualtape.Merge(dualtape.Network([
        dualtape.Pad(1, 1, 1, 1), conv(channels, channels, 3, seed), dualtape.Relu(),
        dualtape.Pad(1, 1, 1, 1), conv(channels, channels, 3, seed + 1)]), dualtape.Trivial())


def image_net() -> dualtape.Network:
    """A residual block, a Concat of two convolution branches (one a Network), pooling and a
    classifier: every composite, nested."""
    return dualtape.Network([
        residual(2, 1),
        dualtape.Concat(dualtape.Network([conv(2, 3, 1, 3)]), [conv(2, 1, 3, 4), dualtape.Tanh(),
                                                                dualtape.Pad(1, 1, 1, 1)]),
        dualtape.Pooling(2), dualtape.Reshape((4, 2, 2), (16,)), fc(16, 3, 5),
    ])


COMPOSITES = {
    "concat-features": (lambda: dualtape.Concat(fc(3, 2, 1), [fc(3, 4, 2), dualtape.Tanh()]),
                        (4, 3)),
    "concat-images": (lambda: dualtape.Concat(conv(2, 3, 1, 1), [conv(2, 2, 1, 2), dualtape.Elu()],
                                              dualtape.Trivial()), (2, 2, 3, 4)),
    "merge-features": (lambda: dualtape.Merge(fc(3, 3, 1), [fc(3, 2, 2), dualtape.Tanh(),
                                                            fc(2, 3, 3)]), (4, 3)),
    "residual-conv": (lambda: residual(2, 1), (2, 2, 4, 5)),
    "nested": (lambda: dualtape.Sequential([
        dualtape.Network([fc(3, 4, 1), dualtape.Merge(dualtape.Trivial(), fc(4, 4, 2))]),
        dualtape.Concat(dualtape.Merge(fc(4, 2, 3), dualtape.Sequential([fc(4, 2, 4)])),
                        dualtape.Logit()), fc(6, 2, 5)]), (3, 3)),
    "network-as-layer": (lambda: image_net().as_layer(), (2, 2, 4, 4)),
}


@pytest.mark.parametrize("name", list(COMPOSITES))
def test_composite_gradients_match_finite_differences(backend, name):
    make, shape = COMPOSITES[name]
    dualtape.check_gradients(make(), away_from_kinks(shape, seed=3))


def test_network_grads_follow_params_and_match_the_layer_view(backend):
    net = image_net()
    x = away_from_kinks((2, 2, 4, 4), seed=1)
    r = np.random.default_rng(2).normal(size=(2, 3))
    tapes, _ = net.forward(dualtape.asarray(x))
    grads, dx = net.backward(tapes, dualtape.asarray(r))
    layer = net.as_layer()
    tape, _ = layer.forward(dualtape.asarray(x))
    layer_grads, layer_dx = layer.backward(tape, dualtape.asarray(r))
    assert [sorted(g) for g in grads] == [sorted(p) for p in net.params]
    assert len(net.params) == len(net.leaves()) == 13
    np.testing.assert_array_equal(np64(dx), np64(layer_dx))
    for g, h, p in zip(grads, layer_grads, net.params, strict=True):
        for name in p:
            assert tuple(g[name].shape) == tuple(p[name].shape)
            np.testing.assert_array_equal(np64(g[name]), np64(h[name]))


def test_a_network_inside_a_network_shares_its_layers(backend):
    inner = dualtape.Network([fc(3, 4, 1), dualtape.Tanh()])
    outer = dualtape.Network([inner, fc(4, 2, 2)])
    assert isinstance(outer.layers[0], dualtape.Sequential)
    assert outer.params[0] is inner.params[0]
    assert outer.in_shape == (3,) and outer.out_shape == (2,)


@pytest.mark.parametrize("optimizer", [lambda: dualtape.SGD(0.1), lambda: dualtape.Adam(0.01)],
                         ids=["sgd", "adam"])
def test_training_updates_every_branch_parameter(backend, optimizer):
    net = image_net()
    before = [{k: np64(v).copy() for k, v in group.items()} for group in net.params]
    x = away_from_kinks((4, 2, 4, 4), seed=5)
    dualtape.train(net, dualtape.asarray(x), dualtape.asarray(np.array([0, 1, 2, 0])),
                   optimizer(), loss="softmax_cross_entropy")
    changed = [not np.array_equal(np64(v), before[g][k])
               for g, group in enumerate(net.params) for k, v in group.items()]
    assert len(changed) == 10 and all(changed)


def test_sgd_steps_each_branch_by_its_own_gradient(backend):
    net = dualtape.Network([dualtape.Merge(fc(3, 2, 1), [fc(3, 4, 2), dualtape.Tanh(),
                                                          fc(4, 2, 3)])])
    x = dualtape.asarray(away_from_kinks((5, 3), seed=2))
    tapes, y = net.forward(x)
    grads, _ = net.backward(tapes, dualtape.asarray(np.ones((5, 2))))
    expected = [{k: np64(v) - 0.5 * np64(grads[g][k]) for k, v in group.items()}
                for g, group in enumerate(net.params)]
    dualtape.SGD(0.5).step(net.params, grads)
    for group, want in zip(net.params, expected, strict=True):
        for k in group:
            np.testing.assert_allclose(np64(group[k]), want[k], rtol=1e-12)


def test_a_stale_tape_of_a_branch_is_refused(backend):
    net = dualtape.Network([residual(2, 1)])
    x = dualtape.asarray(away_from_kinks((1, 2, 3, 3), seed=0))
    tapes, y = net.forward(x)
    grads, _ = net.backward(tapes, dualtape.asarray(np.ones(tuple(y.shape))))
    dualtape.SGD(0.1).step(net.params, grads)
    with pytest.raises(RuntimeError, match="this tape was made with other parameters"):
        net.backward(tapes, dualtape.asarray(np.ones(tuple(y.shape))))
    block = net.layers[0]
    tape, y = block.forward(x)
    block.children[0].children[1].params["b"] = dualtape.asarray(np.zeros(2))
    with pytest.raises(RuntimeError, match="this tape was made with other parameters"):
        block.backward(tape, dualtape.asarray(np.ones(tuple(y.shape))))


def test_an_update_through_the_inner_network_stales_the_outer_tapes(backend):
    inner = dualtape.Network([fc(3, 3, 1)])
    outer = dualtape.Network([dualtape.Merge(inner, dualtape.Trivial())])
    tapes, y = outer.forward(dualtape.asarray(np.ones((2, 3))))
    itapes, iy = inner.forward(dualtape.asarray(np.ones((2, 3))))
    dualtape.SGD(0.1).step(inner.params, inner.backward(itapes, iy)[0])
    with pytest.raises(RuntimeError, match="this tape was made with other parameters"):
        outer.backward(tapes, y)


def test_single_examples_come_back_in_their_own_form(backend):
    layer = residual(2, 1)
    x = away_from_kinks((2, 3, 3), seed=4)
    tape, y = layer.forward(dualtape.asarray(x))
    assert tuple(y.shape) == (2, 3, 3)
    grads, dx = layer.backward(tape, dualtape.asarray(np.ones((2, 3, 3))))
    assert tuple(dx.shape) == (2, 3, 3)
    _, batch = layer.forward(dualtape.asarray(x[None]))
    np.testing.assert_array_equal(np64(y), np64(batch)[0])
    net = dualtape.Network([dualtape.Concat(fc(3, 2, 1), fc(3, 1, 2))])
    assert tuple(net.predict(dualtape.asarray(np.ones(3))).shape) == (3,)


def test_concat_states_the_joined_shape_and_chains(backend):
    features = dualtape.Concat(fc(3, 2, 1), fc(3, 4, 2))
    assert features.input_shape == (3,) and features.output_shape(None) == (6,)
    assert dualtape.Network([features, fc(6, 1, 3)]).out_shape == (1,)
    with pytest.raises(ValueError, match="takes 5 features but layer 0 .* gives 6"):
        dualtape.Network([dualtape.Concat(fc(3, 2, 1), fc(3, 4, 2)), fc(5, 1, 3)])
    images = dualtape.Concat(conv(2, 3, 1, 1), conv(2, 1, 1, 2))
    assert images.output_shape((2, 5, 6)) == (4, 5, 6)
    assert dualtape.Network([dualtape.Reshape((20,), (2, 2, 5)), images]).out_shape == (4, 2, 5)


def test_a_sequential_gives_the_shape_of_the_example_it_is_given(backend):
    layer = dualtape.Sequential([conv(1, 2, 3, 1), dualtape.Relu(), dualtape.Pooling(2)])
    assert layer.output_shape(None) == (2, "height", "width")
    assert layer.output_shape((1, 8, 10)) == (2, 3, 4)
    with pytest.raises(ValueError, match="takes examples of shape"):
        layer.output_shape((3, 8, 10))  # the convolution takes one channel
    net = dualtape.Network([dualtape.Reshape((80,), (1, 8, 10)), layer])
    assert net.out_shape == (2, 3, 4)


def test_branches_take_the_sizes_a_later_branch_states(backend):
    # branch 0 leaves the height and width free, branch 1 states them: the input has branch
    # 1's sizes, which a Network after a Reshape of another size sees at construction
    concat = dualtape.Concat(conv(2, 3, 1, 1), dualtape.Reshape((2, 2, 3), (2, 2, 3)))
    assert concat.input_shape == (2, 2, 3) and concat.output_shape(None) == (5, 2, 3)
    merge = dualtape.Merge(dualtape.Trivial(), conv(2, 2, 1, 2),
                           dualtape.Reshape((2, 2, 3), (2, 2, 3)))
    assert merge.input_shape == (2, 2, 3)
    with pytest.raises(ValueError, match=r"takes examples of shape \(2, 2, 3\) but layer 0"):
        dualtape.Network([dualtape.Reshape((12,), (2, 3, 2)), concat])


@pytest.mark.parametrize("make, message", [
    (lambda: dualtape.Merge(fc(3, 4, 1), fc(3, 5, 2)), "Merge adds outputs of one shape"),
    (lambda: dualtape.Merge(reshape((1, 2, 2)), reshape((2, 2, 1))),
     "Merge adds outputs of one shape"),
    (lambda: dualtape.Concat(reshape((1, 2, 2)), reshape((1, 4, 1))),
     "Concat joins outputs that agree on all but their first axis"),
    (lambda: dualtape.Concat(reshape((2, 2, 2), 8), reshape((1, 4, 2), 8)), "Concat joins"),
    (lambda: dualtape.Concat(reshape((1, 2, 2)), reshape((1, 2, 1, 2))),
     "Concat joins outputs"),
    (lambda: dualtape.Merge(fc(3, 2, 1), fc(4, 2, 2)), "takes 4 features but branch 0 .* one"),
    (lambda: dualtape.Concat(conv(2, 2, 3, 1), conv(3, 2, 3, 2)), "branches run on one input"),
    (lambda: dualtape.Merge(fc(3, 2, 1)), "at least two branches"),
    (lambda: dualtape.Concat(), "at least two branches"),
    (lambda: dualtape.Sequential([]), "non-empty list"),
    (lambda: dualtape.Network([dualtape.Merge(fc(3, 3, 1), dualtape.Trivial()), fc(4, 1, 2)]),
     "takes 4 features"),
    (lambda: dualtape.Merge([reshape((1, 2, 2)), conv(1, 1, 3, 1)], dualtape.Trivial()),
     "smaller than the kernel"),
])
def test_branches_that_cannot_combine_fail_at_construction(backend, make, message):
    with pytest.raises(ValueError, match=message) as info:
        make()
    assert "\n" not in str(info.value)


def test_free_sizes_that_disagree_fail_when_the_data_comes(backend):
    x = dualtape.asarray(np.ones((1, 2, 5, 5)))
    merge = dualtape.Merge(dualtape.Trivial(), conv(2, 2, 5, 1))  # (2, 1, 1) against (2, 5, 5)
    with pytest.raises(ValueError, match="Merge: branch 1 .* gives .*Merge adds outputs of one"):
        merge.forward(x)
    concat = dualtape.Concat(dualtape.Trivial(), conv(2, 2, 3, 1))
    with pytest.raises(ValueError, match="Concat: branch 1 .* Concat joins"):
        dualtape.Network([concat]).forward(x)


@pytest.mark.parametrize("make, error, message", [
    (lambda: dualtape.Merge(3, dualtape.Trivial()), TypeError, "branch 0 is a int, not a Layer"),
    (lambda: dualtape.Network([dualtape.Relu(), "fc"]), TypeError, "layer 1 is a str, not a Layer"),
    (lambda: dualtape.Merge(dualtape.LSTM(3, 3), dualtape.Trivial()), TypeError, "is recurrent"),
    (lambda: dualtape.RecurrentNetwork([dualtape.LSTM(3, 3), dualtape.Merge(
        dualtape.Trivial(), dualtape.Tanh())]), TypeError, "chain in a Network"),
    (lambda: dualtape.RecurrentNetwork([dualtape.Network([dualtape.Tanh()])]), TypeError,
     "chain in a Network"),
])
def test_what_is_not_a_branch_is_refused(backend, make, error, message):
    with pytest.raises(error, match=message):
        make()


def test_a_layer_with_parameters_may_appear_once(backend):
    shared = fc(3, 3, 1)
    with pytest.raises(ValueError, match="appears more than once"):
        dualtape.Merge(shared, shared)
    with pytest.raises(ValueError, match="appears more than once"):
        dualtape.Network([shared, dualtape.Merge(dualtape.Trivial(), [shared])])
    relu = dualtape.Relu()
    assert len(dualtape.Merge(relu, relu).param_groups) == 2


def test_mixed_backends_and_dtypes_are_refused(backend):
    here = fc(3, 3, 1)
    other_name = "array_api_strict" if backend.name == "numpy" else "numpy"
    with dualtape.use_backend(other_name):
        there = fc(3, 3, 2)
    with pytest.raises(ValueError, match="one dtype on one backend"):
        dualtape.Merge(here, [dualtape.Tanh(), there])
    single = dualtape.FullyConnected(3, 3, seed=3, dtype="float32")
    with pytest.raises(ValueError, match="one dtype on one backend"):
        dualtape.Concat(dualtape.Sequential([here]), single)
    x, _ = other_backend_array(backend, np.ones((2, 3)))
    with pytest.raises((TypeError, ValueError), match="backend|device"):
        dualtape.Merge(fc(3, 3, 4), dualtape.Trivial()).forward(x)


def test_tapes_of_another_layer_are_refused(backend):
    x = dualtape.asarray(np.ones((2, 3)))
    two = dualtape.Merge(fc(3, 3, 1), dualtape.Trivial())
    three = dualtape.Merge(fc(3, 3, 2), dualtape.Trivial(), dualtape.Tanh())
    tape, y = three.forward(x)
    with pytest.raises(ValueError, match="holds 3 tapes but .* has 2 branches"):
        two.backward(tape, y)
    swapped = dualtape.Merge(dualtape.Trivial(), fc(3, 3, 3))
    tape, y = swapped.forward(x)
    with pytest.raises(ValueError, match="inside Merge.*not one of this layer"):
        two.backward(tape, y)
    net = dualtape.Network([two])
    with pytest.raises(ValueError, match="tape 0 is a ConcatTape"):
        net.backward([dualtape.Concat(dualtape.Trivial(), dualtape.Tanh()).forward(x)[0]], y)


@pytest.mark.parametrize("make, x_shape, dy_shape", [
    (lambda: dualtape.Sequential([fc(3, 4, 1), dualtape.Tanh(), fc(4, 2, 2)]), (2, 3), (2, 2)),
    (lambda: dualtape.Concat(fc(3, 4, 1), fc(3, 1, 2)), (2, 3), (2, 5)),
    (lambda: dualtape.Merge(fc(3, 4, 1), fc(3, 4, 2)), (2, 3), (2, 4)),
])
def test_dy_is_checked_against_the_composite_output(backend, make, x_shape, dy_shape):
    layer = make()
    tape, y = layer.forward(dualtape.asarray(np.ones(x_shape)))
    assert tuple(y.shape) == dy_shape
    layer.backward(tape, dualtape.asarray(np.ones(dy_shape)))
    wrong = (dy_shape[0], dy_shape[1] + 1)
    with pytest.raises(ValueError, match=r"dy must have shape"):
        layer.backward(tape, dualtape.asarray(np.ones(wrong)))


def test_writing_to_the_input_afterwards_does_not_change_a_branch_tape(backend):
    layer = dualtape.Merge(dualtape.Tanh(), fc(3, 3, 1))
    host = away_from_kinks((2, 3), seed=6)
    x = dualtape.asarray(host.copy())
    tape, y = layer.forward(x)
    expected, _ = layer.backward(*layer.forward(dualtape.asarray(host)))
    x[...] = 0.0
    grads, _ = layer.backward(tape, y)
    np.testing.assert_array_equal(np64(grads[1]["W"]), np64(expected[1]["W"]))


def test_composites_nest_to_a_limit(backend):
    layer = dualtape.Tanh()
    for _ in range(32):
        layer = dualtape.Sequential([layer])
    assert dualtape.Network([layer]).predict(dualtape.asarray(np.zeros((1, 2)))).shape == (1, 2)
    with pytest.raises(ValueError, match="nest more than 32 deep"):
        dualtape.Sequential([layer])


def test_to_moves_and_set_training_reaches_every_leaf(backend):
    dropout = dualtape.Dropout(0.5, seed=1)
    net = dualtape.Network([dualtape.Merge(dualtape.Trivial(), [fc(3, 3, 1), dropout])])
    net.set_training(False)
    assert dropout.training is False
    target = "array_api_strict" if backend.name == "numpy" else "numpy"
    net.to(target)
    assert {backend_of(p).name for group in net.params for p in group.values()} == {target}
