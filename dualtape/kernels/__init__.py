"""Optional fast paths, chosen by backend; the generic code in ``layers/`` is their reference.

``DUALTAPE_FUSED`` (read at each call): ``0`` = the generic code everywhere; unset or ``1`` =
the fast paths: the numpy in-place loop, and on CuPy the fused ``lstm.cu`` kernels, each device
and dtype of which first passes a self-check against the generic code (on a mismatch: one
warning, then the generic code).
"""

from __future__ import annotations

import functools
import importlib
import os
from collections.abc import Callable
from typing import Any, NamedTuple

import array_api_compat

from .sequence import Cell


class SequencePath(NamedTuple):
    """A backend's in-place sequence loop: its array module and pointwise cell."""

    module: Any
    cell: Cell


SelfCheck = Callable[[SequencePath, Any], "str | None"]


def sequence_path(xp: Any, like: Any, self_check: SelfCheck) -> SequencePath | None:
    """The fast path for namespace ``xp`` and arrays of ``like``'s dtype and device, or None
    for the generic code.

    ``self_check(path, like)`` describes how ``path`` disagrees with the generic code, or
    returns None; it runs once per CUDA device and dtype before the fused kernels are used.
    """
    if os.environ.get("DUALTAPE_FUSED", "") == "0":
        return None
    if array_api_compat.is_numpy_namespace(xp):
        return _numpy_path()
    if array_api_compat.is_cupy_namespace(xp):
        from . import cupy_cell

        path = _cupy_path()
        return path if cupy_cell.verified(path, like, self_check) else None
    return None


@functools.cache
def _numpy_path() -> SequencePath:
    from .numpy_cell import NumpyCell

    return SequencePath(importlib.import_module("numpy"), NumpyCell())


@functools.cache
def _cupy_path() -> SequencePath:
    from .cupy_cell import CupyCell

    return SequencePath(importlib.import_module("cupy"), CupyCell())
