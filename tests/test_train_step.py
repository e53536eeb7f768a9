"""The whole SGD step of an LSTM stack in one compiled call (``planned_backprop``'s
``planned_descent``)."""

from __future__ import annotations

import numpy as np
import pytest

import dualtape
from dualtape import planned_backprop
from dualtape.backend import to_numpy
from dualtape.kernels import cpu_path, numba_descent, selfcheck, stack_loops
from dualtape.layers import lstm

from .helpers import assert_params_equal, host_params
from .test_descent import (
    Unfused,
    assert_same_step,
    case_network,
    fuses_here,
    stack,
    strided_loss,
)


@pytest.fixture
def whole_steps(monkeypatch):
    """The input forms ``numba_descent.descend_stack`` stepped at, call by call (not the
    self-check's, which calls the module's own): what the route record, written before the
    step runs, cannot say (whether the kernel ran at all in a call that failed first)."""
    if cpu_path()[0] == "compiled":
        for dtype in ("float32", "float64"):
            stack_loops(np.zeros(1, dtype), numba_descent.check_stack)
    calls, original = [], numba_descent.descend_stack

    def spied(weights, tapes, *args, **kwargs):
        calls.append(tapes[0][0].shape)
        return original(weights, tapes, *args, **kwargs)

    monkeypatch.setattr(numba_descent, "descend_stack", spied)
    return calls


def took(net) -> str:
    """The route of ``net``'s latest ``train_recurrent`` call (``dualtape.last_route``)."""
    return dualtape.last_route(net, "train_recurrent").taken


def data(steps, batch, sizes, dtype="float64", seed=3):
    rng = np.random.default_rng(seed)
    return tuple(dualtape.asarray(rng.uniform(-1, 1, (steps, batch, n)).astype(dtype))
                 for n in (sizes[0], sizes[-1]))


@pytest.mark.parametrize("sizes", [(3, 5), (3, 5, 4), (2, 6, 5, 3)], ids=["1", "2", "3"])
@pytest.mark.parametrize(("steps", "batch"), [(1, 1), (1, 4), (9, 1), (6, 3)])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_the_whole_step_trains_as_the_layer_by_layer_step(backend, sizes, steps, batch, dtype):
    """Two calls from zero states: the losses and last states are the unfused call's bits (the
    same forward pass and loss), the weights those of a call whose loss gradient is strided
    (a C-order copy of it, the same kernel) and the unfused step's to rounding."""
    xs, targets = data(steps, batch, sizes, dtype)
    whole, strided, unfused = stack(sizes, dtype), stack(sizes, dtype), stack(sizes, dtype)
    before = host_params(whole)
    for call in range(2):  # the weights differ by rounding from the unfused after the first
        got = dualtape.train_recurrent(whole, xs, targets, dualtape.SGD(0.5))
        want = [dualtape.train_recurrent(strided, xs, targets, dualtape.SGD(0.5),
                                         loss=strided_loss)]
        if call == 0:
            want.append(dualtape.train_recurrent(unfused, xs, targets, Unfused(0.5)))
        for loss, ends in want:
            assert got[0] == loss and all(np.array_equal(to_numpy(a), to_numpy(b))
                                          for a, b in zip(got[1], ends, strict=True))
        assert all(np.array_equal(w[k], f[k]) for w, f in zip(
            host_params(whole), host_params(strided), strict=True) for k in w)
    dualtape.train_recurrent(unfused, xs, targets, Unfused(0.5))
    assert_same_step(before, host_params(whole), host_params(unfused), dtype,
                     still=("U",) if steps == 1 else ())
    assert took(whole) == took(strided) == ("whole-step" if fuses_here(backend) else "layers")


def test_the_whole_step_agrees_with_the_generic_code(backend, monkeypatch):
    xs, targets = data(7, 2, (3, 6, 3))
    nets = {}
    for switch in ("0", "1"):
        monkeypatch.setenv("DUALTAPE_FUSED", switch)
        nets[switch] = net = stack((3, 6, 3))
        dualtape.train_recurrent(net, xs, targets, dualtape.SGD(0.5))
    assert_same_step(host_params(stack((3, 6, 3))), host_params(nets["1"]),
                     host_params(nets["0"]), "float64")


def test_the_whole_step_keeps_the_optimizers_bookkeeping(backend):
    """The step is counted, and a tape made before it is stale, as after ``optimizer.step``."""
    net, optimizer = stack((3, 4, 3)), dualtape.SGD(0.1)
    xs, targets = data(5, 2, (3, 3))
    tape, _, ys = net.forward_sequence(None, xs)
    dualtape.train_recurrent(net, xs, targets, optimizer)
    dualtape.train_recurrent(net, xs, targets, optimizer)
    assert optimizer.steps == 2 and took(net) == ("whole-step" if fuses_here(backend) else
                                                  "layers")
    with pytest.raises(RuntimeError, match="parameters"):
        net.backward_sequence(tape, None, ys)


@pytest.mark.parametrize(("case", "options"), [
    ("state", {"state": [None, None]}), ("mask", {"mask": np.ones((5, 2), bool)}),
    ("loss", {"loss": "mean_squared_error"}), ("float32-targets", {})])
def test_a_state_mask_loss_or_targets_of_another_dtype_take_the_whole_step(
        backend, case, options):
    """The planned pass takes these too: the layer path's step to rounding (its loss the
    same bits)."""
    xs, targets = data(5, 2, (3, 3))
    if case == "float32-targets":
        targets = dualtape.asarray(to_numpy(targets).astype(np.float32))
    if "mask" in options:
        options = {"mask": dualtape.asarray(options["mask"])}
    whole, unfused = stack((3, 4, 3)), stack((3, 4, 3))
    before = host_params(whole)
    got = dualtape.train_recurrent(whole, xs, targets, dualtape.SGD(0.5), **options)
    want = dualtape.train_recurrent(unfused, xs, targets, Unfused(0.5), **options)
    assert got[0] == want[0]
    assert_same_step(before, host_params(whole), host_params(unfused), "float64")
    assert took(whole) == ("whole-step" if fuses_here(backend) else "layers")


@pytest.mark.parametrize("case", [
    "sqrt-tape", "learn-initial-state", "ids", "fully-connected", "momentum", "subclass",
    "ufunc-loop", "read-only", "read-only-later"])
def test_the_other_calls_take_the_layer_by_layer_path(backend, monkeypatch, case):
    """None of these runs as one call, as the record says and ``route`` foresaw; each still
    trains (the loss is finite, the weights move)."""
    rng = np.random.default_rng(5)
    net, optimizer = case_network(case)
    host = rng.uniform(-1, 1, (4, 2, 3)).astype(np.float32)
    xs = dualtape.asarray(host)
    targets = dualtape.asarray(host)
    options = {"sqrt-tape": {"tape": "sqrt"},
               "learn-initial-state": {"state": [dualtape.asarray(np.zeros((2, n), np.float32))
                                                 for n in (4, 3)],
                                       "learn_initial_state": True}}.get(case, {})
    if case == "ids":
        xs = dualtape.asarray(rng.integers(0, 3, (4, 2)))
    if case == "ufunc-loop":
        monkeypatch.setenv("DUALTAPE_JIT", "0")
    if case == "read-only" and backend.name == "numpy":
        net.layers[1].params["b"].flags.writeable = False
    if case == "read-only-later" and backend.name == "numpy":
        dualtape.train_recurrent(net, xs, targets, optimizer)  # a plan made
        net.layers[1].params["b"].flags.writeable = False
    before = host_params(net)
    foreseen = dualtape.route(net, xs, targets, optimizer=optimizer, **options)
    loss, _ = dualtape.train_recurrent(net, xs, targets, optimizer, **options)
    took = dualtape.last_route(net, "train_recurrent")
    assert np.isfinite(loss) and took == foreseen and took.taken != "whole-step"
    assert "whole-step" in dict(took.declined)
    assert not np.array_equal(host_params(net)[0]["U"], before[0]["U"])


@pytest.mark.parametrize(("where", "message"), [
    ("input", "the input holds NaN or inf"),
    ("input-inf", "^train_recurrent: the input holds NaN or inf; no update was applied$"),
    ("target", "the loss is nan"), ("weights", "NaN or inf in the network's parameters")])
def test_a_non_finite_call_raises_and_moves_nothing(backend, where, message):
    """As the generic code raises, before any weight moves and with the step uncounted."""
    net, optimizer = stack((3, 4, 3)), dualtape.SGD(0.1)
    host = np.random.default_rng(11).uniform(-1, 1, (5, 2, 3))
    xs, targets = host.copy(), host.copy()
    if where == "input":
        xs[2, 1, 0] = np.nan
    elif where == "input-inf":
        xs[4, 0, 2] = np.inf
    elif where == "target":
        targets[0, 0, 1] = np.nan
    else:
        dualtape.train_recurrent(net, dualtape.asarray(xs), dualtape.asarray(targets), optimizer)
        net.layers[1].params["U"][0, 0] = np.nan  # after a whole step: the plan is kept
        optimizer.steps = 0
    before = host_params(net)
    with pytest.raises(FloatingPointError, match=message):
        dualtape.train_recurrent(net, dualtape.asarray(xs), dualtape.asarray(targets), optimizer)
    assert optimizer.steps == 0
    for b, a in zip(before, host_params(net), strict=True):
        assert all(np.array_equal(b[k], a[k], equal_nan=True) for k in b)


@pytest.mark.parametrize("change", ["new-array", "in-place", "other-optimizer", "new-form",
                                    "new-layer"])
def test_a_change_between_calls_is_taken_into_account(backend, change):
    """The checks made once per network and form are made again after anything the step did
    not do itself; an in-place write is read as it is."""
    xs, targets = data(5, 2, (3, 3))
    nets = [stack((3, 4, 3)), stack((3, 4, 3))]
    optimizers = [dualtape.SGD(0.3), Unfused(0.3)]
    for net, optimizer in zip(nets, optimizers, strict=True):
        dualtape.train_recurrent(net, xs, targets, optimizer)
    for net in nets:
        if change == "new-array":
            net.layers[0].params["W"] = net.layers[0].params["W"] * 0.5
        elif change == "in-place":
            net.layers[1].params["U"][...] *= 0.5
        elif change == "other-optimizer":
            grads = dualtape.backpropagate_sequence(net, xs, targets).grads
            dualtape.Adam(0.01).step(net.params, grads)
        elif change == "new-layer":
            net.layers[1] = dualtape.LSTM(4, 3, seed=7, dtype="float64")
    if change == "new-form":
        xs, targets = data(2, 3, (3, 3), seed=4)
    before = host_params(nets[0])
    for net, optimizer in zip(nets, optimizers, strict=True):
        dualtape.train_recurrent(net, xs, targets, optimizer)
    assert_same_step(before, host_params(nets[0]), host_params(nets[1]), "float64")
    assert took(nets[0]) == ("whole-step" if fuses_here(backend) else "layers")


@pytest.mark.parametrize("loss", ["squared_error", strided_loss], ids=["c-order", "strided"])
def test_an_sgd_holding_another_networks_state_is_refused(backend, whole_steps, loss):
    """An SGD whose momentum was set to 0 after steps of another network still holds that
    network's velocities: both fast paths refuse it, as ``optimizer.step`` does, before
    anything moves; its own network still trains."""
    xs, targets = data(5, 2, (3, 3))
    first, second = stack((3, 4, 3)), stack((3, 4, 3), seed=5)
    optimizer = dualtape.SGD(0.1, momentum=0.5)
    dualtape.train_recurrent(first, xs, targets, optimizer)
    optimizer.momentum = 0.0  # plain SGD now: the fast paths' optimizer
    before = host_params(second)
    with pytest.raises(ValueError, match="SGD: cannot step .* other parameter groups"):
        dualtape.train_recurrent(second, xs, targets, optimizer, loss=loss)
    assert_params_equal(host_params(second), before)
    assert optimizer.steps == 1 and whole_steps == []
    dualtape.train_recurrent(first, xs, targets, optimizer, loss=loss)
    assert optimizer.steps == 2
    assert whole_steps == ([(5, 2, 3)] if fuses_here(backend) else [])
    assert took(first) == ("whole-step" if fuses_here(backend) else "layers")


def test_the_states_returned_are_the_callers(backend):
    """Each call's last states are new arrays: the next call does not write into them."""
    net = stack((3, 4, 3))
    xs, targets = data(5, 2, (3, 3))
    _, ends = dualtape.train_recurrent(net, xs, targets, dualtape.SGD(0.1))
    kept = [to_numpy(s).copy() for s in ends]
    dualtape.train_recurrent(net, xs, targets, dualtape.SGD(0.1))
    assert all(np.array_equal(to_numpy(s), k) for s, k in zip(ends, kept, strict=True))


def test_a_failure_before_the_step_changes_nothing(backend, whole_steps, monkeypatch):
    """The scratch is made before any weight moves: running out of memory there leaves the
    network and the optimizer as they were."""
    def no_memory(*args):
        raise MemoryError("planted")

    monkeypatch.setattr(numba_descent, "stack_scratch", no_memory)
    net, optimizer = stack((3, 4, 3)), dualtape.SGD(0.1)
    xs, targets = data(5, 2, (3, 3))
    before = host_params(net)
    if not fuses_here(backend):
        dualtape.train_recurrent(net, xs, targets, optimizer)
        assert optimizer.steps == 1
        return
    with pytest.raises(MemoryError, match="planted"):
        dualtape.train_recurrent(net, xs, targets, optimizer)
    assert optimizer.steps == 0 and whole_steps == []
    for b, a in zip(before, host_params(net), strict=True):
        assert all(np.array_equal(b[k], a[k]) for k in b)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_the_whole_step_passes_its_self_check(dtype):
    pytest.importorskip("numba")
    assert numba_descent.check_stack(numba_descent, np.zeros(1, dtype)) is None


class _Off:
    """``numba_descent`` with the stack's rate off by one part in 10⁹ (far above float64
    rounding) at ``steps`` steps only."""

    def __init__(self, steps: int) -> None:
        self.steps = steps

    def descend_stack(self, weights, tapes, dys, scratch, rate):
        off = 1 + 1e-9 * (dys.shape[0] == self.steps)
        return numba_descent.descend_stack(weights, tapes, dys, scratch, rate * off)


@pytest.mark.parametrize("steps", [3, 1])
def test_the_self_check_catches_planted_bugs(steps):
    pytest.importorskip("numba")
    assert f"at {steps} step" in numba_descent.check_stack(_Off(steps), np.zeros(1))


@pytest.mark.parametrize(("failing", "warned"), [
    ("lstm-loops", "compiled CPU LSTM loops disagree"),
    ("own", "compiled SGD step of a stack disagree")])
def test_a_failed_self_check_keeps_the_layer_by_layer_step(monkeypatch, failing, warned):
    """Where the compiled LSTM loops fail their self-check (one warning, then the ufunc loop),
    the whole step, which runs them, is not taken (the layers' route); nor where its own
    check fails (then the planned pass's gradients and the optimizer's step)."""
    if not fuses_here(dualtape.backend.resolve_backend("numpy")):
        pytest.skip("the whole step runs with the compiled loops")
    monkeypatch.setattr(selfcheck, "_VERDICTS", {})
    if failing == "lstm-loops":
        for module in (lstm, planned_backprop):
            monkeypatch.setattr(module, "fused_disagreement", lambda path, like: "planted")
    else:
        monkeypatch.setattr(numba_descent, "check_stack", lambda loops, like: "planted")
    net, before = stack((3, 4, 3)), host_params(stack((3, 4, 3)))
    xs, targets = data(5, 2, (3, 3))
    with pytest.warns(RuntimeWarning, match=warned):
        dualtape.train_recurrent(net, xs, targets, dualtape.SGD(0.1))
    took = dualtape.last_route(net, "train_recurrent")
    assert "self-check" in dict(took.declined)["whole-step"]
    assert took.taken == ("layers" if failing == "lstm-loops" else "planned")
    assert not np.array_equal(host_params(net)[0]["U"], before[0]["U"])
