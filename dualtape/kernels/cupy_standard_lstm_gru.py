"""StandardLSTM's and GRU's time loops on CuPy: per step one matrix product and one kernel of
``standard_lstm_gru.cu`` each way.

``standard_lstm_gru.cu`` ships as package data and is compiled once per process by
``cupy.RawModule`` for float and double; each kernel is looked up on first use per device.
``STANDARD_LSTM`` and ``GRU`` have the ``forward`` / ``backward`` of the generic loops in
``layers/standard_lstm.py`` and ``layers/gru.py`` (and of ``numba_standard_lstm_gru``, the
compiled CPU loops), which check them on first use per device and dtype
(``kernels.cell_loops``).
"""

from __future__ import annotations

import functools
from types import SimpleNamespace
from typing import Any

import numpy as np

from .cupy_lstm import _DTYPES, cuda_source, launch_shape

Array = Any
KERNELS = ("standard_lstm_forward", "standard_lstm_backward", "gru_forward", "gru_backward")


def source() -> str:
    """The CUDA source of the two cells' kernels."""
    return cuda_source("standard_lstm_gru.cu")


def name_expressions() -> list[str]:
    """Every template instance the module compiles: each kernel for float and double."""
    return [f"{kernel}<{ctype}>" for kernel in KERNELS for ctype in _DTYPES.values()]


@functools.cache
def _module() -> Any:
    import cupy

    return cupy.RawModule(code=source(), options=("--std=c++11",),
                          name_expressions=name_expressions())


@functools.cache
def _function(kernel: str, dtype: str, device: int) -> Any:
    """The kernel for ``dtype``, loaded on ``device`` (looked up on first use)."""
    return _module().get_function(f"{kernel}<{_DTYPES[dtype]}>")


def _array_module() -> Any:
    import cupy

    return cupy


def _device_id(a: Array) -> int:
    return a.device.id


def _launcher(kernel: str, *arrays: Array) -> Any:
    """A call ``run(*args)`` of the compiled ``kernel`` over the batch x n elements, once the
    arrays are C-contiguous of one dtype (raw indexing assumes it); ``arrays[0]`` is (…, B, n)
    or (…, B, k·n) with ``arrays[-1]`` (…, B, n)."""
    dtype = arrays[0].dtype
    for a in arrays:
        if a.dtype != dtype or not a.flags.c_contiguous:
            raise ValueError(f"{kernel}: operands must be C-contiguous {dtype}, got {a.dtype} "
                             f"with strides {a.strides}")
    function = _function(kernel, dtype.name, _device_id(arrays[0]))
    batch, n = arrays[-1].shape[-2:]
    grid, block = launch_shape(batch * n)

    def run(*args: Array) -> None:
        function((grid,), (block,), (np.int32(batch), np.int32(n), *args))

    return run


def standard_lstm_forward(W_hh: Array, projected: Array, h: Array, c: Array
                          ) -> tuple[Array, Array, Array, Array]:
    """``(hs, cells, gates, tanh_cells)`` from ``W_hh`` (4o, o), the projections (T, B, 4o)
    with both biases in (a C-contiguous one becomes ``gates``) and the state ``h``, ``c``."""
    mod = _array_module()
    gates = mod.ascontiguousarray(projected)
    steps, batch, four_n = gates.shape
    hs = mod.empty((steps + 1, batch, four_n // 4), dtype=gates.dtype)
    cells, tanh_cells = mod.empty_like(hs), mod.empty_like(hs[1:])
    hs[0], cells[0] = h, c
    r = mod.empty_like(gates[0])
    run = _launcher("standard_lstm_forward", gates, r, cells, tanh_cells, hs)
    weights = W_hh.T
    for t in range(steps):
        mod.dot(hs[t], weights, r)
        run(gates[t], r, cells[t], cells[t + 1], tanh_cells[t], hs[t + 1])
    return hs, cells, gates, tanh_cells


def standard_lstm_backward(W_hh: Array, gates: Array, cells: Array, tanh_cells: Array,
                           dhs: Array, dh: Array, dc: Array, need_first: bool
                           ) -> tuple[Array, Array, Array]:
    """``(das, dh_0, dc_0)`` from the last state's gradient ``dh``, ``dc`` (``dh_0`` is
    meaningless unless ``need_first``)."""
    mod = _array_module()
    dhs, weights = mod.ascontiguousarray(dhs), mod.ascontiguousarray(W_hh)
    rec, dc = mod.array(dh, order="C"), mod.array(dc, order="C")
    das = mod.empty_like(gates)
    run = _launcher("standard_lstm_backward", gates, cells, tanh_cells, dhs, rec, dc, das, dc)
    for t in reversed(range(gates.shape[0])):
        run(gates[t], cells[t], tanh_cells[t], dhs[t], rec, dc, das[t])
        if t or need_first:
            mod.dot(das[t], weights, rec)
    return das, rec, dc


def gru_forward(W_hh: Array, b_hh: Array, projected: Array, h: Array
                ) -> tuple[Array, Array, Array]:
    """``(hs, gates, hn)`` from ``W_hh`` (3o, o), ``b_hh`` (3o,), the input projections
    (T, B, 3o) with ``b_ih`` in (a C-contiguous one becomes ``gates``) and the state ``h``."""
    mod = _array_module()
    gates = mod.ascontiguousarray(projected)
    steps, batch, three_n = gates.shape
    hs = mod.empty((steps + 1, batch, three_n // 3), dtype=gates.dtype)
    hn = mod.empty_like(hs[1:])
    hs[0] = h
    r, bias = mod.empty_like(gates[0]), mod.ascontiguousarray(b_hh)
    run = _launcher("gru_forward", gates, r, bias, hn, hs)
    weights = W_hh.T
    for t in range(steps):
        mod.dot(hs[t], weights, r)
        run(gates[t], r, bias, hs[t], gates[t], hn[t], hs[t + 1])
    return hs, gates, hn


def gru_backward(W_hh: Array, gates: Array, hn: Array, hs: Array, dhs: Array, dh: Array,
                 need_first: bool) -> tuple[Array, Array, Array]:
    """``(da_h, dn, dh_0)`` from the last state's gradient ``dh`` (``dh_0`` is meaningless
    unless ``need_first``)."""
    mod = _array_module()
    dhs, weights = mod.ascontiguousarray(dhs), mod.ascontiguousarray(W_hh)
    carry, rec = mod.array(dh, order="C"), mod.zeros(dh.shape, dtype=dh.dtype)
    da_h, dn = mod.empty_like(gates), mod.empty_like(hn)
    run = _launcher("gru_backward", gates, hn, hs, dhs, rec, carry, da_h, dn, carry)
    for t in reversed(range(gates.shape[0])):
        run(gates[t], hn[t], hs[t], dhs[t], rec, carry, da_h[t], dn[t])
        if t or need_first:
            mod.dot(da_h[t], weights, rec)
    return da_h, dn, carry + rec


STANDARD_LSTM = SimpleNamespace(forward=standard_lstm_forward, backward=standard_lstm_backward)
GRU = SimpleNamespace(forward=gru_forward, backward=gru_backward)
LOOPS = {"StandardLSTM": STANDARD_LSTM, "GRU": GRU}
"""The loops of each cell, by the name ``kernels.cell_loops`` takes."""
