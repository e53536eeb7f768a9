"""Losses: values and gradients against hand formulas and finite differences, labels, masks."""

from __future__ import annotations

import math

import numpy as np
import pytest

import dualtape
from dualtape import losses
from dualtape.backend import namespace_of
from dualtape.gradcheck import numeric_gradient

from .conftest import np64
from .helpers import other_backend_array

RNG = np.random.default_rng(0)
Y = RNG.normal(size=(4, 3))
T_DENSE = RNG.uniform(size=(4, 3))
LABELS = np.array([2, 0, 1, 2])
ONE_HOT = np.eye(3)[LABELS]
PROBS = np.exp(Y) / np.exp(Y).sum(axis=1, keepdims=True)


def evaluate(loss, y, target, weights=None):
    """``(loss, dy)`` of a loss on backend arrays, as numpy float64."""
    y = dualtape.asarray(y)
    value, dy = loss(namespace_of(y), y, target, weights)
    assert tuple(value.shape) == ()
    return float(value), np64(dy)


def log_softmax(y: np.ndarray) -> np.ndarray:
    z = y - y.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


# --- squared error ---------------------------------------------------------------------------


def test_squared_error_value_and_gradient(backend):
    value, dy = evaluate(losses.squared_error, Y, dualtape.asarray(T_DENSE))
    assert value == pytest.approx(0.5 * np.sum((Y - T_DENSE) ** 2) / 4, rel=1e-12)
    np.testing.assert_allclose(dy, (Y - T_DENSE) / 4, rtol=1e-12)


def test_squared_error_gradient_at_batch_one_is_exactly_output_minus_target(backend):
    y, t = Y[:1], T_DENSE[:1]
    value, dy = evaluate(losses.squared_error, y, dualtape.asarray(t))
    np.testing.assert_array_equal(dy, y - t)
    assert value == pytest.approx(0.5 * np.sum((y - t) ** 2), rel=1e-12)


DENSE_CASES = [("squared_error", T_DENSE), ("softmax_cross_entropy", ONE_HOT),
               ("cross_entropy", ONE_HOT)]
"""Each loss with a dense target of the kind it takes."""


@pytest.mark.parametrize("name, target", DENSE_CASES)
def test_loss_gradient_matches_finite_differences(backend, name, target):
    loss = losses.loss_function(name)
    y0 = PROBS if name == "cross_entropy" else Y
    _, dy = evaluate(loss, y0, dualtape.asarray(target))
    expected = numeric_gradient(lambda y: evaluate(loss, y, dualtape.asarray(target))[0],
                                y0.copy())
    np.testing.assert_allclose(dy, expected, rtol=1e-6, atol=1e-9)


# --- softmax cross-entropy -------------------------------------------------------------------


def test_softmax_cross_entropy_value_and_gradient(backend):
    value, dy = evaluate(losses.softmax_cross_entropy, Y, dualtape.asarray(T_DENSE))
    assert value == pytest.approx(-np.sum(T_DENSE * log_softmax(Y)) / 4, rel=1e-12)
    np.testing.assert_allclose(dy, (np.exp(log_softmax(Y)) - T_DENSE) / 4, rtol=1e-12)


def test_softmax_cross_entropy_is_stable_for_huge_logits(backend):
    y = np.array([[1000.0, 0.0, -1000.0], [-5000.0, 5000.0, 0.0]])
    value, dy = evaluate(losses.softmax_cross_entropy, y, dualtape.asarray([[0.0, 1.0, 0.0],
                                                                            [0.0, 1.0, 0.0]]))
    # Example 0: -log softmax = 1000 - 0 = 1000 (the others vanish); example 1: 0.
    assert value == pytest.approx(1000.0 / 2, rel=1e-12)
    np.testing.assert_allclose(dy, [[0.5, -0.5, 0.0], [0.0, 0.0, 0.0]], atol=1e-15)


@pytest.mark.parametrize("name", ["softmax_cross_entropy", "cross_entropy"])
def test_integer_labels_give_the_same_as_one_hot_targets(backend, name):
    loss = losses.loss_function(name)
    y = PROBS if name == "cross_entropy" else Y
    from_labels = evaluate(loss, y, dualtape.asarray(LABELS))
    from_one_hot = evaluate(loss, y, dualtape.asarray(ONE_HOT))
    assert from_labels[0] == pytest.approx(from_one_hot[0], rel=1e-14)
    np.testing.assert_allclose(from_labels[1], from_one_hot[1], rtol=1e-14)


@pytest.mark.parametrize("name", ["softmax_cross_entropy", "cross_entropy"])
def test_sequence_labels_with_a_mask_equal_one_hot_targets(backend, name):
    rng = np.random.default_rng(5)
    y = rng.normal(size=(4, 3, 5))
    if name == "cross_entropy":
        y = np.exp(y) / np.exp(y).sum(axis=-1, keepdims=True)
    labels = rng.integers(0, 5, (4, 3))
    weights = dualtape.asarray((rng.random((4, 3)) < 0.6).astype(np.float64))
    xp, loss = dualtape.get_backend().xp, losses.loss_function(name)
    value, dy = loss(xp, dualtape.asarray(y), dualtape.asarray(labels), weights)
    dense_value, dense_dy = loss(xp, dualtape.asarray(y), dualtape.asarray(np.eye(5)[labels]),
                                 weights)
    assert float(value) == pytest.approx(float(dense_value), rel=1e-14)
    np.testing.assert_allclose(np64(dy), np64(dense_dy), rtol=1e-14, atol=1e-17)


@pytest.mark.parametrize("labels", [[0, 1, 3, 2], [0, -1, 1, 2], [0, 1, 255, 2]])
@pytest.mark.parametrize("dtype", ["int64", "int32", "uint8"])
@pytest.mark.parametrize("jit", ["", "0"])
def test_labels_out_of_range_raise(backend, labels, dtype, jit, monkeypatch):
    """In every integer dtype, on numpy's short way (labels given in the output's shape less
    its class axis: checked in the compiled loss's pass, or without it, DUALTAPE_JIT=0, by
    numpy) and the others."""
    if dtype == "uint8" and min(labels) < 0:
        pytest.skip("no negative uint8")
    monkeypatch.setenv("DUALTAPE_JIT", jit)
    with pytest.raises(ValueError, match=r"class labels must lie in \[0, 3\), got one outside"):
        evaluate(losses.softmax_cross_entropy, Y,
                 dualtape.asarray(np.array(labels).astype(dtype)))


@pytest.mark.parametrize("name", ["softmax_cross_entropy", "cross_entropy"])
@pytest.mark.parametrize("labels", [[0, 1, 3, 2], [0, -1, 1, 2]])
def test_labels_out_of_range_raise_with_weights_too(backend, name, labels):
    """A mask (weights) takes the generic code, which checks the range as well: label -1
    must not read the last class."""
    y = PROBS if name == "cross_entropy" else Y
    with pytest.raises(ValueError, match=r"class labels must lie in \[0, 3\), got one outside"):
        evaluate(losses.loss_function(name), y, dualtape.asarray(np.array(labels)),
                 dualtape.asarray(np.ones(4)))


def test_labels_of_the_wrong_shape_raise(backend):
    with pytest.raises(ValueError, match="labels must have shape"):
        evaluate(losses.softmax_cross_entropy, Y, dualtape.asarray([0, 1, 2]))
    with pytest.raises(ValueError, match=r"labels must have shape \(3, 2\), got \(3,\)"):
        evaluate(losses.softmax_cross_entropy, SEQ_Y[:, :, :3], dualtape.asarray([0, 1, 2]))
    # one label per step is enough only at batch 1, where (T,) and (T, 1) are the same
    value = evaluate(losses.softmax_cross_entropy, SEQ_Y[:, :1], dualtape.asarray([0, 3, 1]))
    expected = evaluate(losses.softmax_cross_entropy, SEQ_Y[:, :1],
                        dualtape.asarray(np.eye(4)[[[0], [3], [1]]]))
    assert value[0] == pytest.approx(expected[0], rel=1e-12)


# --- cross-entropy on probabilities ----------------------------------------------------------


def test_cross_entropy_value_and_gradient(backend):
    value, dy = evaluate(losses.cross_entropy, PROBS, dualtape.asarray(ONE_HOT))
    assert value == pytest.approx(-np.sum(ONE_HOT * np.log(PROBS)) / 4, rel=1e-12)
    np.testing.assert_allclose(dy, -ONE_HOT / PROBS / 4, rtol=1e-12)


def test_cross_entropy_ignores_zero_probabilities_where_the_target_is_zero(backend):
    value, dy = evaluate(losses.cross_entropy, np.array([[0.0, 1.0]]),
                         dualtape.asarray([[0.0, 1.0]]))
    assert value == 0.0
    np.testing.assert_array_equal(dy, [[0.0, -1.0]])


# --- weights and masks -----------------------------------------------------------------------


@pytest.mark.parametrize("name, target", DENSE_CASES)
def test_zero_weight_removes_an_example_even_with_a_nan_target(backend, name, target):
    loss = losses.loss_function(name)
    y = PROBS if name == "cross_entropy" else Y
    weights = dualtape.asarray([1.0, 0.0, 1.0, 1.0])
    _, full_dy = evaluate(loss, y, dualtape.asarray(target))
    nan_target = target.copy()
    nan_target[1] = np.nan
    value, dy = evaluate(loss, y, dualtape.asarray(nan_target), weights)
    # The kept examples contribute as before (still divided by the batch of 4)...
    kept = evaluate(loss, y[[0, 2, 3]], dualtape.asarray(target[[0, 2, 3]]))[0] * 3 / 4
    assert value == pytest.approx(kept, rel=1e-12)
    # ...and the masked one contributes nothing, NaN or not.
    np.testing.assert_array_equal(dy[1], 0.0)
    np.testing.assert_allclose(dy[[0, 2, 3]], full_dy[[0, 2, 3]], rtol=1e-14)


def test_sequence_mask_zeroes_whole_time_steps(backend):
    # (T, batch, features) outputs with (T, batch) weights: time step 1 has no target.
    y = RNG.normal(size=(3, 2, 4))
    t = RNG.normal(size=(3, 2, 4))
    t[1] = np.nan
    weights = dualtape.asarray([[1.0, 1.0], [0.0, 0.0], [1.0, 1.0]])
    value, dy = evaluate(losses.squared_error, y, dualtape.asarray(t), weights)
    kept = [0, 2]
    assert value == pytest.approx(0.5 * np.sum((y[kept] - t[kept]) ** 2) / 2, rel=1e-12)
    np.testing.assert_array_equal(dy[1], 0.0)
    np.testing.assert_allclose(dy[kept], (y[kept] - t[kept]) / 2, rtol=1e-12)


def test_without_weights_a_nan_target_gives_a_nan_loss(backend):
    t = T_DENSE.copy()
    t[0, 0] = np.nan
    value, _ = evaluate(losses.squared_error, Y, dualtape.asarray(t))
    assert np.isnan(value)


# --- names and bad targets -------------------------------------------------------------------


@pytest.mark.parametrize("name", ["MSE", "SquaredError", "mean_square_error", None, ["mse"]])
def test_unknown_loss_name_raises_value_error_listing_the_known_ones(name):
    with pytest.raises(ValueError) as info:
        losses.loss_function(name)
    assert "\n" not in str(info.value)
    for known in (*losses.LOSSES, *(f"{a} ({k})" for a, k in losses.ALIASES.items())):
        assert known in str(info.value)


def test_train_with_an_unknown_loss_raises_value_error(backend):
    net = dualtape.Network([dualtape.FullyConnected(3, 3, seed=0)])
    before = np64(net.params[0]["W"])
    with pytest.raises(ValueError, match="unknown loss"):
        dualtape.train(net, dualtape.asarray(Y, dtype="float32"),
                       dualtape.asarray(T_DENSE, dtype="float32"), dualtape.SGD(0.1),
                       loss="mean_square_error")
    np.testing.assert_array_equal(np64(net.params[0]["W"]), before)


def test_target_of_the_wrong_shape_raises_value_error(backend):
    with pytest.raises(ValueError, match="target"):
        evaluate(losses.squared_error, Y, dualtape.asarray(T_DENSE[:, :2]))


def test_target_from_another_backend_raises_type_error(backend):
    target, other = other_backend_array(backend, T_DENSE)
    with pytest.raises(TypeError) as info:
        evaluate(losses.squared_error, Y, target)
    assert other in str(info.value) and backend.name in str(info.value)


@pytest.mark.parametrize("target", [np.ones((4, 3), dtype=np.int64), LABELS, LABELS.tolist()],
                         ids=["dense-integers", "labels", "label-list"])
def test_integer_target_for_squared_error_points_to_the_cross_entropies(backend, target):
    target = dualtape.asarray(target) if isinstance(target, np.ndarray) else target
    with pytest.raises(TypeError, match="squared_error: the target holds integers") as info:
        evaluate(losses.squared_error, Y, target)
    for hint in ("loss='softmax_cross_entropy'", "loss='cross_entropy'", "floating point"):
        assert hint in str(info.value)


def test_train_with_integer_labels_and_the_default_loss_points_to_the_cross_entropies(backend):
    net = dualtape.Network([dualtape.FullyConnected(3, 2, seed=0, dtype="float64")])
    rnet = dualtape.RecurrentNetwork([dualtape.LSTM(3, 2, seed=0, dtype="float64")])
    before = [np64(p).copy() for p in (*net.params[0].values(), *rnet.params[0].values())]
    with pytest.raises(TypeError, match="loss='softmax_cross_entropy'"):
        dualtape.train(net, dualtape.asarray(np.ones((4, 3))), dualtape.asarray(LABELS % 2),
                       dualtape.SGD(0.1))
    with pytest.raises(TypeError, match="loss='softmax_cross_entropy'"):
        dualtape.train_recurrent(rnet, dualtape.asarray(np.ones((5, 4, 3))),
                                 dualtape.asarray(np.zeros((5, 4), dtype=np.int64)),
                                 dualtape.SGD(0.1))
    after = [np64(p) for p in (*net.params[0].values(), *rnet.params[0].values())]
    assert all(np.array_equal(a, b) for a, b in zip(before, after, strict=True))


@pytest.mark.parametrize("name", ["softmax_cross_entropy", "cross_entropy"])
def test_labels_as_a_python_list_go_to_the_networks_backend(backend, name):
    y = PROBS if name == "cross_entropy" else Y
    expected = evaluate(losses.loss_function(name), y, dualtape.asarray(ONE_HOT))
    value, dy = evaluate(losses.loss_function(name), y, LABELS.tolist())
    assert value == pytest.approx(expected[0], rel=1e-12)
    np.testing.assert_allclose(dy, expected[1], rtol=1e-12)


@pytest.mark.parametrize("name", ["softmax_cross_entropy", "cross_entropy"])
def test_float_labels_are_refused_with_how_to_convert(backend, name):
    with pytest.raises(TypeError, match=r"shape \(4,\) holds class labels, which must be "
                                        r"integers: convert them \(t.astype\(int\)\)"):
        evaluate(losses.loss_function(name), Y, dualtape.asarray(LABELS.astype(float)))


# --- sequences: the batch is the second-to-last axis ----------------------------------------


SEQ_Y = RNG.normal(size=(3, 2, 4))  # (T, B, V) with T != B: dividing by T or B differs
SEQ_LABELS = np.array([[0, 3], [2, 2], [1, 0]])
SEQ_T = np.eye(4)[SEQ_LABELS]


@pytest.mark.parametrize("name", ["squared_error", "softmax_cross_entropy", "cross_entropy"])
def test_sequence_losses_sum_over_time_and_average_over_the_batch_axis(backend, name):
    y = np.exp(SEQ_Y) / np.exp(SEQ_Y).sum(axis=-1, keepdims=True) if name == "cross_entropy" \
        else SEQ_Y
    if name == "squared_error":
        per_step, grad = 0.5 * ((y - SEQ_T) ** 2).sum(-1), y - SEQ_T
    elif name == "softmax_cross_entropy":
        per_step, grad = -(SEQ_T * log_softmax(y)).sum(-1), np.exp(log_softmax(y)) - SEQ_T
    else:
        per_step, grad = -(SEQ_T * np.log(y)).sum(-1), -SEQ_T / y
    value, dy = evaluate(getattr(losses, name), y, dualtape.asarray(SEQ_T))
    assert value == pytest.approx(per_step.sum() / 2, rel=1e-12)  # B = 2, not T = 3
    np.testing.assert_allclose(dy, grad / 2, rtol=1e-12)


# --- labels that are not integers ------------------------------------------------------------


@pytest.mark.parametrize("name", ["softmax_cross_entropy", "cross_entropy"])
@pytest.mark.parametrize("labels", [np.array([2, 0, 1j, 2]), np.array([True, False, True, True])],
                         ids=["complex", "bool"])
def test_non_integer_labels_are_refused(backend, name, labels):
    target = labels if backend.name == "numpy" else dualtape.asarray(labels)
    with pytest.raises(TypeError, match="class labels must be integers"):
        evaluate(getattr(losses, name), PROBS, target)


def test_complex_labels_are_refused_by_train(backend):
    net = dualtape.Network([dualtape.FullyConnected(3, 3, seed=0, dtype="float64")])
    before = dualtape.to_numpy(net.params[0]["W"]).copy()
    with pytest.raises(TypeError, match="class labels must be integers"):
        dualtape.train(net, dualtape.asarray(Y), dualtape.asarray(LABELS.astype(complex)),
                       dualtape.SGD(0.1), loss="softmax_cross_entropy")
    np.testing.assert_array_equal(dualtape.to_numpy(net.params[0]["W"]), before)


def test_labels_on_another_backend_raise_a_type_error_naming_both(backend):
    labels, other = other_backend_array(backend, LABELS)
    with pytest.raises(TypeError, match=f"{other}.*{backend.name}|{backend.name}.*{other}"):
        evaluate(losses.softmax_cross_entropy, Y, labels)


# --- a loss that does not fit the network's output -------------------------------------------


def classifier(last: str, n_out: int = 3, recurrent: bool = False):
    """``[FullyConnected(2, n_out), last]`` (an ``LSTM`` first when ``recurrent``)."""
    head = [dualtape.FullyConnected(2, n_out, seed=1, dtype="float64")]
    head += [] if last == "none" else [getattr(dualtape, last)()]
    if recurrent:
        return dualtape.RecurrentNetwork([dualtape.LSTM(2, 2, seed=0, dtype="float64"), *head])
    return dualtape.Network(head)


def train_once(net, loss: str, n_out: int = 3) -> float:
    labels = np.arange(4) % n_out
    if isinstance(net, dualtape.RecurrentNetwork):
        return dualtape.train_recurrent(net, dualtape.asarray(np.ones((3, 4, 2))),
                                        dualtape.asarray(np.tile(labels, (3, 1))),
                                        dualtape.SGD(0.1), loss=loss)[0]
    return dualtape.train(net, dualtape.asarray(np.ones((4, 2))), dualtape.asarray(labels),
                          dualtape.SGD(0.1), loss=loss)


@pytest.mark.parametrize("recurrent", [False, True], ids=["train", "train_recurrent"])
@pytest.mark.parametrize("last, loss, match", [
    ("Softmax", "softmax_cross_entropy", "takes logits, but the network ends in Softmax.*use "
                                         "loss='cross_entropy', or drop the final Softmax"),
    ("none", "cross_entropy", r"takes the probabilities of a final Softmax, but the network "
                              r"ends in FullyConnected\(2, 3\): use loss='softmax_cross_entropy'"),
    ("Logit", "cross_entropy", r"takes .* ends in Logit\(\): use loss='softmax_cross_entropy'"),
])
def test_a_cross_entropy_that_does_not_fit_the_last_layer_is_refused(backend, recurrent, last,
                                                                     loss, match):
    net = classifier(last, recurrent=recurrent)
    before = [np64(p).copy() for group in net.params for p in group.values()]
    where = "train_recurrent" if recurrent else "train"
    with pytest.raises(ValueError, match=f"{where}: loss='{loss}' " + match):
        train_once(net, loss)
    after = [np64(p) for group in net.params for p in group.values()]
    assert all(np.array_equal(a, b) for a, b in zip(before, after, strict=True))


@pytest.mark.parametrize("recurrent", [False, True], ids=["train", "train_recurrent"])
@pytest.mark.parametrize("last, loss", [("none", "softmax_cross_entropy"),
                                        ("Softmax", "cross_entropy")])
def test_each_cross_entropy_trains_the_network_it_fits(backend, recurrent, last, loss):
    assert math.isfinite(train_once(classifier(last, recurrent=recurrent), loss))


@pytest.mark.parametrize("last, loss", [("none", "softmax_cross_entropy"),
                                        ("Softmax", "cross_entropy")])
def test_a_cross_entropy_over_one_output_is_refused(backend, last, loss):
    with pytest.raises(ValueError, match="over one output is a softmax over one class"):
        train_once(classifier(last, n_out=1), loss, n_out=1)


def test_squared_error_fits_any_last_layer(backend):
    net = classifier("Softmax")
    targets = dualtape.asarray(np.eye(3)[[0, 1, 2, 0]])
    dualtape.train(net, dualtape.asarray(np.ones((4, 2))), targets, dualtape.SGD(0.1))


# --- the self-check of the compiled loss, against loops that err ----------------------------


class Loops:
    """Loops of the compiled loss's interface that compute ``compute(y, labels, scale)``."""

    def __init__(self, compute):
        self.softmax_cross_entropy = compute


def generic(y, labels, scale):
    """The generic code's value and gradient, as the compiled loops return them."""
    value, dy = losses._softmax_cross_entropy(np, y, labels, True, None)
    return float(value) * y.shape[0] * scale, dy.reshape(y.shape) * y.shape[0] * scale


def naive(y, labels, scale):
    """log(softmax) without the max taken first: log(0) at a label whose logit is far below."""
    with np.errstate(all="ignore"):
        p = np.exp(y) / np.exp(y).sum(axis=-1, keepdims=True)
        value = -np.log(p[np.arange(len(labels)), labels]).sum() * scale
    dy = p.copy()
    dy[np.arange(len(labels)), labels] -= 1
    return value, dy * scale


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_self_check_passes_loops_that_agree_and_names_those_that_do_not(dtype):
    like = np.ones(1, dtype)
    assert losses._check_compiled(Loops(generic), like) is None
    off = {"naive": naive,
           "value off by 1e-9": lambda y, ids, s: (generic(y, ids, s)[0] * (1 + 1e-9),
                                                   generic(y, ids, s)[1]),
           "gradient off by 1e-9": lambda y, ids, s: (generic(y, ids, s)[0],
                                                      generic(y, ids, s)[1] * (1 + 1e-9))}
    for why, compute in off.items():
        if (dtype == "float32") == ("1e-9" in why):
            continue  # 1e-9 is below float32's rounding; exp(-200) is 0 in float32 only
        assert losses._check_compiled(Loops(compute), like) == (
            "the softmax cross entropy at labels differs from the generic code beyond "
            "rounding"), why


# --- mask weights ----------------------------------------------------------------------------


def weights_of(mask, steps=3, batch=2, dtype="float32"):
    return losses.mask_weights(mask, steps, batch, dualtape.asarray(np.zeros((1,), dtype)))


@pytest.mark.parametrize("mask", [[True, False, True], [1, 0, 1], [1.0, 0.0, 1.0]],
                         ids=["bools", "ints", "floats"])
def test_a_mask_per_step_as_a_list_is_weights_on_the_networks_backend(backend, mask):
    found = weights_of(mask)
    assert found.dtype == dualtape.asarray(np.zeros(1, "float32")).dtype
    assert tuple(found.shape) == (3, 2)
    np.testing.assert_array_equal(np64(found), [[1, 1], [0, 0], [1, 1]])


@pytest.mark.parametrize("dtype", ["bool", "int64", "float64"])
def test_a_mask_per_step_and_sequence_is_taken_in_the_references_dtype(backend, dtype):
    mask = np.array([[1, 0], [0, 1], [1, 1]]).astype(dtype)
    found = weights_of(dualtape.asarray(mask), dtype="float64")
    assert found.dtype == dualtape.asarray(np.zeros(1)).dtype
    np.testing.assert_array_equal(np64(found), mask.astype(float))


@pytest.mark.parametrize("mask, error, message", [
    (["a", "b", "c"], TypeError, "train_recurrent: mask must be boolean or real 0/1, got <U1"),
    (3, TypeError, "train_recurrent: mask must be an array, got int"),
    (np.ones(3, complex), TypeError,
     "train_recurrent: mask must be boolean or real 0/1, got .*complex128"),
    (np.ones(4), ValueError, r"train_recurrent: mask must have shape \(3,\) or \(3, 2\), "
                             r"got \(4,\)"),
    (np.ones((2, 3)), ValueError, r"train_recurrent: mask must have shape \(3,\) or \(3, 2\), "
                                  r"got \(2, 3\)"),
    (np.array([1.0, 2.0, 0.0]), ValueError,
     r"^train_recurrent: a real mask must hold only 0 and 1 \(no NaN\)$"),
    (np.array([1.0, np.nan, 0.0]), ValueError, r"a real mask must hold only 0 and 1 \(no NaN\)"),
])
def test_a_bad_mask_is_refused_in_one_line(backend, mask, error, message):
    if isinstance(mask, np.ndarray):
        mask = dualtape.asarray(mask)
    with pytest.raises(error, match=message):
        weights_of(mask)


def test_a_mask_on_another_backend_is_refused_naming_both(backend):
    mask, other = other_backend_array(backend, np.ones(3))
    with pytest.raises(TypeError, match=f"mask is a .*{other}.* but the network lives on "):
        weights_of(mask)


# --- the words of the refusals ---------------------------------------------------------------


def test_an_unknown_loss_lists_the_known_ones_comma_separated():
    with pytest.raises(ValueError) as info:
        losses.loss_function("hinge")
    assert str(info.value) == (
        "unknown loss 'hinge'; known losses: " + ", ".join(losses.LOSSES) + "; aliases: "
        + ", ".join(f"{a} ({k})" for a, k in losses.ALIASES.items()))


def test_the_refusals_of_a_cross_entropy_that_does_not_fit_read_whole():
    with pytest.raises(ValueError) as info:
        losses.check_loss_for("cross_entropy", dualtape.Logit(), 3, "train")
    assert str(info.value).endswith("use loss='softmax_cross_entropy' (its outputs as logits, "
                                    "torch's cross_entropy), or add a Softmax")
    with pytest.raises(ValueError) as info:
        losses.check_loss_for("softmax_cross_entropy", object(), 1, "train")
    assert str(info.value) == (
        "train: loss='softmax_cross_entropy' over one output is a softmax over one class, 1 "
        "whatever the input: give the network one output per class (2 for two classes), or use "
        "loss='binary_cross_entropy_with_logits' on its one output")


def test_a_dense_cross_entropy_target_of_the_wrong_shape_reads_whole(backend):
    with pytest.raises(ValueError, match=r"^loss: target must have shape \(4, 3\), got \(4, 2\)$"):
        evaluate(losses.softmax_cross_entropy, Y, dualtape.asarray(ONE_HOT[:, :2]))


def test_labels_on_another_backend_are_named_as_the_target_of_the_network_output(backend):
    labels, other = other_backend_array(backend, LABELS)
    with pytest.raises(TypeError, match=r"^target is a .* but the network output lives on "):
        evaluate(losses.cross_entropy, PROBS, labels)


def test_a_list_mask_goes_where_the_network_is_not_where_new_arrays_go():
    with dualtape.use_backend("array_api_strict"):
        found = losses.mask_weights([1, 0, 1], 3, 2, np.zeros(1))
    assert type(found) is np.ndarray and found.tolist() == [[1, 1], [0, 0], [1, 1]]
