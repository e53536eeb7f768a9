"""The reference rows compute what dualtape computes, and every runner runs its workloads.

Small case, float64: the naive numpy LSTM and the torch-autograd one give dualtape's loss,
gradients and updated parameters. No timing.
"""

from __future__ import annotations

import numpy as np
import pytest

import dualtape
from dualtape.benchmarks import naive_lstm
from dualtape.benchmarks.references import reference_runners
from dualtape.benchmarks.workloads import WORKLOADS, lstm_host_params

SIZES = [(5, 7), (7, 5)]
STEPS = 6


def _case(batch: int):
    params = [lstm_host_params(i, o, seed, "float64") for seed, (i, o) in enumerate(SIZES)]
    xs = np.random.default_rng(3).uniform(-1.0, 1.0, size=(STEPS, batch, SIZES[0][0]))
    targets = np.random.default_rng(4).uniform(-1.0, 1.0, size=xs.shape)
    return params, xs, targets


def _dualtape(params, xs, targets):
    """dualtape's loss and gradients (numpy backend), and its parameters after one update."""
    with dualtape.use_backend("numpy"):
        layers = [dualtape.LSTM(i, o, dtype="float64") for i, o in SIZES]
        for layer, p in zip(layers, params, strict=True):
            layer.params = {k: v.copy() for k, v in p.items()}
        tapes, h = [], xs
        for layer in layers:
            tape, _, h = layer.forward_sequence(layer.initial_state(xs.shape[1]), h)
            tapes.append(tape)
        diff = h - targets
        loss = 0.5 * float(np.sum(diff * diff)) / xs.shape[1]
        grads, dh = [], diff / xs.shape[1]
        for layer, tape in zip(layers[::-1], tapes[::-1], strict=True):
            layer_grads, _, dh = layer.backward_sequence(tape, None, dh)
            grads.insert(0, layer_grads)
        net = dualtape.RecurrentNetwork(layers)
        trained = dualtape.train_recurrent(net, xs, targets, dualtape.SGD(rate=0.1))[0]
    assert trained == pytest.approx(loss, rel=1e-12)
    return loss, grads, net.params


def test_naive_matches_dualtape():
    params, xs, targets = _case(batch=1)
    loss, grads, updated = _dualtape(params, xs, targets)
    layers = [naive_lstm.NaiveLSTM(p) for p in params]
    naive_loss, naive_grads = naive_lstm.loss_and_grads(layers, xs[:, 0], targets[:, 0])
    assert naive_loss == pytest.approx(loss, rel=1e-12)
    for mine, theirs in zip(grads, naive_grads, strict=True):
        for key, value in naive_lstm.stacked(theirs).items():
            np.testing.assert_allclose(value, mine[key], rtol=1e-10, atol=1e-12)
    naive_lstm.train_step(layers, xs[:, 0], targets[:, 0], rate=0.1)
    for layer, p in zip(layers, updated, strict=True):
        merged = naive_lstm.stacked({f"{kind}_{g}": store[g] for kind, store in
                                     (("W", layer.w), ("U", layer.u), ("b", layer.b))
                                     for g in store})
        for key, value in merged.items():
            np.testing.assert_allclose(value, p[key], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("batch", [1, 3])
def test_torch_autograd_matches_dualtape(batch):
    torch = pytest.importorskip("torch")
    from dualtape.benchmarks import torch_lstm

    params, xs, targets = _case(batch)
    loss, grads, updated = _dualtape(params, xs, targets)
    net = torch_lstm.GrenadeTorchNetwork(params, rate=0.1)
    value = torch_lstm.grenade_loss(net.layers, torch.tensor(xs), torch.tensor(targets))
    value.backward()
    assert value.item() == pytest.approx(loss, rel=1e-12)
    for mine, layer in zip(grads, net.layers, strict=True):
        for key, tensor in zip("WUb", layer.parameters(), strict=True):
            np.testing.assert_allclose(tensor.grad.numpy(), mine[key], rtol=1e-10, atol=1e-12)
    net.train_step(torch.tensor(xs), torch.tensor(targets))
    for layer, p in zip(net.layers, updated, strict=True):
        for key, tensor in zip("WUb", layer.parameters(), strict=True):
            np.testing.assert_allclose(tensor.detach().numpy(), p[key], rtol=1e-10, atol=1e-12)


def one_per_path() -> list:
    """A workload of each code path a runner's ``prepare`` takes (its op, cell and tape policy;
    the sizes only change the arrays): compiling JAX and warming torch for every size cost
    tens of seconds of the suite and checked nothing more."""
    found: dict[tuple, object] = {}
    for workload in WORKLOADS:
        found.setdefault((workload.op, workload.cell, workload.tape), workload)
    return list(found.values())


@pytest.mark.parametrize("runner", reference_runners(), ids=lambda r: r.label)
def test_reference_runs_its_workloads(runner):
    covered = 0
    for workload in one_per_path():
        run = runner.prepare(workload.smoke(), "float32")
        if run is not None:
            run()
            runner.synchronize()
            covered += 1
    assert covered > 0


@pytest.mark.parametrize("batch", [1, 3])
def test_jax_matches_dualtape(batch):
    pytest.importorskip("jax")
    from dualtape.benchmarks.jax_train import JaxGrenadeNetwork

    params, xs, targets = _case(batch)
    loss, _, updated = _dualtape(params, xs, targets)
    net = JaxGrenadeNetwork(params, xs, rate=0.1)
    value = net.train_step(xs, targets)
    net.block()
    assert float(value) == pytest.approx(loss, rel=1e-12)
    for mine, theirs in zip(updated, net.parameters(), strict=True):
        for key in "WUb":
            np.testing.assert_allclose(theirs[key], mine[key], rtol=1e-10, atol=1e-12)
