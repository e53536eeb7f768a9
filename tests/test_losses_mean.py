"""torch's losses (``dualtape/mean_losses.py``): hand formulas, the mean under a mask, finite
differences, their names, bad input, and the training verbs taking them by name."""

from __future__ import annotations

import functools
import re

import numpy as np
import pytest

import dualtape
from dualtape import losses
from dualtape.backend import namespace_of
from dualtape.gradcheck import numeric_gradient

from .conftest import np64
from .helpers import host_params

RNG = np.random.default_rng(3)
Y = RNG.normal(size=(3, 2, 4)) * 2  # (T, B, o), all three sizes different
T = RNG.normal(size=(3, 2, 4))
P = RNG.uniform(size=(3, 2, 4))  # probabilities, for the binary cross entropy
MEANS = ["mean_squared_error", "mean_absolute_error", "huber", "smooth_l1",
         "binary_cross_entropy_with_logits"]


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-x))


def terms(name: str, y: np.ndarray, t: np.ndarray, size: float = 1.0):
    """The elementwise term and its derivative, by the textbook formulas."""
    r = y - t
    if name == "mean_squared_error":
        return r ** 2, 2 * r
    if name == "mean_absolute_error":
        return np.abs(r), np.sign(r)
    if name in ("huber", "smooth_l1"):
        small = np.abs(r) < size
        value = np.where(small, 0.5 * r ** 2, size * (np.abs(r) - 0.5 * size))
        grad = np.clip(r, -size, size)
        scale = size if name == "smooth_l1" else 1.0
        return value / scale, grad / scale
    p = sigmoid(y)
    return -t * np.log(p) - (1 - t) * np.log(1 - p), p - t


def target_for(name: str) -> np.ndarray:
    return P if name == "binary_cross_entropy_with_logits" else T


def evaluate(loss, y, target, weights=None):
    """``(value, dy)`` of ``loss`` on backend arrays, as numpy float64."""
    y = dualtape.asarray(y)
    value, dy = loss(namespace_of(y), y, dualtape.asarray(target), weights)
    assert tuple(value.shape) == () and tuple(dy.shape) == tuple(y.shape)
    return float(value), np64(dy)


@pytest.mark.parametrize("name", MEANS)
def test_each_loss_is_the_mean_of_its_term_over_every_element(backend, name):
    t = target_for(name)
    value, dy = evaluate(losses.loss_function(name), Y, t)
    term, grad = terms(name, Y, t)
    assert value == pytest.approx(term.mean(), rel=1e-12)  # over 24 elements, not B = 2
    np.testing.assert_allclose(dy, grad / Y.size, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("size", [0.5, 2.0, 7.0])
@pytest.mark.parametrize("name", ["huber", "smooth_l1"])
def test_huber_and_smooth_l1_take_their_threshold(backend, name, size):
    keyword = "delta" if name == "huber" else "beta"
    loss = functools.partial(getattr(losses, name), **{keyword: size})
    value, dy = evaluate(loss, Y, T)
    term, grad = terms(name, Y, T, size)
    assert value == pytest.approx(term.mean(), rel=1e-12)
    np.testing.assert_allclose(dy, grad / Y.size, rtol=1e-12, atol=1e-15)


def test_huber_is_beta_times_smooth_l1(backend):
    huber = evaluate(functools.partial(losses.huber, delta=0.3), Y, T)
    smooth = evaluate(functools.partial(losses.smooth_l1, beta=0.3), Y, T)
    assert huber[0] == pytest.approx(0.3 * smooth[0], rel=1e-12)
    np.testing.assert_allclose(huber[1], 0.3 * smooth[1], rtol=1e-12)


def test_smooth_l1_at_beta_zero_is_the_mean_absolute_error(backend):
    found = evaluate(functools.partial(losses.smooth_l1, beta=0), Y, T)
    expected = evaluate(losses.mean_absolute_error, Y, T)
    assert found[0] == expected[0]
    np.testing.assert_array_equal(found[1], expected[1])


def test_the_absolute_errors_gradient_is_zero_where_the_residual_is(backend):
    y = np.array([[0.5, -1.0, 2.0]])
    value, dy = evaluate(losses.mean_absolute_error, y, np.array([[0.5, 0.0, 2.0]]))
    assert value == pytest.approx(1 / 3, rel=1e-15)
    np.testing.assert_array_equal(dy, [[0.0, -1 / 3, 0.0]])


def test_the_hubers_seam_is_continuous_in_value_and_gradient(backend):
    """At ``|r| = delta`` both branches give ``½delta²`` and ``±delta``; just inside and
    outside too, up to the step."""
    r = np.array([[-1.0, 1.0, 1 - 2 ** -20, 1 + 2 ** -20]])
    value, dy = evaluate(losses.huber, r, np.zeros_like(r))
    np.testing.assert_allclose(dy * 4, [[-1.0, 1.0, 1 - 2 ** -20, 1.0]], rtol=1e-15)
    assert value * 4 == pytest.approx(0.5 * 3 + (1 + 2 ** -20 - 0.5), rel=1e-6)


def test_the_binary_cross_entropy_is_finite_and_exact_at_huge_logits(backend):
    y = np.array([[800.0, -800.0, 40.0, -40.0, 0.0]])
    t = np.array([[0.0, 1.0, 1.0, 0.0, 0.25]])
    value, dy = evaluate(losses.binary_cross_entropy_with_logits, y, t)
    exact = np.array([800.0, 800.0, np.log1p(np.exp(-40.0)), np.log1p(np.exp(-40.0)),
                      np.log(2.0)])
    assert value == pytest.approx(exact.mean(), rel=1e-15)
    # σ(40) rounds to 1, so its gradient σ(40) − 1 is 0, as torch's; σ(−40) is kept exactly
    grad = np.array([[1.0, -1.0, 0.0, np.exp(-40.0) / (1 + np.exp(-40.0)), 0.25]])
    np.testing.assert_allclose(dy, grad / 5, rtol=1e-15, atol=0)


def test_the_binary_cross_entropy_takes_soft_targets_and_float32(backend):
    y, t = Y.astype(np.float32), P.astype(np.float32)
    value, dy = evaluate(losses.binary_cross_entropy_with_logits, y, t)
    term, grad = terms("binary_cross_entropy_with_logits", Y, P)
    assert value == pytest.approx(term.mean(), rel=1e-5)
    np.testing.assert_allclose(dy, grad / Y.size, rtol=1e-5, atol=1e-8)


# --- the mean under a mask -------------------------------------------------------------------


MASK = np.array([[1.0, 0.0], [1.0, 1.0], [0.0, 1.0]])


@pytest.mark.parametrize("name", MEANS)
def test_under_a_mask_the_mean_is_over_the_examples_that_count(backend, name):
    """As a torch user writes it, ``loss(y[mask], t[mask])``: 4 kept examples of 4 features,
    the masked ones' targets (NaN here) ignored, their gradient 0."""
    t = target_for(name).copy()
    kept = MASK > 0
    t[~kept] = np.nan
    loss = losses.loss_function(name)
    value, dy = evaluate(loss, Y, t, dualtape.asarray(MASK))
    expected_value, expected_dy = evaluate(loss, Y[kept], t[kept])
    assert value == pytest.approx(expected_value, rel=1e-13)
    np.testing.assert_allclose(dy[kept], expected_dy, rtol=1e-13, atol=1e-16)
    np.testing.assert_array_equal(dy[~kept], 0.0)


@pytest.mark.parametrize("name", MEANS)
def test_a_mask_that_keeps_nothing_gives_zero_not_nan(backend, name):
    t = np.full_like(Y, np.nan)
    value, dy = evaluate(losses.loss_function(name), Y, t, dualtape.asarray(np.zeros((3, 2))))
    assert value == 0.0
    np.testing.assert_array_equal(dy, 0.0)


# --- finite differences ----------------------------------------------------------------------


@pytest.mark.parametrize("name", MEANS)
@pytest.mark.parametrize("masked", [False, True], ids=["full", "masked"])
def test_gradient_matches_finite_differences(backend, name, masked):
    """float64, away from the kinks (no residual within 1e-3 of 0 or of the seam at 1)."""
    t = target_for(name)
    weights = dualtape.asarray(MASK) if masked else None
    r = Y - t
    assert np.abs(np.abs(r) - 1).min() > 1e-3 and np.abs(r).min() > 1e-3
    loss = losses.loss_function(name)
    _, dy = evaluate(loss, Y, t, weights)
    expected = numeric_gradient(lambda y: evaluate(loss, y, t, weights)[0], Y.copy())
    np.testing.assert_allclose(dy, expected, rtol=1e-6, atol=1e-9)


# --- names -----------------------------------------------------------------------------------


@pytest.mark.parametrize("alias, name", [
    ("mse", "mean_squared_error"), ("mae", "mean_absolute_error"),
    ("l1", "mean_absolute_error"), ("bce_with_logits", "binary_cross_entropy_with_logits"),
    ("cross_entropy_with_logits", "softmax_cross_entropy"),
    ("categorical_crossentropy", "cross_entropy"),
])
def test_each_alias_is_its_loss(alias, name):
    assert losses.loss_function(alias) is losses.loss_function(name) is getattr(losses, name)
    assert losses.ALIASES[alias] == name


def test_every_loss_is_known_by_its_own_name():
    for name, function in losses.LOSSES.items():
        assert function.__name__ == name and getattr(losses, name) is function
    assert not set(losses.ALIASES) & set(losses.LOSSES)


def test_only_the_cross_entropies_take_labels():
    assert [n for n in [*losses.LOSSES, *losses.ALIASES] if losses.takes_labels(n)] == [
        "softmax_cross_entropy", "cross_entropy", "cross_entropy_with_logits",
        "categorical_crossentropy"]


# --- bad input -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", MEANS)
def test_a_target_of_the_wrong_shape_is_refused(backend, name):
    with pytest.raises(ValueError, match=r"target must have shape \(3, 2, 4\), got \(3, 2, 3\)"):
        evaluate(losses.loss_function(name), Y, target_for(name)[..., :3])


@pytest.mark.parametrize("name", MEANS)
def test_integer_targets_are_refused_naming_the_loss(backend, name):
    with pytest.raises(TypeError, match=f"{name}: the target holds integers .* convert them "
                                        r"with t.astype\(float\)"):
        evaluate(losses.loss_function(name), Y, np.zeros(Y.shape, dtype=np.int64))


@pytest.mark.parametrize("bad", [-0.5, 1.5])
def test_binary_targets_outside_zero_one_are_refused_unless_masked(backend, bad):
    t = P.copy()
    t[2, 0, 1] = bad
    loss = losses.binary_cross_entropy_with_logits
    with pytest.raises(ValueError, match=r"target must hold probabilities in \[0, 1\]"):
        evaluate(loss, Y, t)
    with pytest.raises(ValueError, match=r"target must hold probabilities in \[0, 1\]"):
        evaluate(loss, Y, t, dualtape.asarray(np.ones((3, 2))))
    evaluate(loss, Y, t, dualtape.asarray(MASK))  # example (2, 0) is masked: ignored


@pytest.mark.parametrize("name, keyword, bad, error, match", [
    ("huber", "delta", 0, ValueError, "huber: delta must be finite and > 0, got 0.0"),
    ("huber", "delta", -1.0, ValueError, "huber: delta must be finite and > 0, got -1.0"),
    ("huber", "delta", float("nan"), ValueError, "huber: delta must be finite and > 0, got nan"),
    ("huber", "delta", float("inf"), ValueError, "huber: delta must be finite and > 0, got inf"),
    ("huber", "delta", "1", TypeError, "huber: delta must be a real number, got str"),
    ("huber", "delta", True, TypeError, "huber: delta must be a real number, got bool"),
    ("smooth_l1", "beta", -0.1, ValueError, "smooth_l1: beta must be finite and >= 0, got -0.1"),
    ("smooth_l1", "beta", float("nan"), ValueError, "smooth_l1: beta must be finite and >= 0"),
    ("smooth_l1", "beta", None, TypeError, "smooth_l1: beta must be a real number, got NoneType"),
])
def test_a_bad_threshold_is_refused_in_one_line_naming_it(backend, name, keyword, bad, error,
                                                         match):
    loss = functools.partial(getattr(losses, name), **{keyword: bad})
    with pytest.raises(error, match=f"^{match}") as info:
        evaluate(loss, Y, T)
    assert "\n" not in str(info.value)


def test_a_numpy_threshold_is_taken(backend):
    found = evaluate(functools.partial(losses.huber, delta=np.float32(0.5)), Y, T)
    expected = evaluate(functools.partial(losses.huber, delta=0.5), Y, T)
    assert found[0] == expected[0]


# --- the losses in training ------------------------------------------------------------------


def recurrent(top: bool = True, dtype: str = "float64"):
    layers = [dualtape.LSTM(3, 4, seed=1, dtype=dtype), dualtape.LSTM(4, 4, seed=2, dtype=dtype)]
    if top:
        layers.append(dualtape.FullyConnected(4, 4, seed=3, dtype=dtype))
    return dualtape.RecurrentNetwork(layers)


def sequence_data(name: str, steps: int = 5, batch: int = 3):
    rng = np.random.default_rng(9)
    xs = rng.uniform(-1, 1, (steps, batch, 3))
    binary = losses.loss_function(name) is losses.binary_cross_entropy_with_logits
    t = rng.uniform(0, 1, (steps, batch, 4)) if binary else rng.normal(size=(steps, batch, 4))
    return dualtape.asarray(xs), dualtape.asarray(t)


def flat(grads) -> list[np.ndarray]:
    return [np64(g[k]) for g in grads for k in sorted(g)]


@pytest.mark.parametrize("path", ["", "0"], ids=["routes", "generic"])
@pytest.mark.parametrize("top", [True, False], ids=["lstm-fc", "lstms"])
@pytest.mark.parametrize("mask", [None, [1, 0, 1, 1, 0]], ids=["all", "mask"])
def test_mse_by_name_is_the_squared_error_rescaled_on_every_route(backend, monkeypatch, path,
                                                                 top, mask):
    """``squared_error`` (½Σ per example over the batch of 3) takes its own fast routes;
    ``"mse"`` must take one that computes torch's mean: the same gradients times ``2·B /
    (kept steps · B · o)``. Through ``backpropagate_sequence`` and ``train_recurrent`` (one
    plain SGD step: the weights move by the rescaled rate)."""
    monkeypatch.setenv("DUALTAPE_FUSED", path)
    monkeypatch.setenv("DUALTAPE_JIT", path)
    xs, t = sequence_data("mse")
    options = {} if mask is None else {"mask": dualtape.asarray(np.array(mask, dtype=float))}
    scale = 2 * 3 / ((5 if mask is None else sum(mask)) * 3 * 4)
    se = dualtape.backpropagate_sequence(recurrent(top), xs, t, **options)
    mse = dualtape.backpropagate_sequence(recurrent(top), xs, t, loss="mse", **options)
    assert float(mse.loss) == pytest.approx(scale * float(se.loss), rel=1e-12)
    for a, b in zip(flat(mse.grads), flat(se.grads), strict=True):
        np.testing.assert_allclose(a, scale * b, rtol=1e-10, atol=1e-14)
    by_se, by_mse = recurrent(top), recurrent(top)
    loss_se, _ = dualtape.train_recurrent(by_se, xs, t, dualtape.SGD(0.1 * scale), **options)
    loss_mse, _ = dualtape.train_recurrent(by_mse, xs, t, dualtape.SGD(0.1), loss="mse",
                                           **options)
    assert loss_mse == pytest.approx(scale * loss_se, rel=1e-12)
    for a, b in zip(host_params(by_mse), host_params(by_se), strict=True):
        for k in a:
            np.testing.assert_allclose(a[k], b[k], rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("name", [*MEANS, "mae", "bce_with_logits"])
def test_each_name_trains_as_its_function_does(backend, name):
    """A name and the function itself (a callable: the generic route) give the same loss and
    gradients through ``backpropagate_sequence``, ``train_recurrent`` and ``backpropagate``."""
    function = losses.loss_function(name)
    xs, t = sequence_data(name)
    mask = dualtape.asarray(np.array([1.0, 1.0, 0.0, 1.0, 1.0]))
    by_name = dualtape.backpropagate_sequence(recurrent(), xs, t, loss=name, mask=mask)
    by_call = dualtape.backpropagate_sequence(recurrent(), xs, t, loss=function, mask=mask)
    assert float(by_name.loss) == float(by_call.loss)
    for a, b in zip(flat(by_name.grads), flat(by_call.grads), strict=True):
        np.testing.assert_array_equal(a, b)
    nets = recurrent(), recurrent()
    found = [dualtape.train_recurrent(net, xs, t, dualtape.SGD(0.1), loss=loss)[0]
             for net, loss in zip(nets, (name, function), strict=True)]
    assert found[0] == found[1]
    ff = [dualtape.Network([dualtape.FullyConnected(3, 4, seed=4, dtype="float64")])
          for _ in "ab"]
    done = [dualtape.backpropagate(net, xs[0, ...], t[0, ...], loss=loss)
            for net, loss in zip(ff, (name, function), strict=True)]
    assert float(done[0][0]) == float(done[1][0])
    for a, b in zip(flat(done[0][1]), flat(done[1][1]), strict=True):
        np.testing.assert_array_equal(a, b)


def test_a_huber_with_another_delta_trains_through_partial(backend):
    xs, t = sequence_data("huber")
    half = functools.partial(losses.huber, delta=0.5)
    found = dualtape.backpropagate_sequence(recurrent(), xs, t, loss=half)
    default = dualtape.backpropagate_sequence(recurrent(), xs, t, loss="huber")
    assert float(found.loss) < float(default.loss)  # every term shrinks with delta


def head(last: str | None, n_out: int = 2):
    layers = [dualtape.FullyConnected(2, n_out, seed=1, dtype="float64")]
    return dualtape.Network(layers + ([getattr(dualtape, last)()] if last else []))


@pytest.mark.parametrize("last", ["Logit", "Softmax"])
@pytest.mark.parametrize("name", ["binary_cross_entropy_with_logits", "bce_with_logits"])
def test_the_binary_cross_entropy_on_probabilities_is_refused(backend, last, name):
    net = head(last)
    before = host_params(net)
    with pytest.raises(ValueError, match=f"train: loss='{name}' takes logits, but the network "
                                         f"ends in {last}.*drop the final {last}"):
        dualtape.train(net, dualtape.asarray(np.ones((4, 2))),
                       dualtape.asarray(np.full((4, 2), 0.5)), dualtape.SGD(0.1), loss=name)
    assert all(np.array_equal(b[k], a[k]) for b, a in zip(before, host_params(net), strict=True)
               for k in b)


@pytest.mark.parametrize("name", MEANS)
def test_torchs_losses_train_one_output(backend, name):
    """A binary classifier's one logit, a regressor's one value: no softmax over one class."""
    net = head(None, n_out=1)
    loss = dualtape.train(net, dualtape.asarray(np.ones((4, 2))),
                          dualtape.asarray(np.full((4, 1), 0.5)), dualtape.SGD(0.1), loss=name)
    assert np.isfinite(loss)


def test_a_cross_entropy_over_one_output_points_to_the_binary_one(backend):
    with pytest.raises(ValueError, match="loss='binary_cross_entropy_with_logits' on its one"):
        dualtape.train(head(None, n_out=1), dualtape.asarray(np.ones((4, 2))),
                       dualtape.asarray(np.zeros(4, dtype=np.int64)), dualtape.SGD(0.1),
                       loss="cross_entropy_with_logits")


@pytest.mark.parametrize("name", ["mse", "binary_cross_entropy_with_logits"])
def test_tape_report_measures_a_dense_target_for_torchs_losses(name):
    net = dualtape.Network([dualtape.FullyConnected(3, 2, seed=0)])
    report = dualtape.tape_report(net, (8, 3), loss=name)
    assert report.loss == name


@pytest.mark.parametrize("name", MEANS)
def test_a_last_step_target_gives_the_loss_of_the_last_output(backend, name):
    """A many-to-one model scored as torch scores it: ``loss(ys[-1], t)``, averaged over the
    last step's elements alone, not diluted by the other steps."""
    xs, t = sequence_data(name)
    outputs = []

    def recorded(xp, ys, targets, weights=None):
        outputs.append(ys)
        return losses.squared_error(xp, ys, targets, weights)

    dualtape.backpropagate_sequence(recurrent(), xs, t, loss=recorded)
    last = outputs[0][-1, ...]
    expected, _ = losses.loss_function(name)(namespace_of(last), last, t[-1, ...])
    found = dualtape.backpropagate_sequence(recurrent(), xs, t[-1, ...], loss=name)
    assert float(found.loss) == pytest.approx(float(expected), rel=1e-12)


# --- edges: one element, one kept element, targets that are not arrays ----------------------


def test_one_output_element_is_its_own_mean(backend):
    value, dy = evaluate(losses.mean_squared_error, np.array([[3.0]]), np.array([[1.0]]))
    assert (value, dy.tolist()) == (4.0, [[4.0]])


def test_one_kept_element_is_its_own_mean(backend):
    y, t = np.array([[3.0], [5.0]]), np.array([[1.0], [np.nan]])
    value, dy = evaluate(losses.mean_squared_error, y, t, dualtape.asarray(np.array([1.0, 0.0])))
    assert (value, dy.tolist()) == (4.0, [[4.0], [0.0]])


def test_a_list_target_goes_where_the_output_is_not_where_new_arrays_go():
    y = np.array([[3.0, 1.0]])
    with dualtape.use_backend("array_api_strict"):
        value, dy = losses.mean_absolute_error(np, y, [[1.0, 1.0]])
    assert float(value) == 1.0 and type(dy) is np.ndarray


def test_the_target_refusals_read_whole(backend):
    name = "binary_cross_entropy_with_logits"
    with pytest.raises(ValueError) as info:
        evaluate(losses.loss_function(name), Y, P + 1)
    assert str(info.value) == f"{name}: target must hold probabilities in [0, 1], got one outside"
    with pytest.raises(ValueError, match=r"^loss: target must have shape \(3, 2, 4\), got "):
        evaluate(losses.mean_squared_error, Y, T[..., :2])
    with pytest.raises(TypeError) as info:
        evaluate(losses.huber, Y, np.zeros(Y.shape, dtype=np.int64))
    assert re.fullmatch(re.escape("huber: the target holds integers (") + r"[\w.]*int64"
                        + re.escape(
        "), as class labels do: train with loss='softmax_cross_entropy' (a network ending in "
        "logits) or loss='cross_entropy' (one ending in Softmax); real-valued targets must be "
        "floating point: convert them with t.astype(float)"), str(info.value))


def test_a_target_that_is_no_array_is_refused_as_such(backend):
    y = dualtape.asarray(Y)
    with pytest.raises(TypeError, match="^loss: target must be an array, got str$"):
        losses.mean_squared_error(namespace_of(y), y, "targets")
