"""Optimizer state: tied to its parameters, checked when loaded, moved with the network, and
never half-applied: a step that raises changes nothing. In-place and generic updates agree."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

import dualtape
from dualtape import optim
from dualtape.backend import backend_of, out_module

from .conftest import np64
from .helpers import assert_params_equal, host_params
from .test_optim import GRADS, W0, on_backend

OPTIMIZERS = {
    "sgd": lambda: dualtape.SGD(0.1),
    "sgd-momentum": lambda: dualtape.SGD(0.1, momentum=0.9),
    "sgd-l2": lambda: dualtape.SGD(0.1, regulariser=0.01),
    "sgd-momentum-l2": lambda: dualtape.SGD(0.1, momentum=0.9, regulariser=0.01),
    "adam": lambda: dualtape.Adam(0.05, beta1=0.8, beta2=0.95, eps=1e-6),
}


def small_net(seed: int = 0, n_out: int = 2) -> dualtape.Network:
    return dualtape.Network([dualtape.FullyConnected(3, 4, seed=seed, dtype="float64"),
                             dualtape.Tanh(),
                             dualtape.FullyConnected(4, n_out, seed=seed + 1, dtype="float64")])


def gradients(net: dualtape.Network, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    tapes, y = net.forward(dualtape.asarray(rng.normal(size=(5, 3))))
    return net.backward(tapes, dualtape.asarray(rng.normal(size=tuple(y.shape))))[0]


def state_copy(optimizer) -> dict:
    return {k: v.copy() for k, v in optimizer.state_dict().items()}


def assert_state_equal(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key in a:
        np.testing.assert_array_equal(a[key], b[key])


# --- in place and generic --------------------------------------------------------------------


@pytest.mark.parametrize("make", OPTIMIZERS.values(), ids=OPTIMIZERS.keys())
def test_in_place_updates_equal_the_generic_ones_bit_for_bit(make, monkeypatch):
    def run(fused: str) -> tuple[list[dict], dict, list[bool]]:
        monkeypatch.setenv("DUALTAPE_FUSED", fused)
        params = [on_backend({"W": W0, "b": W0[:, 0]}), on_backend({"W": W0.T})]
        before = [params[0]["W"], params[1]["W"]]
        optimizer = make()
        for g in GRADS + GRADS[::-1]:
            optimizer.step(params, [{"W": g["W"], "b": g["b"]}, {"W": g["W"].T.copy()}])
        same = [params[0]["W"] is before[0], params[1]["W"] is before[1]]
        return params, state_copy(optimizer), same

    fast, fast_state, fast_same = run("")
    generic, generic_state, generic_same = run("0")
    assert fast_same == [True, True] and generic_same == [False, False]
    for a, b in zip(fast, generic, strict=True):
        for key in a:
            np.testing.assert_array_equal(a[key], b[key])
    assert_state_equal(fast_state, generic_state)


@pytest.mark.parametrize("make", OPTIMIZERS.values(), ids=OPTIMIZERS.keys())
def test_in_place_step_allocates_no_large_temporaries(make):
    size = 200_000  # 1.6 MB per float64 array
    rng = np.random.default_rng(1)
    params = [{"w": rng.normal(size=size)}]
    grads = [{"w": rng.normal(size=size)}]
    optimizer = make()
    for _ in range(3):  # the first steps allocate state and scratch, load the compiled
        optimizer.step(params, grads)  # updates (numba's imports) and plan the kept step
    tracemalloc.start()
    try:
        optimizer.step(params, grads)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < size * 8 / 4


# --- a failed step changes nothing -----------------------------------------------------------


@pytest.mark.parametrize("make", OPTIMIZERS.values(), ids=OPTIMIZERS.keys())
@pytest.mark.parametrize("spoil", ["shape", "dtype", "backend", "missing"])
def test_a_step_that_fails_in_a_late_group_changes_nothing(backend, make, spoil):
    net = small_net()
    optimizer = make()
    optimizer.step(net.params, gradients(net, seed=1))
    params, state, steps = host_params(net), state_copy(optimizer), optimizer.steps
    grads = gradients(net, seed=2)
    good = np64(grads[2]["W"])
    if spoil == "shape":
        grads[2]["W"] = dualtape.asarray(good.T.copy())
    elif spoil == "dtype":
        grads[2]["W"] = dualtape.asarray(good, dtype="float32")
    elif spoil == "backend":
        other = "array_api_strict" if backend.name == "numpy" else "numpy"
        with dualtape.use_backend(other):
            grads[2]["W"] = dualtape.asarray(good)
    else:
        del grads[2]["W"]
    with pytest.raises((ValueError, TypeError), match="W"):
        optimizer.step(net.params, grads)
    assert_params_equal(host_params(net), params)
    assert_state_equal(state_copy(optimizer), state)
    assert optimizer.steps == steps


@pytest.mark.parametrize("make", OPTIMIZERS.values(), ids=OPTIMIZERS.keys())
@pytest.mark.parametrize("path", ["in-place", "generic"])
def test_a_step_that_fails_after_its_checks_changes_nothing(backend, monkeypatch, make, path):
    """Running out of memory while the updates are prepared (the third parameter's scratch
    buffer, or its new array on the generic path) leaves the parameters, the state, ``steps``
    and the parameters' versions as they were."""
    net = small_net()
    optimizer = make()
    optimizer.step(net.params, gradients(net, seed=1))
    if path == "in-place" and out_module(net.params[0]["W"]) is None:
        pytest.skip(f"{backend.name} arrays take no in-place updates")
    monkeypatch.setenv("DUALTAPE_FUSED", "1" if path == "in-place" else "0")
    name = "_scratch_for" if path == "in-place" else "_update"
    original, calls = getattr(type(optimizer), name), []

    def failing(self, *args):
        calls.append(args)
        if len(calls) == 3:
            raise MemoryError("planted")
        return original(self, *args)

    monkeypatch.setattr(type(optimizer), name, failing)
    params, state, steps = host_params(net), state_copy(optimizer), optimizer.steps
    versions = [group.version for group in net.params]
    with pytest.raises(MemoryError, match="planted"):
        optimizer.step(net.params, gradients(net, seed=2))
    assert len(calls) == 3
    assert_params_equal(host_params(net), params)
    assert_state_equal(state_copy(optimizer), state)
    assert optimizer.steps == steps and [g.version for g in net.params] == versions


@pytest.mark.parametrize("make", OPTIMIZERS.values(), ids=OPTIMIZERS.keys())
def test_state_dict_is_a_snapshot_that_later_steps_leave_alone(backend, make):
    net = small_net()
    optimizer = make()
    optimizer.step(net.params, gradients(net, seed=1))
    saved = optimizer.state_dict()
    kept = {k: v.copy() for k, v in saved.items()}
    optimizer.step(net.params, gradients(net, seed=2))
    assert_state_equal(saved, kept)


@pytest.mark.parametrize("make", OPTIMIZERS.values(), ids=OPTIMIZERS.keys())
def test_the_state_of_an_optimizer_that_never_stepped_loads(make):
    net = small_net()
    optimizer = make()
    optimizer.load_state_dict(make().state_dict(), net.params)
    assert optimizer.steps == 0 and optimizer.state == {}


# --- state tied to its parameters ------------------------------------------------------------


@pytest.mark.parametrize("make", [OPTIMIZERS["sgd-momentum"], OPTIMIZERS["adam"]],
                         ids=["sgd-momentum", "adam"])
@pytest.mark.parametrize("other", ["same-shape", "other-shape"])
def test_an_optimizer_with_state_refuses_another_network(backend, make, other):
    first = small_net()
    optimizer = make()
    optimizer.step(first.params, gradients(first))
    second = small_net(seed=5, n_out=2 if other == "same-shape" else 3)
    before = host_params(second)
    with pytest.raises(ValueError, match="other parameter groups.*one .* per network"):
        optimizer.step(second.params, gradients(second))
    assert_params_equal(host_params(second), before)
    optimizer.step(first.params, gradients(first))  # its own network still works
    assert optimizer.steps == 2


def test_a_stateless_sgd_may_serve_several_networks(backend):
    optimizer = dualtape.SGD(0.1)
    for net in (small_net(), small_net(seed=3, n_out=3)):
        optimizer.step(net.params, gradients(net))
    assert optimizer.state == {}


def test_loading_state_ties_the_optimizer_to_the_given_parameters(backend):
    net, other = small_net(), small_net(seed=7)
    first = dualtape.SGD(0.1, momentum=0.9)
    first.step(net.params, gradients(net))
    second = dualtape.SGD(0.1, momentum=0.9)
    second.load_state_dict(first.state_dict(), other.params)
    second.step(other.params, gradients(other))
    with pytest.raises(ValueError, match="other parameter groups"):
        second.step(net.params, gradients(net))


# --- load_state_dict checks ------------------------------------------------------------------


def trained_state(make) -> tuple[dict, dualtape.Network]:
    net = small_net()
    optimizer = make()
    optimizer.step(net.params, gradients(net))
    return optimizer.state_dict(), net


@pytest.mark.parametrize("source, target, match", [
    ("adam", "sgd-momentum", "belongs to a Adam optimizer"),
    ("sgd-momentum", "adam", "belongs to a SGD optimizer"),
])
def test_state_of_another_optimizer_kind_is_refused(source, target, match):
    state, net = trained_state(OPTIMIZERS[source])
    optimizer = OPTIMIZERS[target]()
    with pytest.raises(ValueError, match=match):
        optimizer.load_state_dict(state, net.params)
    del state["kind"]  # files written before the kind was stored: the slots still tell
    with pytest.raises(ValueError, match="slot"):
        optimizer.load_state_dict(state, net.params)
    assert optimizer.state == {} and optimizer.steps == 0


@pytest.mark.parametrize("edit, match", [
    (lambda s: {**s, "0/W/velocity": s["0/W/m"]}, "unknown slot 'velocity'"),
    (lambda s: {k: v for k, v in s.items() if k != "0/W/v"}, r"slots \['m'\], expected"),
    (lambda s: {**s, "steps": np.asarray(3.7)}, "'steps' must be an integer >= 0"),
    (lambda s: {**s, "steps": np.asarray(-5)}, "'steps' must be an integer >= 0"),
    (lambda s: {**s, "steps": np.asarray("3")}, "'steps' must be an integer >= 0"),
    (lambda s: {**s, "steps": np.asarray([1, 2])}, "'steps' must be an integer >= 0"),
    (lambda s: {**s, "0/W/m": s["0/W/m"].astype(np.int64)}, "must be floating point"),
    (lambda s: {**s, "0/W/m": s["0/W/m"].astype(complex)}, "must be floating point"),
    (lambda s: {**s, "0/W/m": np.full(s["0/W/m"].shape, "x")}, "must be floating point"),
    (lambda s: {**s, "kind": np.asarray("SGD")}, "belongs to a SGD optimizer"),
    (lambda s: {**s, "0/W/m": np.where(s["0/W/m"] > 0, np.nan, s["0/W/m"])}, "NaN or inf"),
    (lambda s: {**s, "2/b/v": np.full_like(s["2/b/v"], np.inf)}, "'2/b/v' holds NaN or inf"),
    (lambda s: {**s, "0/W/m": np.full_like(s["0/W/m"], -np.inf)}, "NaN or inf"),
    (lambda s: {**s, "0/b/v": np.where(np.arange(4) == 2, -1e-9, s["0/b/v"])},
     "'0/b/v' holds negative values"),
], ids=["unknown-slot", "missing-slot", "float-steps", "negative-steps", "string-steps",
        "array-steps", "integer-slot", "complex-slot", "string-slot", "kind", "nan-m", "inf-v",
        "minus-inf-m", "negative-v"])
def test_malformed_adam_state_is_refused_and_changes_nothing(edit, match):
    state, net = trained_state(OPTIMIZERS["adam"])
    optimizer = dualtape.Adam(0.05)
    with pytest.raises(ValueError, match=match):
        optimizer.load_state_dict(edit(state), net.params)
    assert optimizer.state == {} and optimizer.steps == 0


@pytest.mark.parametrize("source", ["adam", "sgd-momentum"])
def test_a_refused_load_leaves_the_state_it_had(backend, source):
    net = small_net()
    optimizer = OPTIMIZERS[source]()
    optimizer.step(net.params, gradients(net, seed=1))
    state, steps = state_copy(optimizer), optimizer.steps
    bad = optimizer.state_dict()
    bad["0/W/m"] = bad["0/W/m"] + 1.0  # a valid entry first, then one that is not
    bad["2/b/m"] = np.full_like(bad["2/b/m"], np.nan)
    with pytest.raises(ValueError, match="'2/b/m' holds NaN or inf"):
        optimizer.load_state_dict(bad, net.params)
    assert_state_equal(state_copy(optimizer), state)
    assert optimizer.steps == steps
    optimizer.step(net.params, gradients(net, seed=2))  # still tied to its network


def test_a_negative_first_moment_or_momentum_is_a_valid_state():
    state, net = trained_state(OPTIMIZERS["adam"])
    state["0/W/m"] = -np.abs(state["0/W/m"])
    dualtape.Adam(0.05).load_state_dict(state, net.params)
    state, net = trained_state(OPTIMIZERS["sgd-momentum"])
    state["0/W/m"] = -np.abs(state["0/W/m"])
    dualtape.SGD(0.1, momentum=0.9).load_state_dict(state, net.params)


def test_a_non_finite_momentum_is_refused_and_changes_nothing():
    state, net = trained_state(OPTIMIZERS["sgd-momentum"])
    state["2/W/m"] = np.full_like(state["2/W/m"], np.nan)
    optimizer = dualtape.SGD(0.1, momentum=0.9)
    with pytest.raises(ValueError, match="'2/W/m' holds NaN or inf"):
        optimizer.load_state_dict(state, net.params)
    assert optimizer.state == {} and optimizer.steps == 0


def test_momentum_state_loads_into_an_sgd_without_momentum_and_is_unused():
    # train-text may resume with --momentum 0: the stored momentum then plays no part.
    state, net = trained_state(OPTIMIZERS["sgd-momentum"])
    twin = small_net()
    for group, same in zip(twin.params, net.params, strict=True):
        group.update({k: v.copy() for k, v in same.items()})
    resumed, plain = dualtape.SGD(0.1), dualtape.SGD(0.1)
    resumed.load_state_dict(state, net.params)
    resumed.step(net.params, gradients(net, seed=3))
    plain.step(twin.params, gradients(twin, seed=3))
    assert_params_equal(host_params(net), host_params(twin))


def test_loaded_state_is_a_copy(backend):
    state, net = trained_state(OPTIMIZERS["sgd-momentum"])
    kept = {k: v.copy() for k, v in state.items()}
    optimizer = dualtape.SGD(0.1, momentum=0.9)
    optimizer.load_state_dict(state, net.params)
    optimizer.step(net.params, gradients(net))
    assert_state_equal(state, kept)


# --- the state follows the network -----------------------------------------------------------


@pytest.mark.parametrize("make", [OPTIMIZERS["sgd-momentum-l2"], OPTIMIZERS["adam"]],
                         ids=["sgd-momentum-l2", "adam"])
def test_state_moves_with_the_network_at_the_next_step(backend, make):
    with dualtape.use_backend("numpy"):
        moved, stayed = small_net(), small_net()
        optimizers = make(), make()
        for net, optimizer in zip((moved, stayed), optimizers, strict=True):
            optimizer.step(net.params, gradients(net))
    moved.to(backend.name, backend.device)
    optimizers[0].step(moved.params, gradients(moved))
    with dualtape.use_backend("numpy"):
        optimizers[1].step(stayed.params, gradients(stayed))
    for slots in optimizers[0].state.values():
        for value in slots.values():
            assert backend_of(value) == backend_of(moved.params[0]["W"])
    for a, b in zip(host_params(moved), host_params(stayed), strict=True):
        for key in a:
            np.testing.assert_allclose(a[key], b[key], rtol=1e-12, atol=1e-15)


def test_read_only_arrays_are_never_written():
    # A read-only gradient is only read, so the update stays in place; a read-only parameter
    # gets the generic update (a new array) instead of an in-place write.
    g = np.ones(3)
    g.flags.writeable = False
    params = [{"w": np.zeros(3), "frozen": np.zeros(3)}]
    params[0]["frozen"].flags.writeable = False
    kept = dict(params[0])
    dualtape.SGD(0.5, momentum=0.5).step(params, [{"w": g, "frozen": g}])
    assert params[0]["w"] is kept["w"] and params[0]["frozen"] is not kept["frozen"]
    np.testing.assert_array_equal(params[0]["w"], -0.5)
    np.testing.assert_array_equal(params[0]["frozen"], -0.5)
    np.testing.assert_array_equal(kept["frozen"], 0.0)


@pytest.mark.parametrize("size", [3, optim.COMPILED_FROM], ids=["small", "compiled-size"])
@pytest.mark.parametrize("name", ["sgd-momentum", "adam"])
def test_a_read_only_state_slot_is_never_written(name, size):
    """A slot made read-only between steps gets the generic update (a new array), with the
    numbers of an optimizer whose slot stayed writeable."""
    results = []
    for read_only in (True, False):
        params, g = [{"w": np.zeros(size)}], [{"w": np.linspace(-1, 1, size)}]
        optimizer = OPTIMIZERS[name]()
        optimizer.step(params, g)
        slot = optimizer.state[(0, "w")]["m"]
        slot.flags.writeable = not read_only
        before = slot.copy()
        optimizer.step(params, g)
        if read_only:
            np.testing.assert_array_equal(slot, before)
            assert optimizer.state[(0, "w")]["m"] is not slot
        results.append((params[0]["w"], optimizer.state_dict()))
    np.testing.assert_array_equal(results[0][0], results[1][0])
    for key, value in results[1][1].items():
        np.testing.assert_array_equal(results[0][1][key], value, err_msg=key)


@pytest.mark.parametrize("name", ["sgd-momentum", "adam"])
def test_a_memory_mapped_gradient_updates_in_place_as_a_plain_one(tmp_path, name):
    """numpy's subclasses that are plain arrays underneath (np.memmap) take the in-place
    update, with the plain gradient's numbers."""
    results = []
    for mapped in (True, False):
        g = np.linspace(-1, 1, 5)
        if mapped:
            g = np.memmap(tmp_path / "g.bin", dtype=np.float64, mode="w+", shape=(5,))
            g[:] = np.linspace(-1, 1, 5)
        w = np.ones(5)
        params, optimizer = [{"w": w}], OPTIMIZERS[name]()
        for _ in range(3):
            optimizer.step(params, [{"w": g}])
        assert params[0]["w"] is w
        results.append(w)
    np.testing.assert_array_equal(*results)


ODD = {"matrix": lambda: np.matrix([[1.0, 2.0], [3.0, 4.0]]),
       "masked": lambda: np.ma.masked_array([[1.0, 2.0], [3.0, 4.0]],
                                            mask=[[False, True], [False, False]])}


@pytest.mark.filterwarnings("ignore:the matrix subclass:PendingDeprecationWarning")
@pytest.mark.parametrize("which", ["gradient", "parameter", "both"])
@pytest.mark.parametrize("odd", sorted(ODD))
@pytest.mark.parametrize("name", ["sgd", "adam"])
def test_numpy_matrices_and_masked_arrays_are_refused_changing_nothing(name, odd, which):
    """Adam's g·g of matrices was a matrix product, and a masked gradient made the parameter
    a masked array: both silently. Refused in one line naming the array, before any change."""
    odd = ODD[odd]()
    w = odd.copy() if which != "gradient" else np.ones((2, 2))
    g = odd.copy() if which != "parameter" else np.ones((2, 2))
    params, optimizer = [{"W": w}], OPTIMIZERS[name]()
    kind = type(odd).__name__
    what = "gradient" if which != "parameter" else "parameter"
    with pytest.raises(TypeError, match=rf"^{type(optimizer).__name__}: the {what} of W in "
                                        rf"group 0 is a {kind}, whose arithmetic is not an "
                                        r"array's; pass a plain array \(np.asarray"):
        optimizer.step(params, [{"W": g}])
    assert params[0]["W"] is w and optimizer.steps == 0 and not optimizer.state


@pytest.mark.parametrize("make", OPTIMIZERS.values(), ids=OPTIMIZERS.keys())
def test_a_writeable_broadcast_parameter_gets_a_new_array_not_overlapping_writes(make):
    # CuPy marks no view read-only: a broadcast parameter's rows share memory, so writing the
    # update in place would add every row's step into the one row they all are.
    row = np.linspace(-1, 1, 4)
    shared = np.lib.stride_tricks.as_strided(row, (3, 4), (0, row.itemsize), writeable=True)
    params, twin = [{"w": shared}], [{"w": np.broadcast_to(row, (3, 4)).copy()}]
    g = np.random.default_rng(2).normal(size=(3, 4))
    for group in (params, twin):
        make().step(group, [{"w": g}])
    assert params[0]["w"] is not shared
    np.testing.assert_array_equal(params[0]["w"], twin[0]["w"])
    np.testing.assert_array_equal(row, np.linspace(-1, 1, 4))
