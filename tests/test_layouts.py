"""Every public input takes any memory layout: Fortran order, the last two axes swapped, a
strided slice, negative strides, a broadcast view, a read-only array (numpy). Each gives the
results of the same values in C order, on the default path (the numpy and CuPy fast paths)
and with ``DUALTAPE_FUSED=0``, for states, sequences and their gradients, targets, labels,
masks, parameters and optimizer gradients."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import dualtape
from dualtape.backend import namespace_of

from .conftest import np64

F64 = "float64"
LAYOUTS = ["fortran", "swapped", "strided", "reversed", "broadcast", "read-only"]
PATHS = {"default": "1", "generic": "0"}


def lay_out(host: np.ndarray, layout: str):
    """``host`` on the selected backend, in ``layout`` (for "broadcast", from its first row:
    pass ``same_values(host, "broadcast")``)."""
    if layout == "read-only":
        a = dualtape.asarray(host.copy())
        if not isinstance(a, np.ndarray):
            pytest.skip("only numpy has read-only arrays")
        a.flags.writeable = False
        return a
    ndim = host.ndim
    if layout == "fortran":
        axes = tuple(reversed(range(ndim)))
    elif layout == "swapped":
        axes = (*range(ndim - 2), ndim - 1, ndim - 2)
    if layout in ("fortran", "swapped"):
        a = dualtape.asarray(np.ascontiguousarray(host.transpose(axes)))
        return namespace_of(a).permute_dims(a, axes)
    if layout == "strided":
        return dualtape.asarray(np.repeat(host, 2, axis=-1))[..., ::2]
    if layout == "reversed":
        return namespace_of(a := dualtape.asarray(host[::-1].copy())).flip(a, axis=0)
    a = dualtape.asarray(np.ascontiguousarray(host[:1]))
    return namespace_of(a).broadcast_to(a, host.shape)


def same_values(host: np.ndarray, layout: str) -> np.ndarray:
    """The values ``lay_out(host, layout)`` holds: a broadcast view repeats the first row."""
    if layout != "broadcast":
        return host
    return np.ascontiguousarray(np.broadcast_to(host[:1], host.shape))


def results(value) -> list[np.ndarray]:
    """Every array in nested lists, tuples and dicts (and floats), as float64 host copies."""
    if isinstance(value, dict):
        return [a for k in sorted(value) for a in results(value[k])]
    if isinstance(value, list | tuple):
        return [a for v in value for a in results(v)]
    if isinstance(value, float):
        return [np.asarray(value)]
    return [np.array(np64(value), copy=True)]


def lstm(n_in: int = 3, n_out: int = 4, seed: int = 1) -> dualtape.LSTM:
    return dualtape.LSTM(n_in, n_out, seed=seed, dtype=F64)


def with_params(layer, inputs: dict):
    """``layer`` with those of its parameters that ``inputs`` names replaced by them."""
    for name in list(layer.params):
        if name in inputs:
            layer.params[name] = inputs[name]
    return layer


def lstm_sequence(a: dict) -> list:
    layer = with_params(lstm(), a)
    tape, state_T, ys = layer.forward_sequence(a["state"], a["xs"])
    return [state_T, ys, layer.backward_sequence(tape, a["dstate_T"], a["dys"])]


def lstm_step(a: dict) -> list:
    layer = with_params(lstm(), a)
    tape, state, y = layer.forward(a["state"], a["x"])
    return [state, y, layer.backward(tape, a["dstate_next"], a["dy"])]


def recurrent_net(head: bool = True) -> dualtape.RecurrentNetwork:
    tail = [dualtape.Tanh()] if head else []
    return dualtape.RecurrentNetwork([lstm(), dualtape.FullyConnected(4, 2, seed=2, dtype=F64),
                                      *tail])


def network_sequence(a: dict) -> list:
    rnet = recurrent_net()
    tape, state_T, ys = rnet.forward_sequence([a["state"]], a["xs"])
    backward = rnet.backward_sequence(tape, [a["dstate_T"]], a["dys"])
    return [state_T, ys, backward, rnet.step([a["state"]], a["x"])]


def train_recurrent(a: dict) -> list:
    rnet, state = recurrent_net(), [a["state"]]
    loss, state_T = dualtape.train_recurrent(rnet, a["xs"], a["targets"], dualtape.Adam(0.1),
                                             state=state, mask=a["mask"],
                                             learn_initial_state=True)
    return [loss, state_T, state, rnet.params]


def train_recurrent_labels(a: dict) -> list:
    rnet = recurrent_net(head=False)
    loss, state_T = dualtape.train_recurrent(rnet, a["xs"], a["labels"], dualtape.SGD(0.1),
                                             mask=a["mask"], loss="softmax_cross_entropy")
    return [loss, state_T, rnet.params]


def feed_forward() -> dualtape.Network:
    return dualtape.Network([dualtape.FullyConnected(3, 4, seed=3, dtype=F64), dualtape.Tanh(),
                             dualtape.FullyConnected(4, 2, seed=4, dtype=F64)])


def network(a: dict) -> list:
    net = feed_forward()
    tapes, y = net.forward(a["x"])
    return [y, net.backward(tapes, a["dy"])]


def train(a: dict) -> list:
    net, labelled = feed_forward(), feed_forward()
    loss = dualtape.train(net, a["x"], a["target"], dualtape.SGD(0.1, momentum=0.9))
    by_label = dualtape.train(labelled, a["x"], a["labels"], dualtape.Adam(0.1),
                              loss="softmax_cross_entropy")
    return [loss, net.params, by_label, labelled.params]


def optimizer_steps(make: Callable[[], dualtape.optim.Optimizer]) -> Callable[[dict], list]:
    """Two steps of a new ``make()`` on the parameters ``W``, ``b`` (updated in place, or
    replaced where they cannot be)."""

    def run(a: dict) -> list:
        params = [{"W": a["W"], "b": a["b"]}]
        optimizer = make()
        for _ in range(2):
            optimizer.step(params, [{"W": a["gW"], "b": a["gb"]}])
        return params

    return run


def host_inputs(shapes: dict[str, tuple[int, ...]], seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {k: rng.uniform(-1, 1, s) for k, s in shapes.items()}


T, B = 5, 2
CALLS: dict[str, tuple[Callable[[dict], list], dict[str, np.ndarray]]] = {
    "lstm-sequence": (lstm_sequence, host_inputs({
        "state": (B, 4), "xs": (T, B, 3), "dstate_T": (B, 4), "dys": (T, B, 4), "W": (16, 3),
        "U": (12, 4), "b": (16,)})),
    "lstm-step": (lstm_step, host_inputs({
        "state": (B, 4), "x": (B, 3), "dstate_next": (B, 4), "dy": (B, 4), "U": (12, 4)})),
    "network-sequence": (network_sequence, host_inputs({
        "state": (B, 4), "xs": (T, B, 3), "dstate_T": (B, 4), "dys": (T, B, 2), "x": (B, 3)})),
    "train-recurrent": (train_recurrent, {
        **host_inputs({"state": (B, 4), "xs": (T, B, 3), "targets": (T, B, 2)}),
        "mask": np.array([[1.0, 0.0], [1.0, 1.0], [0.0, 1.0], [1.0, 1.0], [1.0, 0.0]])}),
    "train-recurrent-labels": (train_recurrent_labels, {
        **host_inputs({"xs": (T, B, 3)}), "labels": np.array([[0, 1], [1, 1], [0, 0], [1, 0],
                                                              [0, 1]]),
        "mask": np.array([[True, False], [True, True], [False, True], [True, True],
                          [True, True]])}),
    "network": (network, host_inputs({"x": (B + 3, 3), "dy": (B + 3, 2)})),
    "train": (train, {**host_inputs({"x": (B + 3, 3), "target": (B + 3, 2)}),
                      "labels": np.array([0, 1, 1, 0, 1])}),
    **{f"optimizer-{name}": (optimizer_steps(make), host_inputs({
        "W": (4, 3), "b": (4,), "gW": (4, 3), "gb": (4,)}))
       for name, make in (("sgd", lambda: dualtape.SGD(0.1, momentum=0.9, regulariser=0.01)),
                          ("adam", lambda: dualtape.Adam(0.1)))},
}


def fits(host: np.ndarray, layout: str) -> bool:
    """Whether ``layout`` differs from C order for an array of this shape."""
    if layout == "fortran":
        return host.ndim >= 2
    if layout == "swapped":
        return host.ndim >= 3
    return layout == "read-only" or host.shape[0] > 1 or layout == "strided"


@pytest.mark.parametrize("path", sorted(PATHS))
@pytest.mark.parametrize("call, layout", [
    (call, layout) for call in sorted(CALLS) for layout in LAYOUTS
    if any(fits(value, layout) for value in CALLS[call][1].values())])
def test_every_input_in_any_layout_gives_the_c_order_results(backend, monkeypatch, call, layout,
                                                             path):
    if path == "generic" and backend.name not in ("numpy", "cupy"):
        pytest.skip(f"{backend.name} has no fast path: its default path is the generic one")
    monkeypatch.setenv("DUALTAPE_FUSED", PATHS[path])
    run, host = CALLS[call]
    for name, value in host.items():
        if not fits(value, layout):
            continue
        values = {**host, name: same_values(value, layout)}
        inputs = {k: dualtape.asarray(v.copy()) for k, v in values.items()}
        expected = results(run(inputs))
        inputs = {k: dualtape.asarray(v.copy()) for k, v in values.items()}
        inputs[name] = lay_out(values[name], layout)
        got = results(run(inputs))
        assert len(got) == len(expected)
        for k, (a, b) in enumerate(zip(got, expected, strict=True)):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14,
                                       err_msg=f"{name} in {layout} order: result {k}")


def test_the_layouts_are_what_they_say_on_numpy():
    host = np.arange(24.0).reshape(2, 3, 4)
    with dualtape.use_backend("numpy"):
        made = {layout: lay_out(same_values(host, layout), layout) for layout in LAYOUTS}
    assert made["fortran"].flags.f_contiguous and not made["fortran"].flags.c_contiguous
    assert not made["swapped"].flags.c_contiguous and not made["swapped"].flags.f_contiguous
    assert not made["strided"].flags.c_contiguous
    assert made["reversed"].strides[0] < 0
    assert made["broadcast"].strides[0] == 0
    assert not made["read-only"].flags.writeable
    for layout, a in made.items():
        np.testing.assert_array_equal(a, same_values(host, layout))
