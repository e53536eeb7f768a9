"""Targets for the last step only (``last_step``, issue 54 item 1): ``train_recurrent`` and
``backpropagate_sequence`` take ``(B, o)`` (or class labels ``(B,)``) and give the bits of the
full-length target masked to its last step, on every route and backend; the loss and its
gradient are the last step's alone; a target of neither shape, or one with a mask, is refused
in one line."""

from __future__ import annotations

import numpy as np
import pytest

import dualtape
from dualtape import last_step

from .conftest import np64
from .helpers import host_params

STEPS, BATCH = 5, 2


def lstms():
    return [dualtape.LSTM(3, 4, seed=1, dtype="float64"),
            dualtape.LSTM(4, 2, seed=2, dtype="float64")]


def forecaster():
    return [dualtape.StandardLSTM(3, 8, seed=1), dualtape.FullyConnected(8, 1, seed=2)]


def gru_logits(n_out=3):
    return [dualtape.GRU(3, 5, seed=1, dtype="float64"),
            dualtape.FullyConnected(5, n_out, seed=2, dtype="float64")]


def lstm_softmax():
    return [dualtape.LSTM(3, 4, seed=1, dtype="float64"),
            dualtape.FullyConnected(4, 3, seed=2, dtype="float64"), dualtape.Softmax()]


def lstms_top():
    return [*lstms(), dualtape.FullyConnected(2, 3, seed=3, dtype="float64")]


CASES = {  # layers, options, optimizer, labels: the routes each takes on numpy
    "lstm-sgd": (lstms, {}, lambda: dualtape.SGD(0.1), False),  # fused SGD
    "lstm-top": (lstms_top, {}, lambda: dualtape.SGD(0.1), False),  # layers; planned declines
    "forecaster": (forecaster, {}, dualtape.Adam, False),
    "sqrt-tape": (lstms, {"tape": "sqrt"}, lambda: dualtape.SGD(0.1), False),
    "state": (lstms, {"state": [None, None]}, lambda: dualtape.SGD(0.1, momentum=0.5), False),
    "gru-labels": (gru_logits, {"loss": "softmax_cross_entropy"}, dualtape.Adam, True),
    "softmax-labels": (lstm_softmax, {"loss": "cross_entropy"}, lambda: dualtape.SGD(0.1),
                       True),
    "dense-logits": (gru_logits, {"loss": "softmax_cross_entropy"}, dualtape.Adam, False),
}


def inputs(n_in=3, steps=STEPS, batch=BATCH, single=False):
    rng = np.random.default_rng(3)
    xs = rng.uniform(-1, 1, (steps, batch, n_in))
    return xs[:, 0] if single else xs


def last_and_full(n_out, labels, steps=STEPS, batch=BATCH):
    """A last-step target (host) and its full-length form, other steps holding values the
    mask must make ignored."""
    rng = np.random.default_rng(5)
    if labels:
        full = rng.integers(0, n_out, (steps, batch))
    else:
        full = rng.uniform(0, 1, (steps, batch, n_out))
    return full[-1], full


def call(verb, layers, xs, targets, optimizer, **options):
    """``(loss, host arrays, route)`` of one call of ``verb`` on a new network."""
    net = dualtape.RecurrentNetwork(layers())
    xs = dualtape.asarray(xs)
    if not isinstance(targets, list):
        targets = dualtape.asarray(targets)
    if "mask" in options:
        options["mask"] = dualtape.asarray(options["mask"])
    if "state" in options:
        options["state"] = list(options["state"])
    foreseen = dualtape.route(net, xs, targets, verb=verb, optimizer=optimizer, **options)
    if verb == "train_recurrent":
        loss, state = dualtape.train_recurrent(net, xs, targets, optimizer, **options)
        arrays = [a for group in host_params(net) for a in group.values()]
    else:
        found = dualtape.backpropagate_sequence(net, xs, targets, **options)
        loss, state = float(found.loss), found.state
        arrays = [np64(g).copy() for group in found.grads for g in group.values()]
    took = dualtape.last_route(net, verb)
    assert took == foreseen
    return loss, arrays + [np64(s) for s in state], took


@pytest.mark.parametrize("fused", ["1", "0"])
@pytest.mark.parametrize("verb", ["train_recurrent", "backpropagate_sequence"])
@pytest.mark.parametrize("case", list(CASES))
def test_a_last_step_target_gives_the_masked_full_targets_bits(backend, monkeypatch, verb, case,
                                                                fused):
    """The loss, the weights moved (or the gradients) and the last states of a last-step
    target are those of the full-length target masked to its last step, bit for bit, by the
    same route, which ``route`` foresees; a list gives the same. With the fast paths
    (``DUALTAPE_FUSED``) on and off."""
    monkeypatch.setenv("DUALTAPE_FUSED", fused)
    layers, options, optimizer, labels = CASES[case]
    last, full = last_and_full(dualtape.RecurrentNetwork(layers()).n_out, labels)
    mask = np.zeros((STEPS, BATCH))
    mask[-1] = 1
    got = call(verb, layers, inputs(), last, optimizer(), **options)
    want = call(verb, layers, inputs(), full, optimizer(), mask=mask, **options)
    listed = call(verb, layers, inputs(), last.tolist(), optimizer(), **options)
    assert got[0] == want[0] == listed[0]
    for a, b, c in zip(got[1], want[1], listed[1], strict=True):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, c)
    assert got[2] == want[2] == listed[2]


def oracle(ys_last, target, loss):
    """The loss of the last step's outputs alone, by hand: averaged over the batch."""
    if loss == "squared_error":
        return 0.5 * np.sum((ys_last - target) ** 2) / len(target)
    log_p = ys_last - np.log(np.exp(ys_last).sum(axis=-1, keepdims=True))
    probabilities = np.log(ys_last) if loss == "cross_entropy" else log_p
    return -np.mean(probabilities[np.arange(len(target)), target])


@pytest.mark.parametrize("case", ["lstm-top", "gru-labels", "softmax-labels", "dense-logits"])
def test_the_loss_is_the_last_steps_alone(backend, case):
    """The loss of a last-step target is the last outputs' loss, by hand, whatever the other
    steps' outputs."""
    layers, options, _, labels = CASES[case]
    net = dualtape.RecurrentNetwork(layers())
    xs = dualtape.asarray(inputs())
    last = last_and_full(3, labels)[0]
    if not labels:
        last = last / last.sum(axis=-1, keepdims=True)  # a distribution, for the dense one
    found = dualtape.backpropagate_sequence(net, xs, dualtape.asarray(last), **options)
    ys = np64(net.predict_sequence(None, xs)[1])
    loss = options.get("loss", "squared_error")
    if labels or loss == "squared_error":
        want = oracle(ys[-1], last, loss)
    else:  # a distribution per sequence against the log-softmax of its logits
        want = -np.sum(last * (ys[-1] - np.log(np.exp(ys[-1]).sum(-1, keepdims=True)))) / BATCH
    assert float(found.loss) == pytest.approx(want, rel=1e-12, abs=1e-14)


def test_the_gradient_flows_from_the_last_step_only(backend):
    """A loss of one's own is handed the full-length form: the targets zero and the weights 0
    before the last step, so its gradient there is 0, and at the last step ``(y - t) / B``."""
    seen = {}

    def loss(xp, ys, targets, weights=None):
        seen.update(ys=np64(ys), targets=np64(targets), weights=np64(weights))
        return dualtape.losses.squared_error(xp, ys, targets, weights)

    def recorded(xp, ys, targets, weights=None):
        value, dys = loss(xp, ys, targets, weights)
        seen["dys"] = np64(dys)
        return value, dys

    net = dualtape.RecurrentNetwork(lstms_top())
    last = last_and_full(3, False)[0]
    found = dualtape.backpropagate_sequence(net, dualtape.asarray(inputs()),
                                            dualtape.asarray(last), loss=recorded)
    assert not seen["dys"][:-1].any() and not seen["targets"][:-1].any()
    np.testing.assert_array_equal(seen["weights"], np.eye(STEPS)[-1][:, None].repeat(BATCH, 1))
    np.testing.assert_allclose(seen["dys"][-1], (seen["ys"][-1] - last) / BATCH, rtol=1e-14)
    assert float(found.loss) == pytest.approx(oracle(seen["ys"][-1], last, "squared_error"))


@pytest.mark.parametrize("labels", [False, True])
def test_one_sequence_takes_its_last_step_without_a_batch_axis(backend, labels):
    """One sequence ``(T, i)``: its last step's target is ``(o,)``, or one label ``()``;
    the same as the masked full target."""
    layers, loss = (gru_logits, "softmax_cross_entropy") if labels else (lstms_top,
                                                                            "squared_error")
    host_last, full = last_and_full(3, labels, batch=1)
    xs = inputs(single=True)
    got = call("backpropagate_sequence", layers, xs, host_last[0], None, loss=loss)
    want = call("backpropagate_sequence", layers, xs, full[:, 0], None, loss=loss,
                mask=np.arange(STEPS) == STEPS - 1)
    assert got[0] == want[0]
    for a, b in zip(got[1], want[1], strict=True):
        np.testing.assert_array_equal(a, b)


def test_at_one_step_a_last_step_target_is_the_full_one(backend):
    """T = 1: ``(B, o)`` is the whole target, taken with no mask, so by the full target's
    route (the whole step where it runs)."""
    last = last_and_full(2, False, steps=1)[0]
    xs = inputs(steps=1)
    got = call("train_recurrent", lstms, xs, last, dualtape.SGD(0.1))
    want = call("train_recurrent", lstms, xs, last[None], dualtape.SGD(0.1))
    assert got[0] == want[0] and got[2] == want[2]
    for a, b in zip(got[1], want[1], strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("n", [2, 3])
def test_integers_are_labels_for_every_step_and_reals_a_last_step_where_shapes_meet(backend, n):
    """T = B = o = n: an ``(n, n)`` target of integers is a label per step, of reals the last
    step's outputs."""
    xs = dualtape.asarray(inputs(steps=n, batch=n))
    labels = np.random.default_rng(n).integers(0, n, (n, n))
    net = dualtape.RecurrentNetwork(gru_logits(n))
    found = dualtape.backpropagate_sequence(net, xs, dualtape.asarray(labels),
                                            loss="softmax_cross_entropy")
    ys = np64(net.predict_sequence(None, xs)[1])
    want = sum(oracle(ys[k], labels[k], "softmax_cross_entropy") for k in range(n))
    assert float(found.loss) == pytest.approx(want, rel=1e-12)
    listed = dualtape.backpropagate_sequence(net, xs, labels.tolist(),
                                             loss="softmax_cross_entropy")
    assert float(listed.loss) == float(found.loss)
    reals = labels / 2.0
    found = dualtape.backpropagate_sequence(net, xs, dualtape.asarray(reals))
    assert float(found.loss) == pytest.approx(oracle(ys[-1], reals, "squared_error"), rel=1e-12)


def test_the_mask_is_made_where_the_network_is(backend):
    """A call while another backend is the current one: the last step's mask is made on the
    network's backend and device, not the current one's."""
    last, full = last_and_full(2, False)
    mask = np.zeros(STEPS, bool)
    mask[-1] = True
    want = call("backpropagate_sequence", lstms, inputs(), full, None, mask=mask)
    net = dualtape.RecurrentNetwork(lstms())
    xs, target = dualtape.asarray(inputs()), dualtape.asarray(last)
    other = "numpy" if backend.name != "numpy" else "array_api_strict"
    with dualtape.use_backend(other):
        for given in (target, last.tolist()):  # a list too goes where the network is
            found = dualtape.backpropagate_sequence(net, xs, given)
            assert float(found.loss) == want[0]


def test_a_full_length_target_is_handed_on_as_given_without_preparing_the_input(backend,
                                                                                monkeypatch):
    """Every step's target, as most calls give it, costs a comparison of shapes: the input is
    not prepared for it (features and ids alike)."""
    def refuse(*_):
        raise AssertionError("the input was prepared")

    for layers, xs, targets in [
            (lstms, inputs(), last_and_full(2, False)[1]),
            (lambda: [dualtape.LSTM(4, 3, seed=1, dtype="float64")],
             np.arange(STEPS * BATCH).reshape(STEPS, BATCH) % 4, last_and_full(3, True)[1])]:
        net = dualtape.RecurrentNetwork(layers())
        monkeypatch.setattr(net, "_prepare_sequence", refuse)
        xs, targets = dualtape.asarray(xs), dualtape.asarray(targets)
        assert last_step.full_length(net, xs, targets, None, "squared_error", "x") == (
            targets, None)


def test_a_network_of_any_width_takes_the_inputs_width(backend):
    """A network without sizes of its own (activations only): the last step's target is as
    wide as the input (given as an array, or as a list)."""
    net = dualtape.RecurrentNetwork([dualtape.Tanh()])
    xs = inputs()
    last = last_and_full(3, False)[0]
    want = oracle(np.tanh(xs[-1]), last, "squared_error")
    for given in (dualtape.asarray(xs), xs.tolist()):
        found = dualtape.backpropagate_sequence(net, given, dualtape.asarray(last))
        assert float(found.loss) == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("verb", ["train_recurrent", "backpropagate_sequence", "route"])
@pytest.mark.parametrize("loss, shape, message", [
    pytest.param("squared_error", (3, 2), r"targets must have shape \(5, 2, 3\) \(every step\) "
                 r"or \(2, 3\) \(the last step only\), got \(3, 2\)$", id="shape"),
    pytest.param("softmax_cross_entropy", (2, 4), r"targets must have shape \(5, 2, 3\) \(every "
                 r"step\) or \(2, 3\) \(the last step only\), or integer class labels \(5, 2\) "
                 r"or \(2,\), got \(2, 4\)$", id="labels"),
    pytest.param("cross_entropy_with_logits", (2, 4), r"targets must have shape \(5, 2, 3\) "
                 r"\(every step\) or \(2, 3\) \(the last step only\), or integer class labels "
                 r"\(5, 2\) or \(2,\), got \(2, 4\)$", id="an-alias's-labels"),
    pytest.param("squared_error", (2, 3), r"mask must be None with a target for the last step "
                 r"only \(shape \(2, 3\)\), which scores that step alone; to mask steps give the "
                 r"full-length target \(5, 2, 3\)$", id="mask"),
    pytest.param("squared_error", (3,), r"targets must have shape \(5, 2, 3\) \(every step\) "
                 r"or \(2, 3\) \(the last step only\), got \(3,\)$", id="one-sequence's"),
    pytest.param("squared_error", (5, 3), r"targets must have shape \(5, 2, 3\) \(every step\) "
                 r"or \(2, 3\) \(the last step only\), got \(5, 3\)$", id="one-sequence"),
])
def test_a_target_of_neither_shape_or_with_a_mask_is_refused_in_one_line(backend, verb, loss,
                                                                           shape, message):
    net = dualtape.RecurrentNetwork(gru_logits())
    options = {"mask": dualtape.asarray(np.ones(STEPS))} if shape == (2, 3) else {}
    targets = dualtape.asarray(np.zeros(shape))
    xs = dualtape.asarray(inputs())
    with pytest.raises(ValueError, match=f"^{verb}: {message}"):
        if verb == "route":
            dualtape.route(net, xs, targets, verb="backpropagate_sequence", loss=loss, **options)
        elif verb == "train_recurrent":
            dualtape.train_recurrent(net, xs, targets, dualtape.SGD(0.1), loss=loss, **options)
        else:
            dualtape.backpropagate_sequence(net, xs, targets, loss=loss, **options)


def test_a_loss_of_ones_own_takes_its_own_targets_as_given(backend):
    """A callable loss is handed a target that is neither shape (nor an array) unchanged."""
    seen = []

    def loss(xp, ys, targets, weights=None):
        seen.append(targets)
        return xp.sum(ys) * 0, xp.zeros_like(ys)

    net = dualtape.RecurrentNetwork(lstms())
    xs = dualtape.asarray(inputs())
    odd, own = dualtape.asarray(np.zeros((7,))), {"kind": "mine"}
    for targets in (odd, own):
        dualtape.backpropagate_sequence(net, xs, targets, loss=loss)
    assert seen[0] is odd and seen[1] is own
