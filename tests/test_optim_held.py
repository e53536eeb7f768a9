"""An optimizer step kept for the steps after it (``held_update``): the same bits as full
steps, on every backend (only numpy's compiled updates keep one); a kept step notices every
change a full step would see; the batches of the compiled call and their self-check."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest

import dualtape
from dualtape import held_update, optim
from dualtape.kernels import blas, cpu_path, numba_optim, selfcheck

from .helpers import assert_params_equal, host_params

RULES = {
    "sgd": lambda: dualtape.SGD(0.1),
    "sgd-l2": lambda: dualtape.SGD(0.1, regulariser=0.01),
    "sgd-momentum-l2": lambda: dualtape.SGD(0.1, momentum=0.9, regulariser=0.01),
    "adam": lambda: dualtape.Adam(0.01),
}


def network(dtype: str) -> dualtape.RecurrentNetwork:
    """An LSTM and a FullyConnected: both fill gradient buffers, so their gradients come back
    as the same arrays each call."""
    return dualtape.RecurrentNetwork([dualtape.LSTM(3, 6, seed=1, dtype=dtype),
                                      dualtape.FullyConnected(6, 2, seed=2, dtype=dtype)])


def data(dtype: str, steps: int = 4):
    rng = np.random.default_rng(5)
    return [dualtape.asarray(rng.uniform(-1, 1, shape).astype(dtype))
            for shape in ((steps, 2, 3), (steps, 2, 2))]


def served(monkeypatch) -> list[int]:
    """The number of parameters each kept step updated, one entry per kept step."""
    calls: list[int] = []
    run = held_update.HeldUpdate.run
    monkeypatch.setattr(held_update.HeldUpdate, "run", lambda self, update: (
        calls.append(len(self.written) - len(self.slot_arrays)), run(self, update)))
    return calls


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("rule", sorted(RULES))
def test_kept_steps_give_the_full_steps_bits(backend, monkeypatch, rule, dtype):
    xs, targets = data(dtype)
    kept, full = network(dtype), network(dtype)
    fast, plain = RULES[rule](), RULES[rule]()
    calls = served(monkeypatch)
    for _ in range(5):
        dualtape.train_recurrent(kept, xs, targets, fast)
        tape, _, ys = full.forward_sequence(None, xs)
        grads, _, _ = full.backward_sequence(tape, None, (ys - targets) / 2)  # batch mean
        plain.step(full.params, [dict(g) for g in grads])  # new dicts: never kept
    assert_params_equal(host_params(kept), host_params(full))
    state, expected = fast.state_dict(), plain.state_dict()
    assert state.keys() == expected.keys()
    for key in state:
        np.testing.assert_array_equal(state[key], expected[key], err_msg=key)
    keeps = backend.name == "numpy" and cpu_path()[0] == "compiled"
    # The first step makes the slots, the second finds the same arrays again and keeps its
    # plan, the last three run it: every parameter of the network (LSTM's 3, the layer's 2).
    assert calls == ([5] * 3 if keeps else []), calls


def kept_optimizer(make=RULES["adam"]):
    """A float64 network, its optimizer after three steps (the third kept) and a step function
    that gives the same gradient arrays each time."""
    net = network("float64")
    rng = np.random.default_rng(2)
    grads = [{k: rng.normal(size=p.shape) for k, p in layer.params.items()}
             for layer in net.layers]
    optimizer = make()
    for _ in range(3):
        optimizer.step(net.params, grads)
    return net, optimizer, grads


CHANGES = {
    "a-new-gradient-array": lambda net, opt, grads, env: grads[1].update(W=grads[1]["W"] * 2),
    "a-new-parameter-array": lambda net, opt, grads, env: net.layers[1].params.update(
        W=net.layers[1].params["W"] + 1),
    "a-new-slot-array": lambda net, opt, grads, env: opt.state[(0, "U")].update(
        m=opt.state[(0, "U")]["m"] * 3),
    "a-new-slot-dict": lambda net, opt, grads, env: opt.state.__setitem__(
        (0, "U"), {name: a * 3 for name, a in opt.state[(0, "U")].items()}),
    "renamed-gradients": lambda net, opt, grads, env: grads.__setitem__(
        1, {"b": grads[1]["W"], "W": grads[1]["b"]}),
    "loaded-state": lambda net, opt, grads, env: opt.load_state_dict(opt.state_dict(),
                                                                     net.params),
    "a-read-only-parameter": lambda net, opt, grads, env: setattr(
        net.layers[0].params["b"].flags, "writeable", False),
    "renamed-parameters": lambda net, opt, grads, env: _rename(net.layers[1].params, grads[1]),
    "an-added-layer": lambda net, opt, grads, env: (
        net.layers.append(dualtape.FullyConnected(2, 2, seed=3, dtype="float64")),
        grads.append({k: np.ones_like(p) for k, p in net.layers[-1].params.items()})),
    "DUALTAPE_JIT=0": lambda net, opt, grads, env: env.setenv("DUALTAPE_JIT", "0"),
    "DUALTAPE_FUSED=0": lambda net, opt, grads, env: env.setenv("DUALTAPE_FUSED", "0"),
}


def _rename(params: dict, grads: dict) -> None:
    """The same arrays in the same order under other names, the gradients' too."""
    for group in (params, grads):
        arrays = [group.pop(name) for name in list(group)]
        group.update({f"{name}2": a for name, a in zip(("W", "b"), arrays, strict=True)})


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_a_kept_step_gives_way_to_a_full_step_when_anything_changed(change):
    """Each change between steps makes the next step a full one, with the full step's
    numbers and errors: the same as an optimizer that never keeps a step (``_hold`` off)."""
    if cpu_path()[0] != "compiled":
        pytest.skip(f"only the compiled updates keep a step: {cpu_path()[1]}")
    results = []
    for keep in (True, False):
        with pytest.MonkeyPatch.context() as patch:
            if not keep:
                patch.setattr(optim.Optimizer, "_hold", lambda self, *args: None)
            net, opt, grads = kept_optimizer()
            assert (opt._held is not None) == keep
            calls = served(patch)
            CHANGES[change](net, opt, grads, patch)
            try:
                opt.step(net.params, grads)
            except ValueError as error:  # the renamed gradients' shapes
                results.append(str(error))
                continue
            assert calls == []
            results.append((host_params(net), opt.state_dict()))
    if isinstance(results[1], str):
        assert results[0] == results[1] and "the gradient of W" in results[1]
        return
    (kept, kept_state), (full, full_state) = results
    assert_params_equal(kept, full)
    for key in full_state:
        np.testing.assert_array_equal(kept_state[key], full_state[key], err_msg=key)


def test_a_kept_step_looks_at_every_array_of_groups_that_carry_no_stamp():
    """A plain dict among the network's ``ParamDict`` groups (say, learned initial states)
    carries no stamp that says no array was set in it: the kept step still serves, and an
    array set in that dict since makes the next step a full one, as without a kept step."""
    if cpu_path()[0] != "compiled":
        pytest.skip(f"only the compiled updates keep a step: {cpu_path()[1]}")
    found = []
    for keep in (True, False):
        with pytest.MonkeyPatch.context() as patch:
            if not keep:
                patch.setattr(optim.Optimizer, "_hold", lambda self, *args: None)
            net, rng = network("float64"), np.random.default_rng(3)
            params = [*net.params, {"h0": rng.normal(size=(2, 12))}]
            grads = [{k: rng.normal(size=a.shape) for k, a in group.items()} for group in params]
            optimizer, calls = RULES["adam"](), served(patch)
            for _ in range(3):
                optimizer.step(params, grads)
            params[2]["h0"] = params[2]["h0"] + 1.0  # a new array in the plain dict
            for _ in range(3):  # a full step, one that keeps its plan, a kept one
                optimizer.step(params, grads)
            assert calls == ([6, 6] if keep else []), calls  # the third and the sixth
            found.append([dict(group) for group in params])
    assert_params_equal(*found)


def test_a_kept_step_keeps_the_full_steps_errors_and_stamps(monkeypatch):
    if cpu_path()[0] != "compiled":
        pytest.skip(f"only the compiled updates keep a step: {cpu_path()[1]}")
    net, opt, grads = kept_optimizer()
    with pytest.raises(TypeError, match="list of lists"):
        opt.step(net.params, [list(g.values()) for g in grads])
    with pytest.raises(ValueError, match="2 gradient groups"):
        opt.step(net.params + [{}], grads)
    assert opt.steps == 3
    xs, _ = data("float64")
    tape, _, _ = net.forward_sequence(None, xs)
    calls = served(monkeypatch)
    opt.step(net.params, grads)
    assert calls == [5] and opt.steps == 4
    with pytest.raises(RuntimeError, match="other parameters"):
        net.backward_sequence(tape, None, xs[..., :2])


@pytest.mark.parametrize("case", ["overlapping", "strided"])
@pytest.mark.parametrize("rule", ["adam", "sgd-l2"])
def test_overlapping_and_strided_parameters_are_never_kept(monkeypatch, rule, case):
    """An element loop over a parameter that shares memory with its gradient would read what
    it wrote; a strided one cannot be flattened: both stay on the full steps' code, whose
    numbers an optimizer that never keeps a step (``_hold`` off) gives."""
    found = []
    for keep in (True, False):
        if not keep:
            monkeypatch.setattr(optim.Optimizer, "_hold", lambda self, *args: None)
        both = np.linspace(-1, 1, 65)
        params, grads = ([{"w": both[1:]}], [{"w": both[:-1]}]) if case == "overlapping" else (
            [{"w": np.zeros((9, 2))[:, 0]}], [{"w": np.ones(9)}])
        optimizer = RULES[rule]()
        for _ in range(4):
            optimizer.step(params, grads)
        assert optimizer._held is None
        found.append(params)
    assert_params_equal(*found)


@pytest.mark.parametrize("axpy", ["bundled", "missing"])
def test_a_large_plain_sgd_parameter_is_kept_with_its_axpy(monkeypatch, axpy):
    """Plain SGD updates a parameter of over ``CHUNK`` elements by BLAS's axpy (other bits
    than the compiled update's): a kept step makes the same call, its addresses found once;
    where numpy bundles no such BLAS the full step takes numpy's passes and is not kept."""
    if cpu_path()[0] != "compiled":
        pytest.skip(f"only the compiled updates keep a step: {cpu_path()[1]}")
    if axpy == "missing":
        monkeypatch.setattr(blas, "axpy_call", lambda x, y: None)
    found = []
    for keep in (True, False):
        with pytest.MonkeyPatch.context() as patch:
            if not keep:
                patch.setattr(optim.Optimizer, "_hold", lambda self, *args: None)
            rng = np.random.default_rng(0)
            params = [{"w": rng.normal(size=optim.CHUNK + 1), "small": rng.normal(size=3)}]
            grads = [{k: rng.normal(size=a.shape) for k, a in params[0].items()}]
            plain, calls = RULES["sgd"](), served(patch)
            for _ in range(4):
                plain.step(params, grads)
            assert calls == ([2] * 2 if keep and axpy == "bundled" else [])
            found.append(params)
    assert_params_equal(*found)


@pytest.mark.parametrize("change", ["momentum-on", "l2-on", "l2-off"])
def test_sgd_made_another_rule_between_steps_takes_a_full_step(change):
    """Momentum or L2 switched on or off between steps changes which arrays the update reads
    and writes: the next step is a full one, with its numbers."""
    if cpu_path()[0] != "compiled":
        pytest.skip(f"only the compiled updates keep a step: {cpu_path()[1]}")
    regulariser = 0.01 if change == "l2-off" else 0.0
    found = []
    for keep in (True, False):
        with pytest.MonkeyPatch.context() as patch:
            if not keep:
                patch.setattr(optim.Optimizer, "_hold", lambda self, *args: None)
            make = lambda: dualtape.SGD(0.1, regulariser=regulariser)  # noqa: E731
            net, opt, grads = kept_optimizer(make)
            assert (opt._held is not None) == keep
            calls = served(patch)
            if change == "momentum-on":
                opt.momentum = 0.5
            else:
                opt.regulariser = 0.01 - regulariser
            for _ in range(2):
                opt.step(net.params, grads)
            assert calls == ([5] if keep else []), calls  # the second step is kept again
            found.append(host_params(net))
    assert_params_equal(*found)


@pytest.mark.parametrize("how", ["pickle", "deepcopy"])
def test_an_optimizer_with_a_kept_step_pickles_and_copies(how):
    """The kept step (compiled code, the arrays' addresses) stays behind; the copy, tied to
    its own copy of the network, trains to the same numbers and keeps a step of its own."""
    net, opt, grads = kept_optimizer(RULES["sgd-momentum-l2"])
    twin_net = copy.deepcopy(net)
    twin = pickle.loads(pickle.dumps(opt)) if how == "pickle" else copy.deepcopy(opt)
    assert twin._held is None and twin.steps == opt.steps
    twin.load_state_dict(twin.state_dict(), twin_net.params)
    for _ in range(3):
        opt.step(net.params, grads)
        twin.step(twin_net.params, grads)
    assert_params_equal(host_params(net), host_params(twin_net))
    assert (twin._held is not None) == (cpu_path()[0] == "compiled")


def test_a_single_step_keeps_nothing():
    net, opt, grads = kept_optimizer()
    other = RULES["adam"]()
    other.step(net.params, grads)
    assert other._held is None, "one step: the arrays were not seen twice"


def test_batches_pad_to_the_batch_size_and_refuse_what_they_cannot_index():
    size = numba_optim.BATCH + 1
    ws = [np.zeros(k + 1) for k in range(size)]
    gs = [np.ones((k + 1, 1)) for k in range(size)]
    first, second = numba_optim.batches([ws, gs])
    assert [len(column) for column in first + second] == [numba_optim.BATCH] * 4
    assert [a.size for a in second[0]] == [size] + [0] * (numba_optim.BATCH - 1)
    assert all(np.shares_memory(a, w) for a, w in zip(first[0], ws, strict=False))
    assert numba_optim.batches([[], []]) == []
    unaligned = np.frombuffer(np.zeros(9).tobytes()[1:65], dtype=np.float64)
    read_only = np.zeros(3)
    read_only.flags.writeable = False
    for bad, message in ((unaligned, "aligned"), (read_only, "writeable")):
        with pytest.raises(ValueError, match=message):
            numba_optim.batches([[np.zeros(bad.size), bad]])
    with pytest.raises(ValueError, match="one dtype"):
        numba_optim.batches([[np.zeros(2), np.zeros(2, "float32")],
                             [np.zeros(2), np.zeros(2, "float32")]])


@pytest.mark.parametrize("planted", ["adam_many", "sgd_many"])
def test_a_batched_update_that_disagrees_fails_the_self_check(monkeypatch, planted):
    """A planted bug in the batched call alone (Adam's step size, SGD's momentum) fails the
    self-check, which then keeps the ufunc code for every update."""
    if cpu_path()[0] != "compiled":
        pytest.skip(f"no compiled updates: {cpu_path()[1]}")
    monkeypatch.setattr(selfcheck, "_VERDICTS", {})
    right = getattr(numba_optim, planted)
    if planted == "adam_many":
        monkeypatch.setattr(numba_optim, planted, lambda batch, b1, b2, step, eps: right(
            batch, b1, b2, step * (1 + 1e-3), eps))
    else:
        monkeypatch.setattr(numba_optim, planted, lambda batch, rate, mom, reg, has: right(
            batch, rate, mom * mom, reg, has))
    found = optim._check_compiled(numba_optim, np.ones(1))
    assert found is not None and "in a batch" in found
