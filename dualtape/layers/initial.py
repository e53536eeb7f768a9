"""A new layer's initial parameters: drawn on the host and moved to the backend, or, while
``load`` builds layers to hold stored arrays, placeholders that occupy no memory."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Any

import numpy as np

from ..backend import dtype_name, from_host, get_backend, host_rng

_PLACEHOLDERS: ContextVar[bool] = ContextVar("dualtape_placeholder_params", default=False)


@contextlib.contextmanager
def placeholder_params() -> Iterator[None]:
    """Inside, layer constructors draw nothing: each parameter is a read-only zero broadcast
    to its shape, of its dtype, holding no memory on numpy, for the caller to replace
    (``load`` puts the stored arrays in; drawing weights only to throw them away would
    triple its peak)."""
    token = _PLACEHOLDERS.set(True)
    try:
        yield
    finally:
        _PLACEHOLDERS.reset(token)


def initial_params(shapes: dict[str, tuple[int, ...]], dtype: str,
                   draw: Callable[[], dict[str, np.ndarray]]) -> dict[str, Any]:
    """``draw()``'s host arrays (one per name of ``shapes``) in ``dtype``, moved to the
    backend; inside ``placeholder_params``, placeholders of ``shapes``, ``draw`` not called."""
    dtype = dtype_name(dtype)
    if _PLACEHOLDERS.get():
        host = {name: np.broadcast_to(np.zeros((), dtype), shape) for name, shape in shapes.items()}
    else:
        host = {name: np.asarray(value, dtype=dtype) for name, value in draw().items()}
    backend = get_backend()
    return {name: from_host(value, backend) for name, value in host.items()}


def uniform_params(
    shapes: dict[str, tuple[int, ...]], scale: float, seed: int | None, dtype: str
) -> dict[str, Any]:
    """Parameters drawn uniformly from [-scale, scale] on the host, then moved to the backend.

    Drawing on the host from one seeded generator makes a seed give bit-identical parameters
    on every backend.
    """
    rng = host_rng(seed)
    return initial_params(shapes, dtype, lambda: {
        name: rng.uniform(-scale, scale, size=shape) for name, shape in shapes.items()})
