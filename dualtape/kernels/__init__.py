"""Optional fast paths, chosen by backend; the generic code in ``layers/`` is their reference.

``DUALTAPE_FUSED`` (read at each call; its spellings in ``dualtape.switches``): off (``0``) =
the generic code everywhere; unset or on (``1``) = the fast paths. On numpy: the compiled
loops (``numba_lstm``) where numba is installed and numpy bundles OpenBLAS, else the in-place
ufunc loop (``numpy_lstm``); ``DUALTAPE_JIT`` off (also read at each call) keeps the ufunc
loop. On CuPy: the fused ``lstm.cu`` kernels. The spatial layers on numpy: compiled window
loops (``numba_spatial``), the optimizers' updates (``numba_optim``, against their ufunc
code), one-row outer products (``numba_outer``), row sums by id (``numba_scatter``), the
softmax cross entropy at class labels (``numba_softmax_cross_entropy``) and plain SGD fused
into an LSTM's backward pass (``numba_descent``) where the compiled LSTM loops run. The
compiled loops (per dtype) and the CUDA kernels (per device and dtype) first pass a
self-check against the generic code (on a mismatch: one warning, then the generic code); a
compiled loop's failure that a fresh compile cures is a damaged disk cache, rebuilt with its
own warning (``numba_cache``).
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from typing import Any, NamedTuple

import array_api_compat
import numpy as np

from ..switches import held_choice, switched_on
from . import compile_ahead, selfcheck
from .lstm_sequence import Cell


class SequencePath(NamedTuple):
    """A backend's in-place sequence loop: its array module and pointwise cell."""

    module: Any
    cell: Cell


SelfCheck = Callable[[SequencePath, Any], "str | None"]


def sequence_path(xp: Any, like: Any, self_check: SelfCheck) -> SequencePath | None:
    """The fast path for namespace ``xp`` and arrays of ``like``'s dtype and device, or None
    for the generic code.

    ``self_check(path, like)`` describes how ``path`` disagrees with the generic code, or
    returns None; it runs once per dtype before the compiled loops are used, and once per
    CUDA device and dtype before the fused kernels are. Chosen once per ``held`` call
    (``switches.held_choice``).
    """
    place = like.dtype if type(like) is np.ndarray else (  # a CuPy device by its number
        type(like), like.dtype, getattr(like.device, "id", like.device))
    return held_choice(("sequence_path", xp, place, self_check),
                       lambda: _sequence_path(xp, like, self_check))


def _sequence_path(xp: Any, like: Any, self_check: SelfCheck) -> SequencePath | None:
    if _generic_only():
        return None
    if array_api_compat.is_numpy_namespace(xp):
        if cpu_path()[0] == "compiled":
            path = _compiled_path()
            if selfcheck.verified(("numba", like.dtype), "compiled CPU LSTM loops",
                                  _on_the_cpu(like.dtype),
                                  lambda: _cache_checked("_numba_lstm",
                                                         lambda: self_check(path, like))):
                return path
        return _numpy_path()
    if array_api_compat.is_cupy_namespace(xp):
        from . import cupy_lstm

        path = _cupy_path()
        return path if cupy_lstm.verified(path, like, self_check) else None
    return None


def cell_loops(cell: str, like: Any, self_check: Callable[[Any], str | None]) -> Any:
    """The fast time loops of ``cell`` (the layer's class name: ``"StandardLSTM"`` or
    ``"GRU"``) for arrays of ``like``'s kind, dtype and device, or None for the generic code:
    on numpy the compiled loops (``numba_standard_lstm_gru``), on CuPy the
    ``standard_lstm_gru.cu`` kernels (``cupy_standard_lstm_gru``). ``self_check(loops)`` says
    how they disagree with the generic loops, or returns None; it runs once per dtype (and CUDA
    device) before they are first used."""
    if _generic_only():
        return None
    key: tuple[str, ...]
    if type(like) is np.ndarray:
        if cpu_path()[0] != "compiled":
            return None
        from . import numba_standard_lstm_gru

        loops, compiled = numba_standard_lstm_gru.LOOPS[cell], "_numba_standard_lstm_gru"
        key, where = ("numba", cell, like.dtype), _on_the_cpu(like.dtype)
    elif array_api_compat.is_cupy_array(like):
        from . import cupy_standard_lstm_gru

        loops, compiled = cupy_standard_lstm_gru.LOOPS[cell], None
        device, dtype = like.device.id, like.dtype.name
        key, where = ("cupy", cell, device, dtype), f"CUDA device {device} ({dtype})"
    else:
        return None

    def check() -> str | None:
        return self_check(loops) if compiled is None else \
            _cache_checked(compiled, lambda: self_check(loops))

    return loops if selfcheck.verified(key, f"fast {cell} loops", where,
                                       check) else None


def spatial_loops(kind: str, like: Any, self_check: Callable[[Any, Any], str | None]) -> Any:
    """The compiled window loops (``numba_spatial``) for layer ``kind`` (``"Convolution"``,
    ``"Deconvolution"``, ``"Pooling"``) on float32/float64 numpy arrays of ``like``'s dtype
    where the compiled LSTM loops run, or None for the generic code. ``self_check(loops,
    like)`` says how they disagree with the layer's generic code, or returns None; it runs once per
    kind and dtype before they are first used."""
    return _checked_loops("numba_spatial", kind, f"compiled {kind} loops", like, self_check)


def optimizer_loops(like: Any, self_check: Callable[[Any, Any], str | None]) -> Any:
    """The compiled optimizer updates (``numba_optim``) for float32/float64 numpy arrays of
    ``like``'s dtype where the compiled LSTM loops run, or None for the ufunc code.
    ``self_check(loops, like)`` says how they disagree with that code, or returns None; it runs
    once per dtype before they are first used."""
    return _checked_loops("numba_optim", "optimizer", "compiled optimizer updates", like,
                          self_check)


def outer_loops(like: Any, self_check: Callable[[Any, Any], str | None]) -> Any:
    """The compiled one-row outer product (``numba_outer``) for float32/float64 numpy arrays
    of ``like``'s dtype where the compiled LSTM loops run, or None for numpy's. ``self_check``
    as in ``optimizer_loops``."""
    return _checked_loops("numba_outer", "outer", "compiled outer product", like, self_check)


def stack_loops(like: Any, self_check: Callable[[Any, Any], str | None]) -> Any:
    """The compiled SGD step of a stack of LSTMs (``numba_descent.descend_stack``) for
    float32/float64 numpy arrays of ``like``'s dtype where the compiled LSTM loops run, or
    None. ``self_check`` as in ``optimizer_loops``."""
    return _checked_loops("numba_descent", "stack", "compiled SGD step of a stack", like,
                          self_check)


def grads_loops(like: Any, self_check: Callable[[Any, Any], str | None]) -> Any:
    """The compiled backward pass of an LSTM stack into gradient buffers (``numba_grads``)
    for float32/float64 numpy arrays of ``like``'s dtype where the compiled LSTM loops run, or
    None. ``self_check`` as in ``optimizer_loops``."""
    return _checked_loops("numba_grads", "grads", "compiled gradients of a stack", like,
                          self_check)


def scatter_loops(like: Any, self_check: Callable[[Any, Any], str | None]) -> Any:
    """The compiled row sums by id (``numba_scatter``) for float32/float64 numpy rows of
    ``like``'s dtype where the compiled LSTM loops run, or None for numpy's. ``self_check``
    as in ``optimizer_loops``."""
    return _checked_loops("numba_scatter", "scatter", "compiled row sums by id", like,
                          self_check)


def loss_loops(like: Any, self_check: Callable[[Any, Any], str | None]) -> Any:
    """The compiled softmax cross entropy at class labels (``numba_softmax_cross_entropy``)
    for float32/float64 numpy logits of ``like``'s dtype where the compiled LSTM loops run, or
    None for the generic code. ``self_check`` as in ``optimizer_loops``."""
    return _checked_loops("numba_softmax_cross_entropy", "loss",
                          "compiled softmax cross entropy", like, self_check)


def _checked_loops(module: str, kind: str, what: str, like: Any,
                   self_check: Callable[[Any, Any], str | None]) -> Any:
    """The compiled ``module`` of this package for arrays like ``like`` once ``self_check``
    passed for its ``kind`` and dtype (its compiled half, ``_`` + ``module``, checked against a
    damaged disk cache), or None where the compiled loops do not run or the check failed.
    Chosen once per ``held`` call (a training call asks for the outer product per weight)."""
    key = ("loops", module, type(like), getattr(like, "dtype", None), self_check)
    return held_choice(key, lambda: _loops_now(module, kind, what, like, self_check))


def _loops_now(module: str, kind: str, what: str, like: Any,
               self_check: Callable[[Any, Any], str | None]) -> Any:
    if not _compiled_for(like):
        return None
    loops = importlib.import_module(f"{__name__}.{module}")
    return loops if selfcheck.verified(
        ("numba", kind, like.dtype), what, _on_the_cpu(like.dtype),
        lambda: _cache_checked(f"_{module}", lambda: self_check(loops, like))) else None


def _compiled_for(like: Any) -> bool:
    """Whether ``like`` is a float32/float64 numpy array and the compiled loops run now."""
    return type(like) is np.ndarray and like.dtype in (np.float32, np.float64) and (
        cpu_path()[0] == "compiled")  # also "generic" under DUALTAPE_FUSED=0


def cpu_path() -> tuple[str, str | None]:
    """The LSTM loop numpy arrays take now, and why not a faster one: ``("compiled", None)``,
    ``("ufuncs", why)`` or ``("generic", why)`` (a failed self-check is not foreseen here).
    Chosen once per ``held`` call (``switches.held_choice``)."""
    return held_choice(("cpu_path",), _cpu_path_now)


def compiled_declined() -> str:
    """Why numpy arrays do not take the compiled LSTM loops now (asked where they did not):
    ``cpu_path``'s reason, or their failed self-check."""
    return cpu_path()[1] or "the compiled LSTM loops failed their self-check"


def _cpu_path_now() -> tuple[str, str | None]:
    if _generic_only():
        return "generic", "DUALTAPE_FUSED=0 asks for the generic code"
    if not switched_on("DUALTAPE_JIT"):
        return "ufuncs", "DUALTAPE_JIT=0 asks for the ufunc loop"
    why = _compiled_unavailable() or compile_ahead.waiting()
    return ("ufuncs", why) if why else ("compiled", None)


def _cache_checked(compiled: str, check: Callable[[], str | None]) -> str | None:
    """``check()`` of the numba module ``compiled``, after a fresh compile if its disk cache
    looks damaged (``numba_cache.checked``)."""
    from .numba_cache import checked

    return checked(compiled, check)


@functools.cache
def _on_the_cpu(dtype: Any) -> str:
    """``the CPU (float32)``: cached, as numpy's ``dtype.name`` costs microseconds a call."""
    return f"the CPU ({dtype.name})"


def _generic_only() -> bool:
    return not switched_on("DUALTAPE_FUSED")


@functools.cache
def _compiled_unavailable() -> str | None:
    from .numba_lstm import unavailable

    return unavailable()


@functools.cache
def _compiled_path() -> SequencePath:
    from .numba_lstm import NumbaLSTM

    return SequencePath(importlib.import_module("numpy"), NumbaLSTM())


@functools.cache
def _numpy_path() -> SequencePath:
    from .numpy_lstm import NumpyLSTM

    return SequencePath(importlib.import_module("numpy"), NumpyLSTM())


@functools.cache
def _cupy_path() -> SequencePath:
    from .cupy_lstm import CupyLSTM

    return SequencePath(importlib.import_module("cupy"), CupyLSTM())
