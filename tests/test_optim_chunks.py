"""Large in-place numpy updates run in cache-sized passes: the same result as the generic code.
(Plain SGD's BLAS pass is switched off here; ``test_blas.py`` tests it.)"""

from __future__ import annotations

import numpy as np
import pytest

import dualtape
from dualtape import optim
from dualtape.kernels import cpu_path

from .conftest import np64

OPTIMIZERS = {
    "sgd": lambda: dualtape.SGD(0.1),
    "sgd-momentum-l2": lambda: dualtape.SGD(0.1, momentum=0.9, regulariser=0.01),
    "adam": lambda: dualtape.Adam(0.01),
}


SHAPES = {"rows": (3, optim.CHUNK + 7), "one-left": (2 * optim.CHUNK + 1,)}
"""Three passes and a short last one, over rows; two passes and a last one of one element."""


def run(make, backend, shape, steps=3):
    rng = np.random.default_rng(5)
    params = [{"w": dualtape.asarray(rng.normal(size=shape))}]
    optimizer = make()
    for _ in range(steps):
        optimizer.step(params, [{"w": dualtape.asarray(rng.normal(size=shape))}])
    return np64(params[0]["w"])


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_chunked_updates_equal_the_generic_code(backend, monkeypatch, name, shape):
    shape, passes = SHAPES[shape], []
    update = OPTIMIZERS[name]().__class__._update_in_place

    def counted(self, mod, w, g, slot, scratch):
        passes.append(w.size)
        update(self, mod, w, g, slot, scratch)

    monkeypatch.setattr(optim.blas, "axpy", lambda a, x, y: False)
    run(OPTIMIZERS[name], backend, shape)  # the compiled updates' self-check, before counting
    monkeypatch.setattr(type(OPTIMIZERS[name]()), "_update_in_place", counted)
    fast = run(OPTIMIZERS[name], backend, shape)
    if backend.name == "numpy":
        big = int(np.prod(shape))
        if name != "sgd" and cpu_path()[0] == "compiled":  # test_optim_compiled.py's
            assert passes == [big], passes  # only the first step, which creates the slots
        else:
            chunked_steps = 3 if name == "sgd" else 2  # the first step creates the slots whole
            assert passes.count(optim.CHUNK) == big // optim.CHUNK * chunked_steps, passes
            assert sum(passes) == 3 * big
    monkeypatch.setenv("DUALTAPE_FUSED", "0")
    np.testing.assert_array_equal(fast, run(OPTIMIZERS[name], backend, shape))


@pytest.mark.parametrize("shift", [1, -1], ids=["gradient-ahead", "gradient-behind"])
@pytest.mark.parametrize("sgd", [{}, {"momentum": 0.9}], ids=["plain", "momentum"])
def test_sgd_with_a_gradient_overlapping_its_parameter_matches_numpy(shift, sgd):
    """A gradient that is a shifted view of its own parameter gets numpy's semantics (the
    whole gradient read before the parameter changes), not the element order of BLAS or of
    cache-sized passes."""
    with dualtape.use_backend("numpy"):
        results = []
        for fused in ("1", "0"):
            both = np.arange(2 * optim.CHUNK + 1, dtype=np.float64)
            w, g = (both[:-1], both[1:]) if shift == 1 else (both[1:], both[:-1])
            params = [{"w": w}]
            with pytest.MonkeyPatch.context() as patch:
                patch.setenv("DUALTAPE_FUSED", fused)
                dualtape.SGD(0.5, **sgd).step(params, [{"w": g}])
            results.append(params[0]["w"].copy())
        np.testing.assert_array_equal(*results)


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_updates_in_passes_keep_no_parameter_sized_scratch(name):
    """Only the whole-array path needs a scratch as large as the parameter: a large numpy
    parameter updated in passes (or by BLAS) keeps none once its slots exist; a small one keeps
    its own."""
    rng = np.random.default_rng(6)
    params = [{"big": rng.normal(size=optim.CHUNK + 1), "small": rng.normal(size=8)}]
    optimizer = OPTIMIZERS[name]()
    for _ in range(2):  # the first step of a stateful optimizer creates its slots whole
        optimizer.step(params, [{k: rng.normal(size=v.shape) for k, v in params[0].items()}])
    assert set(optimizer._scratch) == {(0, "small")}
