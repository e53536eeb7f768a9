"""The CUDA kernels of ``dualtape/kernels/lstm.cu``, checked without a GPU.

NVRTC compiles the source, and ``standard_lstm_gru.cu`` (StandardLSTM and GRU,
``test_cuda_standard_lstm_gru.py``), for sm_90 (H200) and sm_80, float and double, with no
warning; g++ compiles the same text for the host, and the sequence loop CuPy uses drives that
build, on NaN-guarded buffers, against the generic array-API code.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dualtape.kernels import cupy_lstm, cupy_standard_lstm_gru
from dualtape.kernels import lstm_sequence as loops
from dualtape.layers.lstm import (
    generic_backward_sequence,
    generic_forward_sequence,
    lstm_cell_backward,
    lstm_cell_forward,
)

from .cuda_tools import (
    HostCell,
    HostKernel,
    PaddedNumpy,
    build_host_library,
    find_cxx,
    find_nvrtc,
    nvrtc_compile,
    writes_per_element,
)

pytestmark = pytest.mark.cuda_source
SOURCE = Path(cupy_lstm.__file__).with_name("lstm.cu")
TOLERANCE = {"float32": 1e-5, "float64": 1e-12}


def missing(reason: str) -> None:
    """Skip with ``reason``; fail instead where the tools must be there (CI sets
    DUALTAPE_REQUIRE_CUDA_SOURCE=1, so these checks cannot quietly stop running)."""
    if os.environ.get("DUALTAPE_REQUIRE_CUDA_SOURCE") == "1":
        pytest.fail(f"DUALTAPE_REQUIRE_CUDA_SOURCE=1 but {reason}")
    pytest.skip(reason)


def required(found: tuple) -> Any:
    """The tool of a ``(tool, why)`` lookup, or ``missing(why)`` when it is None."""
    tool, why = found
    if tool is None:
        missing(why)
    return tool


@pytest.fixture(scope="module")
def nvrtc():
    return required(find_nvrtc())


@pytest.fixture(scope="module")
def cxx():
    return required(find_cxx())


@pytest.fixture(scope="module")
def host_library(cxx, tmp_path_factory):
    return build_host_library(cxx, SOURCE, tmp_path_factory.mktemp("lstm_host"))


@pytest.mark.parametrize("module", [cupy_lstm, cupy_standard_lstm_gru],
                         ids=["lstm.cu", "standard_lstm_gru.cu"])
@pytest.mark.parametrize("arch", ["sm_90", "sm_80"])
def test_nvrtc_compiles_every_instance_without_warnings(nvrtc, arch, module):
    names = module.name_expressions()
    assert sorted(names) == sorted(f"{k}<{t}>" for k in module.KERNELS
                                   for t in ("float", "double"))
    result, log, lowered = nvrtc_compile(nvrtc, module.source(), arch, names)
    assert result == 0, log
    assert log == "", f"NVRTC printed:\n{log}"
    assert set(lowered) == set(names)


def test_missing_tools_fail_where_they_are_required(monkeypatch):
    monkeypatch.setenv("DUALTAPE_REQUIRE_CUDA_SOURCE", "1")
    with pytest.raises(pytest.fail.Exception, match="no NVRTC"):
        missing("no NVRTC library")
    monkeypatch.delenv("DUALTAPE_REQUIRE_CUDA_SOURCE")
    with pytest.raises(pytest.skip.Exception):
        missing("no NVRTC library")


def test_nvrtc_reports_a_broken_source(nvrtc):
    result, log, _ = nvrtc_compile(nvrtc, cupy_lstm.source().replace("const T d =", "T d ="
                                   " undefined_name +"), "sm_90", cupy_lstm.name_expressions())
    assert result != 0 and "undefined_name" in log


def random_problem(dtype: str, steps: int, batch: int, n: int, seed: int = 0) -> dict:
    """Host inputs of the two sequence loops; U scaled so the gates are not saturated."""
    rng = np.random.default_rng(seed)
    shapes = {"U": (3 * n, n), "c0": (batch, n), "projected": (steps, batch, 4 * n),
              "dhs": (steps, batch, n), "dc_last": (batch, n)}
    p = {k: rng.uniform(-1, 1, s).astype(dtype) for k, s in shapes.items()}
    p["U"] /= np.sqrt(n).astype(dtype)
    return p


def assert_host_build_matches_generic(cell: HostCell, p: dict, dtype: str,
                                      need_dc0: bool = True) -> None:
    mod = PaddedNumpy()
    U, c0, projected = (mod.copy_of(p[k]) for k in ("U", "c0", "projected"))
    cells, gates, hs = loops.forward_sequence(mod, cell, U, c0, projected)
    blocks, dc0 = loops.backward_sequence(mod, cell, U, cells, gates, mod.copy_of(p["dhs"]),
                                          mod.copy_of(p["dc_last"]), need_dc0)
    das = np.concatenate(blocks, axis=-1)
    g_cells, g_gates, g_hs = generic_forward_sequence(np, p["U"], p["c0"], p["projected"])
    g_das, g_dc0 = generic_backward_sequence(np, p["U"], g_cells, g_gates, p["dhs"],
                                             p["dc_last"])
    assert mod.guards_intact(), "a kernel wrote outside its buffer"
    if not need_dc0:
        assert dc0 is None
        dc0 = g_dc0 = np.zeros(())
    tolerance = TOLERANCE[dtype]
    for name, fused, generic in (("cells", cells, g_cells), ("gates", gates, g_gates),
                                 ("hs", hs, g_hs), ("das", das, g_das), ("dc_0", dc0, g_dc0)):
        np.testing.assert_allclose(fused, generic, rtol=tolerance, atol=tolerance, err_msg=name)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("batch", [1, 3, 64])
@pytest.mark.parametrize("n", [5, 512])
def test_host_build_in_the_sequence_loop_matches_the_generic_loop(host_library, dtype, batch,
                                                                  n):
    p = random_problem(dtype, steps=3, batch=batch, n=n)
    assert_host_build_matches_generic(HostCell(host_library, dtype), p, dtype)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_grid_stride_covers_more_elements_than_threads(host_library, dtype):
    p = random_problem(dtype, steps=4, batch=3, n=5, seed=1)
    assert_host_build_matches_generic(HostCell(host_library, dtype, grid=2, block=3), p, dtype)


@pytest.mark.parametrize("kernel", cupy_lstm.KERNELS)
@pytest.mark.parametrize("grid, block, batch, n", [
    (2, 3, 3, 5), (1, 4, 3, 5), (4, 4, 3, 5), (5, 4, 3, 5),
    (*cupy_lstm.launch_shape(64 * 512), 64, 512)])
def test_each_element_is_written_by_exactly_one_block(host_library, kernel, grid, block, batch,
                                                      n):
    """The grid-stride loop steps by the whole grid: a block that steps by its own size only
    redoes the elements of the blocks after it (the same values, so only counting shows it)."""
    counts = writes_per_element(host_library, kernel, "float32", grid, block, batch, n)
    assert (counts == 1).all(), f"elements written {counts.max()} times, or never"


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("batch", [1, 3, 64])
@pytest.mark.parametrize("n", [5, 512])
def test_host_build_step_matches_the_generic_cell(host_library, dtype, batch, n):
    rng = np.random.default_rng(2)
    a = rng.uniform(-2, 2, (batch, 4 * n)).astype(dtype)
    c, dc_next, dh = (rng.uniform(-1, 1, (batch, n)).astype(dtype) for _ in range(3))
    U = (rng.uniform(-1, 1, (3 * n, n)) / np.sqrt(n)).astype(dtype)
    cell = HostCell(host_library, dtype)
    gates, c_next, _ = lstm_cell_forward(np, a, c @ U.T, c)
    fused_gates = np.full((1, *gates.shape), np.nan, dtype=dtype)
    fused_gates[0, :, 3 * n :] = np.tanh(a[:, 3 * n :])
    fused_cells = np.full((2, *c.shape), np.nan, dtype=dtype)
    fused_cells[0] = c
    r = np.empty((batch, 2 * n), dtype=dtype)
    cell.forward_steps(U[: 2 * n], a[np.newaxis], r, fused_cells, fused_gates)(0)
    tolerance = TOLERANCE[dtype]
    np.testing.assert_allclose(fused_gates[0, :, : 2 * n], gates[:, : 2 * n], rtol=tolerance,
                               atol=tolerance)
    np.testing.assert_allclose(fused_cells[1], c_next, rtol=tolerance, atol=tolerance)

    f, i, o, g = (gates[:, k * n : (k + 1) * n] for k in range(4))
    da, dc_direct = lstm_cell_backward(np, gates, c, c_next, dh, dc_next)
    dfi = np.concatenate([c * f * (1 - f), g * i * (1 - i)], axis=-1)[np.newaxis]
    carry, d, rec = dc_next.copy(), np.full((1, *c.shape), np.nan, dtype=dtype), np.zeros_like(c)
    cell.backward_steps(U[: 2 * n], gates[np.newaxis], rec, (dh * o)[np.newaxis], carry, dfi,
                        d)(0)
    np.testing.assert_allclose(dfi[0], da[:, : 2 * n], rtol=tolerance, atol=tolerance)
    np.testing.assert_allclose(carry, dc_direct, rtol=tolerance, atol=tolerance)
    assert not rec.any(), "step 0 leaves the first cell's recurrent product to the loop"


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_cupy_cell_calls_the_kernels_with_their_signature(host_library, monkeypatch, dtype):
    """CupyLSTM's own code, with the compiled CUDA functions swapped for their host build and
    cupy.dot for numpy's: its launches must compute what the generic loops do."""
    monkeypatch.setattr(cupy_lstm, "_function",
                        lambda kernel, dtype, device: HostKernel(host_library, kernel, dtype))
    monkeypatch.setattr(cupy_lstm, "_dot", lambda: np.dot)
    monkeypatch.setattr(cupy_lstm, "_device_id", lambda a: 0)
    for steps, need_dc0 in ((3, True), (3, False), (1, False)):  # training asks for no dc_0
        p = random_problem(dtype, steps=steps, batch=3, n=5, seed=4)
        assert_host_build_matches_generic(cupy_lstm.CupyLSTM(), p, dtype, need_dc0)


PLANTED_BUGS = {
    "a wrong gate offset": ("a[row + n + j] + r[rec + n + j]",
                            "a[row + 2 * n + j] + r[rec + n + j]", 3, "cells|gates"),
    "an out-of-bounds read": ("const T d = carry[cell] + rec[cell] + q[cell];",
                              "const T d = carry[cell] + rec[cell + n] + q[cell];", 1,
                              "nan location mismatch"),
}


@pytest.mark.parametrize("bug", sorted(PLANTED_BUGS))
def test_a_planted_bug_fails_the_comparison(cxx, tmp_path, bug):
    right, wrong, batch, failure = PLANTED_BUGS[bug]
    source = SOURCE.read_text()
    assert right in source
    planted = tmp_path / "lstm.cu"
    planted.write_text(source.replace(right, wrong))
    library = build_host_library(cxx, planted, tmp_path)
    p = random_problem("float64", steps=3, batch=batch, n=5)
    with pytest.raises(AssertionError, match=failure):
        assert_host_build_matches_generic(HostCell(library, "float64"), p, "float64")
