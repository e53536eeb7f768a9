"""The pointwise LSTM step on CuPy: one kernel of ``lstm.cu`` per step and direction.

``lstm.cu`` ships as package data and is compiled once per process by ``cupy.RawModule``, for
float and double through ``name_expressions``; each function is looked up on first use. Before
the first fused sequence on a device and dtype, ``verified`` runs one small step through the
kernels and through the generic code and compares them: on a mismatch it warns once and the
caller falls back to the generic path.
"""

from __future__ import annotations

import functools
import importlib.resources
from collections.abc import Callable
from typing import Any

import numpy as np

from . import selfcheck
from .lstm_sequence import StepwiseCell

Array = Any
BLOCK = 256
KERNELS = ("lstm_forward", "lstm_backward")
_DTYPES = {"float32": "float", "float64": "double"}


def cuda_source(name: str) -> str:
    """What NVRTC compiles for the kernels of ``name`` (a ``.cu`` file of this package):
    ``cell_math.cuh``, the functions all cells share, then the file."""
    files = importlib.resources.files(__package__)
    return "".join(files.joinpath(f).read_text("utf-8") for f in ("cell_math.cuh", name))


def source() -> str:
    """The CUDA source of the LSTM kernels."""
    return cuda_source("lstm.cu")


def name_expressions() -> list[str]:
    """Every template instance the module compiles: each kernel for float and double."""
    return [f"{kernel}<{ctype}>" for kernel in KERNELS for ctype in _DTYPES.values()]


def launch_shape(elements: int, block: int = BLOCK) -> tuple[int, int]:
    """``(grid, block)`` covering ``elements`` threads (the kernels stride over any rest)."""
    return max(1, min(-(-elements // block), 65535)), block


@functools.cache
def _module() -> Any:
    import cupy

    return cupy.RawModule(code=source(), options=("--std=c++11",),
                          name_expressions=name_expressions())


def _dot() -> Any:
    import cupy

    return cupy.dot


def _device_id(a: Array) -> int:
    return a.device.id


@functools.cache
def _function(kernel: str, dtype: str, device: int) -> Any:
    """The kernel for ``dtype``, loaded on ``device`` (looked up on first use)."""
    return _module().get_function(f"{kernel}<{_DTYPES[dtype]}>")


def _checked(kernel: str, *arrays: Array) -> Any:
    """The compiled ``kernel`` for the arrays' dtype and device, once they are all C-contiguous
    of one dtype (raw indexing assumes it)."""
    dtype = arrays[0].dtype
    for a in arrays:
        if a.dtype != dtype or not a.flags.c_contiguous:
            raise ValueError(f"{kernel}: operands must be C-contiguous {dtype}, got {a.dtype} "
                             f"with strides {a.strides}")
    return _function(kernel, dtype.name, _device_id(arrays[0]))


class CupyLSTM(StepwiseCell):
    """``Cell`` for CuPy arrays: one launch of a ``lstm.cu`` kernel per step and direction,
    with the per-step views made once per sequence."""

    def forward_steps(self, U_fi: Array, projected: Array, r: Array, cells: Array,
                      gates: Array) -> Callable[[int], None]:
        kernel = _checked("lstm_forward", projected, r, cells, gates)
        batch, n = cells.shape[1:]
        shape, head = launch_shape(batch * n), (np.int32(batch), np.int32(n))
        a, c, g, weights, dot = list(projected), list(cells), list(gates), U_fi.T, _dot()

        def step(t: int) -> None:
            dot(c[t], weights, r)
            kernel(shape[:1], shape[1:], (*head, a[t], r, c[t], g[t], c[t + 1]))

        return step

    def backward_steps(self, U_fi: Array, gates: Array, rec: Array, q: Array, carry: Array,
                       dfi: Array, dc: Array) -> Callable[[int], None]:
        kernel = _checked("lstm_backward", gates, rec, q, carry, dfi, dc)
        batch, n = carry.shape
        shape, head = launch_shape(batch * n), (np.int32(batch), np.int32(n))
        g, q_t, factors, d, dot = list(gates), list(q), list(dfi), list(dc), _dot()

        def step(t: int) -> None:
            kernel(shape[:1], shape[1:], (*head, g[t], rec, q_t[t], carry, factors[t], d[t]))
            if t:
                dot(factors[t], U_fi, rec)

        return step


def verified(path: Any, like: Array, self_check: Any) -> bool:
    """Whether ``self_check(path, like)`` found the kernels in agreement with the generic code
    on ``like``'s device and dtype; run once for each, with one warning on a mismatch or an
    exception (then the caller uses the generic code)."""
    device, dtype = like.device.id, like.dtype.name

    def check() -> str | None:
        with path.module.cuda.Device(device):
            return self_check(path, like)

    return selfcheck.verified(("cupy", device, dtype), "fused CUDA LSTM kernels",
                              f"CUDA device {device} ({dtype})", check)
