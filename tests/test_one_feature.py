"""A forecaster's shapes: a recurrent cell on one input feature (``project_sequence``: the
outer product where BLAS's product of inner size 1 is slow) and a ``FullyConnected`` to one
output (its input gradient as a broadcast product), bit for bit against the matrix products on
every backend and both dtypes, and a whole training call on the record's route against the
generic code."""

from __future__ import annotations

import numpy as np
import pytest

import dualtape
from dualtape import GRU, FullyConnected, StandardLSTM
from dualtape.backend import namespace_of, to_numpy
from dualtape.kernels import cpu_path, numba_outer, outer_loops
from dualtape.layers.linear_algebra import (
    EINSUM_MIN,
    _check_outer,
    project_sequence,
    sequence_product,
)

DTYPES = ["float32", "float64"]
CELLS = [StandardLSTM, GRU]


def fast_here(backend) -> bool:
    return backend.name == "numpy" and cpu_path()[0] == "compiled"


@pytest.fixture
def outer_calls(monkeypatch):
    """The output shapes of the compiled outer product's calls (where it runs), after its
    self-checks."""
    if cpu_path()[0] == "compiled":
        for dtype in DTYPES:
            assert outer_loops(np.ones(1, dtype), _check_outer) is numba_outer
    seen, right = [], numba_outer.outer
    monkeypatch.setattr(numba_outer, "outer", lambda a, b, out: seen.append(out.shape) or right(
        a, b, out))
    return seen


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", CELLS, ids=lambda k: k.kind)
@pytest.mark.parametrize("n_in,steps", [(1, 12), (1, 2), (3, 12)])
def test_the_projection_is_the_matrix_products_bit_for_bit(backend, outer_calls, kind, dtype,
                                                           n_in, steps):
    """At one feature the outer product (compiled from ``EINSUM_MIN`` entries on, numpy's
    below), at three the matrix product: the same bits as the matrix product and the bias."""
    rng = np.random.default_rng(3)
    layer = kind(n_in, 32, seed=5, dtype=dtype)
    xs = dualtape.asarray(rng.standard_normal((steps, 8, n_in)).astype(dtype))
    b = layer.params["b_ih"] * 3
    xp = namespace_of(xs)
    got = project_sequence(xp, xs, layer.params["W_ih"], b)
    expected = sequence_product(xp, xs, layer.params["W_ih"].T) + b
    assert got.shape == (steps, 8, kind.gates * 32) and got.dtype == expected.dtype
    np.testing.assert_array_equal(to_numpy(got), to_numpy(expected))
    compiled = fast_here(backend) and n_in == 1 and steps * 8 * kind.gates * 32 >= EINSUM_MIN
    assert outer_calls == ([(steps * 8, kind.gates * 32)] if compiled else [])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n_out", [1, 3])
def test_the_input_gradient_is_dy_w_bit_for_bit(backend, dtype, n_out):
    rng = np.random.default_rng(4)
    layer = FullyConnected(5, n_out, seed=2, dtype=dtype)
    x = dualtape.asarray(rng.standard_normal((7, 5)).astype(dtype))
    dy = dualtape.asarray(rng.standard_normal((7, n_out)).astype(dtype))
    tape, _ = layer.forward(x)
    _, dx = layer.backward(tape, dy)
    np.testing.assert_array_equal(to_numpy(dx), to_numpy(dy @ layer.params["W"]))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", CELLS, ids=lambda k: k.kind)
def test_a_forecasters_call_says_its_route_and_agrees_with_the_generic_code(
        backend, monkeypatch, kind, dtype):
    """``backpropagate_sequence`` of ``[kind(1, 32), FullyConnected(32, 1)]`` with the loss at
    the last step through a mask: the planned pass on the compiled loops where they run (the
    record says so), the loss and gradients those of the generic code to rounding."""
    rng = np.random.default_rng(6)
    xs = rng.standard_normal((12, 8, 1)).astype(dtype)
    targets = rng.standard_normal((12, 8, 1)).astype(dtype)
    mask = np.zeros(12, dtype=bool)
    mask[-1] = True

    def run():
        net = dualtape.RecurrentNetwork([kind(1, 32, seed=1, dtype=dtype),
                                         FullyConnected(32, 1, seed=2, dtype=dtype)])
        found = dualtape.backpropagate_sequence(net, dualtape.asarray(xs),
                                                dualtape.asarray(targets),
                                                mask=dualtape.asarray(mask))
        took = dualtape.last_route(net, "backpropagate_sequence")
        return float(found.loss), [{k: to_numpy(v) for k, v in g.items()} for g in found.grads
                                   ], took

    loss, grads, took = run()
    assert took.taken == ("planned" if fast_here(backend) else "layers")
    assert took.loops == ("compiled" if fast_here(backend) else took.loops)
    monkeypatch.setenv("DUALTAPE_FUSED", "0")
    generic_loss, generic_grads, generic_took = run()
    assert generic_took.loops == "generic"
    tol = {"rtol": 2e-5, "atol": 1e-6} if dtype == "float32" else {"rtol": 1e-12, "atol": 1e-14}
    assert loss == pytest.approx(generic_loss, rel=tol["rtol"])
    for g, r in zip(grads, generic_grads, strict=True):
        for k in r:
            np.testing.assert_allclose(g[k], r[k], err_msg=k, **tol)
