"""The cells and conv groups: dualtape's row and the torch module's row do the same work (the
same gradients from the same weights and data), so their times compare."""

from __future__ import annotations

import numpy as np
import pytest

from dualtape.backend import resolve_backend, to_numpy
from dualtape.benchmarks.references import NNCellRunner, torch_installed
from dualtape.benchmarks.runners import BackendRunner
from dualtape.benchmarks.workloads import WORKLOADS

CELLS = [w for w in WORKLOADS if w.op == "cell"]


def test_the_cells_group_covers_both_new_cells_at_the_main_jobs_sizes():
    assert {w.cell for w in CELLS} == {"StandardLSTM", "GRU"}
    assert all((w.size, w.batch, w.steps) == (80, 32, 50) for w in CELLS)


@pytest.mark.skipif(not torch_installed(), reason="the torch.nn row needs torch")
@pytest.mark.parametrize("workload", CELLS, ids=lambda w: w.key)
def test_the_torch_module_row_computes_dualtapes_gradients(workload):
    import torch

    small = workload.smoke()
    ours = BackendRunner(resolve_backend("numpy")).prepare(small, "float64")()
    grads, dxs = NNCellRunner().prepare(small, "float64")()
    names = ["W_ih", "W_hh", "b_ih", "b_hh"]  # torch's parameter order
    for name, theirs in zip(names, grads, strict=True):
        np.testing.assert_allclose(to_numpy(ours[0][name]), theirs.numpy(), rtol=1e-10,
                                   atol=1e-12)
    np.testing.assert_allclose(to_numpy(ours[1]), dxs.numpy(), rtol=1e-10, atol=1e-12)
    assert isinstance(dxs, torch.Tensor)


CONV = [w for w in WORKLOADS if w.op == "conv"]


@pytest.mark.skipif(not torch_installed(), reason="the torch.nn row needs torch")
@pytest.mark.parametrize("workload", CONV, ids=lambda w: w.key)
def test_the_conv2d_row_computes_dualtapes_gradients(workload):
    ours_grads, ours_dx = BackendRunner(resolve_backend("numpy")).prepare(workload, "float64")()
    grads, dx = NNCellRunner().prepare(workload, "float64")()
    for name in ("W", "b"):
        np.testing.assert_allclose(to_numpy(ours_grads[name]), grads[name].numpy(), rtol=1e-10,
                                   atol=1e-9)
    np.testing.assert_allclose(to_numpy(ours_dx), dx.numpy(), rtol=1e-10, atol=1e-10)


DIGITS = [w for w in WORKLOADS if w.op == "digits"]


@pytest.mark.skipif(not torch_installed(), reason="the torch.nn row needs torch")
@pytest.mark.parametrize("workload", DIGITS, ids=lambda w: w.key)
def test_the_torch_digits_epoch_ends_at_dualtapes_weights(workload):
    params = BackendRunner(resolve_backend("numpy")).prepare(workload, "float64")()
    module = NNCellRunner().prepare(workload, "float64")()
    conv, linear = params[1], params[5]
    for ours, theirs in ((conv["W"], module[0].weight), (conv["b"], module[0].bias),
                         (linear["W"], module[4].weight), (linear["b"], module[4].bias)):
        np.testing.assert_allclose(to_numpy(ours), theirs.detach().numpy(), rtol=1e-9,
                                   atol=1e-10)


@pytest.mark.parametrize("workload", DIGITS, ids=lambda w: w.key)
def test_a_digits_epoch_trains_the_example_network(workload):
    data = workload.host_data("float64")
    run = BackendRunner(resolve_backend("numpy")).prepare_data(workload, data)
    before = [{k: np.array(v) for k, v in group.items()} for group in run()]  # one epoch
    after = run()
    assert len(data["x"]) == 1347 and data["x"].shape[1:] == (1, 8, 8)
    assert all(not np.array_equal(before[k][name], after[k][name])
               for k in (1, 5) for name in ("W", "b"))
