"""The CUDA kernels of ``dualtape/kernels/standard_lstm_gru.cu`` (StandardLSTM, GRU), checked
without a GPU.

NVRTC compiles the source (``test_cuda_source.py``, with ``lstm.cu``); g++ compiles the same
text for the host, and ``cupy_standard_lstm_gru``' own loops drive that build (its CuPy calls
answered by numpy, on NaN-guarded buffers) against the generic array-API loops.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dualtape.kernels import cupy_standard_lstm_gru
from dualtape.layers import gru, standard_lstm

from .cuda_tools import HostKernel, PaddedNumpy, build_host_library
from .test_cuda_source import cxx  # noqa: F401  (the fixture that finds the compiler)

pytestmark = pytest.mark.cuda_source
SOURCE = Path(cupy_standard_lstm_gru.__file__).with_name("standard_lstm_gru.cu")
SHIM = Path(__file__).with_name("cuda_host_standard_lstm_gru.cpp")
TOLERANCE = {"float32": 1e-5, "float64": 1e-12}


class GuardedCupy(PaddedNumpy):
    """What ``cupy_standard_lstm_gru`` asks of CuPy, answered by numpy with every new buffer
    NaN-guarded (copies included), so a kernel that reads outside a buffer or what was never
    written gives NaN."""

    def array(self, a: np.ndarray, order: str = "K", copy: bool = True) -> np.ndarray:
        return self.copy_of(np.asarray(a))

    def ascontiguousarray(self, a: np.ndarray) -> np.ndarray:
        return self.copy_of(np.asarray(a))

    def zeros(self, shape: tuple[int, ...], dtype: object) -> np.ndarray:
        out = self.empty(shape, dtype)
        out[...] = 0
        return out


@pytest.fixture(scope="module")
def host_library(cxx, tmp_path_factory):  # noqa: F811
    return build_host_library(cxx, SOURCE, tmp_path_factory.mktemp("cells_host"), SHIM)


@pytest.fixture
def on_the_host(monkeypatch):
    """Point ``cupy_standard_lstm_gru`` at a host build: returns a function taking the library,
    which yields the guarded module its loops then allocate from."""

    def use(library):
        module = GuardedCupy()
        monkeypatch.setattr(cupy_standard_lstm_gru, "_function",
                            lambda kernel, dtype, device: HostKernel(library, kernel, dtype))
        monkeypatch.setattr(cupy_standard_lstm_gru, "_array_module", lambda: module)
        monkeypatch.setattr(cupy_standard_lstm_gru, "_device_id", lambda a: 0)
        return module

    return use


def problem(cell: str, dtype: str, steps: int, batch: int, n: int, seed: int = 0) -> dict:
    """Random host inputs of a cell's two loops, weights scaled by 1/√n as torch draws them."""
    rng = np.random.default_rng(seed)
    gates = 4 if cell == "lstm" else 3
    shapes = {"W_hh": (gates * n, n), "b_hh": (gates * n,), "projected": (steps, batch, gates * n),
              "h": (batch, n), "c": (batch, n), "dhs": (steps, batch, n), "dh": (batch, n),
              "dc": (batch, n)}
    p = {k: rng.uniform(-1, 1, s).astype(dtype) for k, s in shapes.items()}
    p["W_hh"] /= np.sqrt(n).astype(dtype)
    return p


def assert_lstm_matches_generic(module: GuardedCupy, p: dict, dtype: str,
                                need_first: bool = True) -> None:
    W = module.copy_of(p["W_hh"])
    fast = cupy_standard_lstm_gru.standard_lstm_forward(W, module.copy_of(p["projected"]),
                                            module.copy_of(p["h"]), module.copy_of(p["c"]))
    generic = standard_lstm.generic_forward_sequence(np, p["W_hh"], p["projected"], p["h"],
                                                     p["c"])
    _, cells, gates, tanh_cells = fast
    fast += cupy_standard_lstm_gru.standard_lstm_backward(
        W, gates, cells, tanh_cells, module.copy_of(p["dhs"]), module.copy_of(p["dh"]),
        module.copy_of(p["dc"]), need_first)
    generic += standard_lstm.generic_backward_sequence(
        np, p["W_hh"], generic[2], generic[1], generic[3], p["dhs"], p["dh"], p["dc"],
        need_first)
    names = ["hs", "cells", "gates", "tanh_cells", "das", "dh_0", "dc_0"]
    compare(module, names, fast, generic, dtype, skip=() if need_first else ("dh_0",))


def assert_gru_matches_generic(module: GuardedCupy, p: dict, dtype: str,
                               need_first: bool = True) -> None:
    W = module.copy_of(p["W_hh"])
    fast = cupy_standard_lstm_gru.gru_forward(W, module.copy_of(p["b_hh"]),
                                              module.copy_of(p["projected"]),
                                              module.copy_of(p["h"]))
    generic = gru.generic_forward_sequence(np, p["W_hh"], p["b_hh"], p["projected"], p["h"])
    hs, gates, hn = fast
    fast += cupy_standard_lstm_gru.gru_backward(W, gates, hn, hs, module.copy_of(p["dhs"]),
                                    module.copy_of(p["dh"]), need_first)
    generic += gru.generic_backward_sequence(np, p["W_hh"], generic[1], generic[2], generic[0],
                                             p["dhs"], p["dh"], need_first)
    names = ["hs", "gates", "hn", "da_h", "dn", "dh_0"]
    compare(module, names, fast, generic, dtype, skip=() if need_first else ("dh_0",))


def compare(module, names, fast, generic, dtype, skip=()) -> None:
    assert module.guards_intact(), "a kernel wrote outside its buffer"
    for name, x, y in zip(names, fast, generic, strict=True):
        if name not in skip:
            np.testing.assert_allclose(x, y, rtol=TOLERANCE[dtype], atol=TOLERANCE[dtype],
                                       err_msg=name)


CHECKS = {"lstm": assert_lstm_matches_generic, "gru": assert_gru_matches_generic}


@pytest.mark.parametrize("cell", sorted(CHECKS))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("batch", [1, 3, 64])
@pytest.mark.parametrize("n", [5, 80])
def test_the_cupy_loops_on_the_host_build_match_the_generic_loops(
        host_library, on_the_host, cell, dtype, batch, n):
    module = on_the_host(host_library)
    for steps, need_first in ((3, True), (3, False), (1, True)):
        CHECKS[cell](module, problem(cell, dtype, steps, batch, n), dtype, need_first)


@pytest.mark.parametrize("cell", sorted(CHECKS))
def test_grid_stride_covers_more_elements_than_threads(host_library, on_the_host, monkeypatch,
                                                       cell):
    module = on_the_host(host_library)
    monkeypatch.setattr(cupy_standard_lstm_gru, "launch_shape", lambda elements: (2, 3))
    CHECKS[cell](module, problem(cell, "float64", 4, 3, 5, seed=1), "float64")


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_the_fast_loops_pass_the_layers_self_check_on_the_host_build(host_library,
                                                                      on_the_host, cell):
    on_the_host(host_library)
    check = standard_lstm.fast_disagreement if cell == "lstm" else gru.fast_disagreement
    loops = cupy_standard_lstm_gru.STANDARD_LSTM if cell == "lstm" else cupy_standard_lstm_gru.GRU
    assert check(loops, np.ones(1)) is None


PLANTED_BUGS = {
    "the LSTM's o gate read from g": ("dt_sigmoid<T>(row[3 * n + j] + rec[3 * n + j])",
                                      "dt_sigmoid<T>(row[2 * n + j] + rec[3 * n + j])",
                                      "lstm", "hs|cells|gates"),
    "the GRU's bias out of bounds": ("r[row + 2 * n + j] + bias[2 * n + j]",
                                     "r[row + 2 * n + j] + bias[3 * n + j]", "gru",
                                     "nan location mismatch|hs|gates|hn"),
    "a wrong sign in the GRU's dz": ("d * (h[cell] - candidate)", "d * (candidate - h[cell])",
                                     "gru", "da_h"),
}


@pytest.mark.parametrize("bug", sorted(PLANTED_BUGS))
def test_a_planted_bug_fails_the_comparison(cxx, tmp_path, on_the_host, bug):  # noqa: F811
    right, wrong, cell, failure = PLANTED_BUGS[bug]
    source = SOURCE.read_text()
    assert right in source
    planted = tmp_path / "standard_lstm_gru.cu"
    planted.write_text(source.replace(right, wrong))
    module = on_the_host(build_host_library(cxx, planted, tmp_path, SHIM))
    with pytest.raises(AssertionError, match=failure):
        CHECKS[cell](module, problem(cell, "float64", 3, 2, 5), "float64")
