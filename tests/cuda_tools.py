"""Compile ``lstm.cu`` without a GPU: NVRTC for the device, g++ for the host (through ctypes).

Each finder returns the tool or the reason it is missing, so tests skip with that reason.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import importlib.util
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np

from dualtape.kernels import cupy_lstm
from dualtape.kernels.lstm_sequence import StepwiseCell

HOST_SHIM = Path(__file__).with_name("cuda_host_lstm.cpp")
MATH_FILE = Path(cupy_lstm.__file__).with_name("cell_math.cuh")


def find_nvrtc() -> tuple[ctypes.CDLL | None, str]:
    """NVRTC from the ``nvidia-cuda-nvrtc`` wheel, the system or a CUDA toolkit."""
    candidates = []
    spec = importlib.util.find_spec("nvidia")
    for root in spec.submodule_search_locations if spec else []:
        candidates += sorted(glob.glob(os.path.join(root, "*", "lib", "libnvrtc.so*")))
    system = ctypes.util.find_library("nvrtc")
    candidates += [system] if system else []
    candidates += sorted(glob.glob("/usr/local/cuda*/lib64/libnvrtc.so*"))
    for path in candidates:
        if "builtins" in path:
            continue
        try:
            return ctypes.CDLL(path), path
        except OSError:
            continue
    return None, "no NVRTC library: pip install nvidia-cuda-nvrtc (Linux) or a CUDA toolkit"


def nvrtc_compile(
    lib: ctypes.CDLL, source: str, arch: str, names: list[str]
) -> tuple[int, str, dict]:
    """Compile ``source`` for ``arch`` (e.g. ``"sm_90"``): ``(result code, log, lowered names)``."""
    program = ctypes.c_void_p()
    check = _nvrtc_checker(lib)
    check(lib.nvrtcCreateProgram(ctypes.byref(program), source.encode(), b"lstm.cu", 0, None,
                                 None))
    try:
        for name in names:
            check(lib.nvrtcAddNameExpression(program, name.encode()))
        options = [f"--gpu-architecture={arch}".encode(), b"--std=c++11"]
        result = lib.nvrtcCompileProgram(program, len(options),
                                         (ctypes.c_char_p * len(options))(*options))
        size = ctypes.c_size_t()
        check(lib.nvrtcGetProgramLogSize(program, ctypes.byref(size)))
        log = ctypes.create_string_buffer(size.value)
        check(lib.nvrtcGetProgramLog(program, log))
        lowered = {}
        if result == 0:
            for name in names:
                out = ctypes.c_char_p()
                check(lib.nvrtcGetLoweredName(program, name.encode(), ctypes.byref(out)))
                lowered[name] = out.value.decode()
        return result, log.value.decode(errors="replace").strip(), lowered
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(program))


def _nvrtc_checker(lib: ctypes.CDLL) -> Any:
    lib.nvrtcGetErrorString.restype = ctypes.c_char_p

    def check(code: int) -> None:
        if code != 0:
            raise RuntimeError(f"NVRTC: {lib.nvrtcGetErrorString(code).decode()}")

    return check


def find_cxx() -> tuple[str | None, str]:
    """The system C++ compiler."""
    for name in (os.environ.get("CXX", ""), "g++", "c++", "clang++"):
        if name and shutil.which(name):
            return shutil.which(name), name
    return None, "no C++ compiler (g++, c++ or clang++) on PATH"


def build_host_library(cxx: str, cu_file: Path, out_dir: Path,
                       shim: Path = HOST_SHIM) -> ctypes.CDLL:
    """``cu_file`` compiled for the host through ``shim`` (which includes it as ``CU_FILE``,
    after the package's ``cell_math.cuh`` as ``MATH_FILE``) with warnings as errors, loaded
    with ctypes."""
    target = out_dir / f"{cu_file.stem}_host.so"
    command = [cxx, "-std=c++11", "-O2", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC",
               f'-DMATH_FILE="{MATH_FILE}"', f'-DCU_FILE="{cu_file}"', str(shim), "-o",
               str(target)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)}\n{done.stderr}")
    return ctypes.CDLL(str(target))


class HostCell(StepwiseCell):
    """A ``Cell`` that runs the host build of the CUDA kernels on numpy arrays, launched with
    ``grid`` x ``block`` emulated threads; checks each operand is C-contiguous of one dtype."""

    def __init__(self, library: ctypes.CDLL, dtype: str, grid: int | None = None,
                 block: int = 64) -> None:
        ctype = {"float32": "float", "float64": "double"}[dtype]
        self._forward = getattr(library, f"lstm_forward_{ctype}")
        self._backward = getattr(library, f"lstm_backward_{ctype}")
        self.dtype, self.grid, self.block = np.dtype(dtype), grid, block

    def _pointer(self, a: np.ndarray) -> ctypes.c_void_p:
        assert a.dtype == self.dtype and a.flags.c_contiguous, (a.dtype, a.strides)
        return ctypes.c_void_p(a.ctypes.data)

    def _rows(self, a: np.ndarray) -> list[ctypes.c_void_p]:
        self._pointer(a)
        return [ctypes.c_void_p(a.ctypes.data + t * a.strides[0]) for t in range(a.shape[0])]

    def _launch(self, batch: int, n: int) -> tuple[ctypes.c_int, ...]:
        grid = self.grid or -(-batch * n // self.block)
        return tuple(ctypes.c_int(v) for v in (grid, self.block, batch, n))

    def forward_steps(self, U_fi, projected, r, cells, gates):
        head = self._launch(*cells.shape[1:])
        a, c, g, rr = self._rows(projected), self._rows(cells), self._rows(gates), self._pointer(r)

        def step(t: int, alive=(projected, r, cells, gates)) -> None:  # keeps the memory alive
            np.dot(cells[t], U_fi.T, r)
            self._forward(*head, a[t], rr, c[t], g[t], c[t + 1])

        return step

    def backward_steps(self, U_fi, gates, rec, q, carry, dfi, dc):
        head = self._launch(*carry.shape)
        g, q_t, factors, d = (self._rows(x) for x in (gates, q, dfi, dc))
        rec_p, carry_p = self._pointer(rec), self._pointer(carry)

        def step(t: int, alive=(gates, rec, q, carry, dfi, dc)) -> None:
            self._backward(*head, g[t], rec_p, q_t[t], carry_p, factors[t], d[t])
            if t:
                np.dot(dfi[t], U_fi, rec)

        return step


class HostKernel:
    """A stand-in for a CuPy ``RawKernel`` of ``lstm.cu`` that calls its host build: called as
    ``kernel(grid, block, (batch, n, *arrays))`` on numpy arrays, exactly as ``CupyLSTM`` calls
    the real one, so the Python side's argument order meets the kernel's signature."""

    def __init__(self, library: ctypes.CDLL, kernel: str, dtype: str) -> None:
        ctype = {"float32": "float", "float64": "double"}[dtype]
        self._function = getattr(library, f"{kernel}_{ctype}")

    def __call__(self, grid: tuple, block: tuple, args: tuple) -> None:
        batch, n, *arrays = args
        self._function(ctypes.c_int(grid[0]), ctypes.c_int(block[0]), ctypes.c_int(int(batch)),
                       ctypes.c_int(int(n)), *(ctypes.c_void_p(a.ctypes.data) for a in arrays))


def writes_per_element(library: ctypes.CDLL, kernel: str, dtype: str, grid: int, block: int,
                       batch: int, n: int) -> np.ndarray:
    """How many blocks of a ``grid`` x ``block`` launch of ``lstm.cu``'s ``kernel`` (its host
    build) write each (b, j) element of its write-only output (the forward's next cells, the
    backward's cell gradients), each block run alone on that output poisoned with NaN: 1
    everywhere when the blocks share the elements out, more where one redoes another's (which
    a sequential emulation cannot see in the results of an idempotent kernel)."""
    rng = np.random.default_rng(0)
    widths = {"lstm_forward": (4, 2, 1, 4, 1), "lstm_backward": (4, 1, 1, 1, 2, 1)}[kernel]
    args = [rng.uniform(-1, 1, (batch, w * n)).astype(dtype) for w in widths]
    out, run = args[-1], HostKernel(library, kernel, dtype)
    counts = np.zeros(out.shape, dtype=int)
    try:
        for b in range(grid):
            library.dt_run_only_block(ctypes.c_int(b))
            out[...] = np.nan
            run((grid,), (block,), (batch, n, *args))
            counts += ~np.isnan(out)
    finally:
        library.dt_run_only_block(ctypes.c_int(-1))
    return counts


class PaddedNumpy:
    """numpy, except that every buffer it allocates sits between bands of NaN and starts as NaN:
    a kernel that reads out of bounds, or reads what was never written, produces NaN."""

    GUARD = 64

    def __init__(self) -> None:
        self.buffers: list[np.ndarray] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(np, name)

    def empty(self, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        size = int(np.prod(shape))
        whole = np.full(size + 2 * self.GUARD, np.nan, dtype=dtype)
        self.buffers.append(whole)
        return whole[self.GUARD : self.GUARD + size].reshape(shape)

    def copy_of(self, a: np.ndarray) -> np.ndarray:
        out = self.empty(a.shape, a.dtype)
        out[...] = a
        return out

    def array(self, a: np.ndarray, copy: bool = True) -> np.ndarray:
        return self.copy_of(np.asarray(a))

    def empty_like(self, a: np.ndarray) -> np.ndarray:
        return self.empty(a.shape, a.dtype)

    def zeros_like(self, a: np.ndarray) -> np.ndarray:
        out = self.empty(a.shape, a.dtype)
        out[...] = 0
        return out

    def guards_intact(self) -> bool:
        """No buffer was written outside its bounds."""
        return all(np.isnan(b[: self.GUARD]).all() and np.isnan(b[-self.GUARD :]).all()
                   for b in self.buffers)
