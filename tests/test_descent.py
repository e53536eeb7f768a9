"""train_recurrent's plain SGD inside the backward pass of an LSTM stack
(``planned_backprop.planned_descent``), from given states, with a mask, a strided loss
gradient, and the kernel's refusals."""

from __future__ import annotations

import numpy as np
import pytest

import dualtape
from dualtape.backend import to_numpy
from dualtape.kernels import cpu_path, numba_descent

from .helpers import host_params


class Unfused(dualtape.SGD):
    """The same rule through ``optimizer.step``: the step in the backward pass takes ``SGD``
    itself only."""


def strided_loss(xp, ys, targets):
    """The squared error with its gradient a strided view on numpy (every other column of a
    copy twice as wide): the step in the backward pass takes a C-order copy of it, with the
    same forward pass, loss and bits as of the C-order gradient."""
    value, dys = dualtape.losses.squared_error(xp, ys, targets)
    return value, np.repeat(dys, 2, axis=-1)[..., ::2] if type(dys) is np.ndarray else dys


def stack(sizes, dtype="float64", seed=1):
    return dualtape.RecurrentNetwork([
        dualtape.LSTM(a, b, seed=seed + k, dtype=dtype, init="scaled")
        for k, (a, b) in enumerate(zip(sizes[:-1], sizes[1:], strict=True))])


def fuses_here(backend) -> bool:
    return backend.name == "numpy" and cpu_path()[0] == "compiled"


def train_both(sizes, steps, batch, dtype, calls=2, state=True, loss="squared_error"):
    """Two copies of a stack trained ``calls`` times by ``SGD`` and by ``Unfused``: their
    parameters before and after, whether the first call's losses and states agreed bit for
    bit (the weights differ by rounding after it), and the routes of ``SGD``'s calls."""
    rng = np.random.default_rng(3)
    xs = dualtape.asarray(rng.uniform(-1, 1, (steps, batch, sizes[0])).astype(dtype))
    targets = dualtape.asarray(rng.uniform(-1, 1, (steps, batch, sizes[-1])).astype(dtype))
    states = [dualtape.asarray(rng.uniform(-1, 1, (batch, n)).astype(dtype)) if state else None
              for n in sizes[1:]]
    stepped, unfused = stack(sizes, dtype), stack(sizes, dtype)
    before = host_params(stepped)
    same, routes = None, []
    for _ in range(calls):
        loss_s, ends_s = dualtape.train_recurrent(stepped, xs, targets, dualtape.SGD(0.5),
                                                  state=states, loss=loss)
        routes.append(dualtape.last_route(stepped, "train_recurrent").taken)
        loss_u, ends_u = dualtape.train_recurrent(unfused, xs, targets, Unfused(0.5),
                                                  state=states, loss=loss)
        if same is None:
            same = loss_s == loss_u and all(np.array_equal(to_numpy(a), to_numpy(b))
                                            for a, b in zip(ends_s, ends_u, strict=True))
    return before, host_params(stepped), host_params(unfused), same, routes


def assert_same_step(before, got, want, dtype, still=()):
    """Each weight's move agrees with ``want``'s to rounding, relative to the largest move
    of that weight (a well-conditioned measure: the moves are sums of products); the weights
    named in ``still`` (``U`` from zero states at one step) stay where they were in both."""
    tolerance = 1e-11 if dtype == "float64" else 2e-4
    for k, (b, g, w) in enumerate(zip(before, got, want, strict=True)):
        for name in b:
            moved = np.abs(w[name].astype(np.float64) - b[name]).max()
            error = np.abs(g[name].astype(np.float64) - w[name]).max()
            if name in still:
                assert moved == error == 0, (k, name, error, moved)
                continue
            assert moved > 0 and error <= tolerance * moved, (k, name, error, moved)


@pytest.mark.parametrize("sizes", [(3, 5), (3, 5, 4), (2, 6, 5, 3)], ids=["1", "2", "3"])
@pytest.mark.parametrize(("steps", "batch"), [(1, 1), (1, 4), (9, 1), (6, 3)])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("loss", ["squared_error", strided_loss], ids=["c-order", "strided"])
def test_the_step_in_the_backward_pass_moves_the_weights_as_the_optimizers_step(
        backend, sizes, steps, batch, dtype, loss):
    """From given states, two calls; the forward pass and loss are the same code, so the
    first call's loss and final states agree bit for bit."""
    before, got, want, same, routes = train_both(sizes, steps, batch, dtype, loss=loss)
    assert_same_step(before, got, want, dtype)
    assert same
    assert routes == ["whole-step" if fuses_here(backend) else "layers"] * 2


def test_a_masked_call_moves_the_weights_as_the_optimizers_step(backend):
    """The mask weighs the loss's gradient, which the step in the backward pass takes as the
    optimizer's step does."""
    rng = np.random.default_rng(10)
    xs = dualtape.asarray(rng.uniform(-1, 1, (6, 3, 2)))
    mask = dualtape.asarray(rng.integers(0, 2, (6, 3)).astype(bool))
    stepped, unfused = stack((2, 5, 2)), stack((2, 5, 2))
    before = host_params(stepped)
    dualtape.train_recurrent(stepped, xs, xs, dualtape.SGD(0.5), mask=mask)
    assert dualtape.last_route(stepped, "train_recurrent").taken == (
        "whole-step" if fuses_here(backend) else "layers")
    dualtape.train_recurrent(unfused, xs, xs, Unfused(0.5), mask=mask)
    assert_same_step(before, host_params(stepped), host_params(unfused), "float64")


def test_the_step_of_a_strided_gradient_agrees_with_the_generic_code(backend, monkeypatch):
    rng = np.random.default_rng(4)
    xs = dualtape.asarray(rng.uniform(-1, 1, (7, 2, 3)))
    nets = {}
    for switch in ("0", "1"):
        monkeypatch.setenv("DUALTAPE_FUSED", switch)
        nets[switch] = net = stack((3, 6, 3))
        dualtape.train_recurrent(net, xs, xs, dualtape.SGD(0.5), loss=strided_loss)
    assert_same_step(host_params(stack((3, 6, 3))), host_params(nets["1"]),
                     host_params(nets["0"]), "float64")


def case_network(case: str) -> tuple[dualtape.RecurrentNetwork, dualtape.SGD]:
    """Two LSTMs (and a FullyConnected for ``"fully-connected"``) and the optimizer ``case``
    names (``"momentum"``, ``"regulariser"``, ``"subclass"``; else plain SGD)."""
    layers = [dualtape.LSTM(3, 4, seed=1), dualtape.LSTM(4, 3, seed=2)]
    if case == "fully-connected":
        layers.append(dualtape.FullyConnected(3, 3, seed=3))
    optimizer = {"momentum": dualtape.SGD(0.1, momentum=0.5),
                 "regulariser": dualtape.SGD(0.1, regulariser=0.01),
                 "subclass": Unfused(0.1)}.get(case, dualtape.SGD(0.1))
    return dualtape.RecurrentNetwork(layers), optimizer


PLANNED_HERE = ("momentum", "regulariser", "subclass", "sqrt-tape", "ids", "fully-connected")
"""The cases the planned pass takes (its gradients, then the optimizer's step)."""


@pytest.mark.parametrize("case", ["momentum", "regulariser", "subclass", "sqrt-tape", "ids",
                                  "fully-connected", "learn-initial-state", "ufunc-loop"])
def test_the_other_calls_step_through_the_optimizer(backend, monkeypatch, case):
    """None of these moves the weights inside the backward pass, as the record says and
    ``route`` foresaw; each still trains (the loss is finite, the weights move): those of the
    planned pass's settings take it (with inputs of another dtype than the float32 weights,
    prepared first), the others the layers."""
    rng = np.random.default_rng(5)
    net, optimizer = case_network(case)
    xs = dualtape.asarray(rng.uniform(-1, 1, (4, 2, 3)))
    inputs = dualtape.asarray(rng.integers(0, 3, (4, 2))) if case == "ids" else xs
    if case == "ufunc-loop":
        monkeypatch.setenv("DUALTAPE_JIT", "0")
    state = [dualtape.asarray(np.zeros((2, n))) for n in (4, 3)]
    before = host_params(net)
    options = {"tape": "sqrt" if case == "sqrt-tape" else "full", "state": state,
               "learn_initial_state": case == "learn-initial-state"}
    foreseen = dualtape.route(net, inputs, xs, optimizer=optimizer, **options)
    loss, _ = dualtape.train_recurrent(net, inputs, xs, optimizer, **options)
    took = dualtape.last_route(net, "train_recurrent")
    planned = case in PLANNED_HERE and fuses_here(backend)
    assert np.isfinite(loss) and took == foreseen and "whole-step" in dict(took.declined)
    assert took.taken == ("planned" if planned else "layers")
    assert not np.array_equal(host_params(net)[0]["U"], before[0]["U"])


def small_operands(dtype="float64", rows=3, n=2, i=4):
    rng = np.random.default_rng(8)

    def draw(*shape):
        return rng.standard_normal(shape).astype(dtype)

    return (draw(4 * n, i), draw(3 * n, n), draw(4 * n), draw(rows, i), draw(rows, n),
            (draw(rows, 2 * n), draw(rows, n), draw(rows, n)), draw(rows, i))


@pytest.mark.parametrize("bad", ["float16", "mixed", "strided", "shape", "read-only"])
def test_the_compiled_step_refuses_what_it_cannot_index(bad):
    W, U, b, xs, cells, blocks, dxs = small_operands()
    if bad == "float16":
        W, U, b = (a.astype(np.float16) for a in (W, U, b))
    elif bad == "mixed":
        xs = xs.astype(np.float32)
    elif bad == "strided":
        cells = np.repeat(cells, 2, axis=1)[:, ::2]
    elif bad == "shape":
        dxs = dxs[:, :-1].copy()
    else:
        W.flags.writeable = False
    with pytest.raises(ValueError, match="numba_descent"):
        numba_descent.descend(W, U, b, xs, cells, blocks, dxs, 0.1)
