"""Optional fast paths, chosen by backend; the generic code in ``layers/`` is their reference.

``DUALTAPE_FUSED`` (read at each call): ``0`` = generic code everywhere; ``1`` = every fast
path this backend has; unset = the fast paths verified so far (the numpy in-place loop; the
CuPy fused kernels stay opt-in until they have passed on a real GPU).
"""

from __future__ import annotations

import importlib
import os
from typing import Any, NamedTuple

import array_api_compat

from .sequence import Cell


class SequencePath(NamedTuple):
    """A backend's in-place sequence loop: its array module and pointwise cell."""

    module: Any
    cell: Cell


def sequence_path(xp: Any) -> SequencePath | None:
    """The fast path for namespace ``xp``, or None for the generic code."""
    setting = os.environ.get("DUALTAPE_FUSED", "")
    if setting == "0":
        return None
    if array_api_compat.is_numpy_namespace(xp):
        from .numpy_cell import NumpyCell

        return SequencePath(importlib.import_module("numpy"), NumpyCell())
    if setting == "1" and array_api_compat.is_cupy_namespace(xp):
        from .cupy_cell import CupyCell

        return SequencePath(importlib.import_module("cupy"), CupyCell())
    return None
