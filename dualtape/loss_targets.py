"""What every loss does to its target and its mask: the target put where the output lives and
checked against it, and a mask's 0/1 weights applied to the per-example terms."""

from __future__ import annotations

from typing import Any

import numpy as np

from .backend import backend_of, from_host, namespace_of
from .layers.base import Array
from .layers.edges import prepare_like


def on_device(y: Array, target: Any) -> Any:
    """A Python list or tuple of targets as an array where ``y`` lives; else ``target``."""
    if isinstance(target, list | tuple):
        return from_host(np.asarray(target), backend_of(y))
    return target


def dense_target(y: Array, target: Any, name: str) -> Array:
    """``target`` checked against ``y`` for the loss ``name``, which takes real targets of
    ``y``'s shape: integer labels raise ``TypeError`` naming the losses that take them."""
    target = on_device(y, target)
    try:
        return prepare_like(target, tuple(y.shape), y, "loss", "target")[1]
    except TypeError:
        if is_integer_array(target):
            raise TypeError(
                f"{name}: the target holds integers ({target.dtype}), as class "
                "labels do: train with loss='softmax_cross_entropy' (a network ending in "
                "logits) or loss='cross_entropy' (one ending in Softmax); real-valued "
                "targets must be floating point: convert them with t.astype(float)"
            ) from None
        raise


def is_integer_array(target: Any) -> bool:
    """Whether ``target`` is an array of an integer dtype."""
    try:
        return bool(namespace_of(target).isdtype(target.dtype, "integral"))
    except TypeError:
        return False


def weighted(xp: Any, per_example: Array, diff: Array, weights: Array | None):
    """Apply 0/1 weights: masked-out examples add nothing (NaN targets there are ignored)."""
    if weights is None:
        return per_example, diff
    keep = weights > 0
    return (
        xp.where(keep, per_example, xp.zeros_like(per_example)),
        xp.where(keep[..., None], diff, xp.zeros_like(diff)),
    )
