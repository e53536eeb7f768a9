"""Helpers of a training step that sit above the networks: gradient clipping by global norm."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from .backend import check_same_place, namespace_of, zeros_like_place
from .layers.base import Array


def clip_gradients(grads: Any, max_norm: float) -> tuple[Any, Any]:
    """``(clipped, norm)``: ``grads`` scaled by ``min(1, max_norm / norm)``, ``norm`` the
    global L2 norm of all their arrays together (torch's ``clip_grad_norm_``, not in place).

    ``grads`` is what a backward pass returns, a list of gradient dicts (one per layer), or
    one dict; the result has the same form, with new arrays. ``norm`` is a 0-d array on the
    gradients' device, in their dtype: ``float(norm)`` reads it (on CuPy that waits for the
    GPU, so a training loop can leave it there). It is computed with the largest magnitude
    factored out, so a float32 norm beyond 3.4e38 is still finite and still clips instead of
    zeroing every gradient. ``max_norm`` is a positive number (``inf``: measure only). A NaN
    or infinite gradient gives a NaN or infinite norm and non-finite clipped gradients: check
    ``norm`` before an update. No arrays at all: ``(grads, 0.0)``. Gradients of two backends
    or devices raise ``TypeError``/``ValueError`` naming both.
    """
    if isinstance(max_norm, bool) or not isinstance(max_norm, int | float) or not max_norm > 0:
        raise ValueError(f"clip_gradients: max_norm must be a positive number, got {max_norm!r}")
    single = isinstance(grads, Mapping)
    groups = [grads] if single else grads
    if not isinstance(groups, list | tuple) or not all(isinstance(g, Mapping) for g in groups):
        raise TypeError("clip_gradients: expected a gradient dict or a list of them (what "
                        f"backward returns), got {type(grads).__name__}")
    arrays = [g for group in groups for g in group.values()]
    if not arrays:
        return grads, 0.0
    for k, a in enumerate(arrays[1:], start=1):
        check_same_place(a, arrays[0], f"gradient {k}", "clip_gradients")
    xp = namespace_of(arrays[0])
    largest = _largest(xp, arrays)
    scale = xp.where(xp.isfinite(largest) & (largest > 0), largest, xp.ones_like(largest))
    inverse = 1.0 / scale
    total = sum(xp.sum((g * inverse) ** 2) for g in arrays)
    norm = scale * xp.sqrt(total)
    limit = min(float(max_norm), float(xp.finfo(norm.dtype).max))  # inf / inf would warn
    # below the limit exactly 1 (a quotient limit / max(norm, limit) may round, torch's does)
    factor = xp.where(norm > limit, limit / xp.maximum(norm, xp.full_like(norm, limit)),
                      xp.ones_like(norm))
    clipped = [{k: g * factor for k, g in group.items()} for group in groups]
    return (clipped[0] if single else clipped), norm


def _largest(xp: Any, arrays: list[Array]) -> Array:
    """The largest magnitude in ``arrays`` (0-d; 0 when all are empty)."""
    peaks = [xp.max(xp.abs(a)) if math.prod(a.shape) else zeros_like_place((), a)
             for a in arrays]
    return xp.max(xp.stack(peaks))
