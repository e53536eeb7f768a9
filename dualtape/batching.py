"""Feeding arrays to training: a series cut into windows, arrays shuffled and cut into batches,
each on the arrays' own backend.

``windows`` cuts a series ``(N,)`` or ``(N, features)`` into the time-major inputs
``(length, count, features)`` of the recurrent verbs and, for each window, the values ``horizon``
steps on: at its last step only, ``(count, features)``, or at every step,
``(length, count, features)``. On numpy both are read-only views of the series
(``sliding_window_view``): nothing is copied. The array API has no view of overlapping windows,
so on the other backends the inputs (and every-step targets) are one ``take``, a copy of
``length`` values per window, and the last-step targets a copy of one value per window.

``batches`` yields the arrays' batches along each one's batch axis, which the caller names
(``axes``: 1 for ``(T, B, ...)`` sequences, 0 for ``(B, ...)`` targets), in an order drawn from a
seeded host numpy generator and moved to the arrays' backend, so one seed gives the same batches
on every backend. Unshuffled batches are slices (views where the backend makes them), shuffled
ones copies (``take``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from .backend import backend_of, check_same_place, from_host, host_rng, namespace_of
from .layers.edges import as_int, check_size, read_only

Array = Any


def windows(series: Array, length: int, horizon: int = 1, stride: int = 1,
            every_step: bool = False) -> tuple[Array, Array]:
    """``(inputs, targets)`` cut from ``series`` ``(N,)`` or ``(N, features)`` (a 1-D series is
    one feature): window ``k`` holds steps ``k*stride`` to ``k*stride + length - 1`` as
    ``inputs[:, k]``, ``(length, count, features)``; its target is the value ``horizon`` steps
    after its last step, ``(count, features)``, or with ``every_step=True`` the value
    ``horizon`` steps after each of its steps, ``(length, count, features)``. ``count`` is
    ``(N - length - horizon) // stride + 1``. Read-only views on numpy, copies elsewhere."""
    length = check_size("windows", "length", length)
    horizon = check_size("windows", "horizon", horizon)
    stride = check_size("windows", "stride", stride)
    if not isinstance(every_step, bool):
        raise TypeError(f"windows: every_step must be True or False, got {every_step!r}")
    try:
        xp = namespace_of(series)
    except TypeError:
        raise TypeError(f"windows: series must be an array (dualtape.asarray makes one), got "
                        f"{type(series).__name__}") from None
    if series.ndim not in (1, 2):
        raise ValueError(f"windows: series must have shape (N,) or (N, features), got "
                         f"{tuple(series.shape)}")
    steps = series.shape[0]
    if length + horizon > steps:
        raise ValueError(f"windows: length + horizon ({length} + {horizon}) is longer than the "
                         f"series' {steps} steps")
    columns = series if series.ndim == 2 else xp.reshape(series, (steps, 1))
    count = (steps - length - horizon) // stride + 1
    inputs = _windows_of(xp, columns[:steps - horizon, ...], length, stride, count)
    if every_step:
        return inputs, _windows_of(xp, columns[horizon:, ...], length, stride, count)
    last = length - 1 + horizon
    return inputs, read_only(columns[last::stride, ...])


def _windows_of(xp: Any, columns: Array, length: int, stride: int, count: int) -> Array:
    """The ``count`` windows of ``length`` steps of ``columns`` ``(N, f)``, ``stride`` apart
    (all that fit), as ``(length, count, f)``: a read-only view on numpy, a ``take`` elsewhere."""
    if isinstance(columns, np.ndarray):
        view = np.lib.stride_tricks.sliding_window_view(columns, length, axis=0)
        return view[::stride].transpose(2, 0, 1)
    steps = np.arange(length)[:, None] + stride * np.arange(count)[None, :]
    taken = xp.take(columns, from_host(steps.ravel(), backend_of(columns)), axis=0)
    return xp.reshape(taken, (length, count, columns.shape[1]))


def batches(*arrays: Array, batch_size: int, axes: int | tuple[int, ...], seed: int | None = None,
            shuffle: bool = True, drop_last: bool = False) -> Iterator[tuple[Array, ...]]:
    """Batches of ``batch_size`` of ``arrays`` along each one's batch axis (``axes``: one axis
    for all, or one per array; ``1`` for ``(T, B, ...)`` sequences, ``0`` for ``(B, ...)``),
    each a tuple with one array per argument; the last batch is smaller unless ``drop_last``.
    With ``shuffle`` the order is ``numpy.random.default_rng(seed).permutation``, the same on
    every backend. The arguments are checked here, before the first batch is asked for."""
    if not arrays:
        raise TypeError("batches: give at least one array")
    size = check_size("batches", "batch_size", batch_size)
    for name, flag in (("shuffle", shuffle), ("drop_last", drop_last)):
        if not isinstance(flag, bool):
            raise TypeError(f"batches: {name} must be True or False, got {flag!r}")
    for k, array in enumerate(arrays):
        try:
            namespace_of(array)
        except TypeError:
            raise TypeError(f"batches: arrays[{k}] must be an array, got "
                            f"{type(array).__name__}") from None
        check_same_place(array, arrays[0], f"batches: arrays[{k}]", "arrays[0]")
    chosen = _batch_axes(arrays, axes)
    count = arrays[0].shape[chosen[0]]
    for k, (array, axis) in enumerate(zip(arrays, chosen, strict=True)):
        if array.shape[axis] != count:
            raise ValueError(f"batches: arrays[{k}] has {array.shape[axis]} along its batch "
                             f"axis {axis} but arrays[0] has {count} along axis {chosen[0]}")
    if seed is not None and not shuffle:
        raise ValueError("batches: seed is given but shuffle=False: nothing is drawn")
    try:
        order = host_rng(seed).permutation(count) if shuffle else None
    except ValueError as exc:
        raise ValueError(f"batches: {exc}") from None
    return _batches(arrays, chosen, size, count, drop_last, order)


def _batch_axes(arrays: tuple[Array, ...], axes: Any) -> tuple[int, ...]:
    """``axes`` as one non-negative axis per array, each an axis of its array."""
    given = (axes,) * len(arrays) if as_int(axes) is not None else axes
    if not isinstance(given, tuple | list) or len(given) != len(arrays):
        raise ValueError(f"batches: axes must be an integer or a tuple of one per array "
                         f"({len(arrays)}), got {axes!r}")
    chosen = []
    for k, (array, axis) in enumerate(zip(arrays, given, strict=True)):
        index = as_int(axis)
        if index is None or not -array.ndim <= index < array.ndim:
            raise ValueError(f"batches: axes[{k}] = {axis!r} is not an axis of arrays[{k}], "
                             f"of shape {tuple(array.shape)}")
        chosen.append(index % array.ndim)
    return tuple(chosen)


def _batches(arrays: tuple[Array, ...], axes: tuple[int, ...], size: int, count: int,
             drop_last: bool, order: np.ndarray | None) -> Iterator[tuple[Array, ...]]:
    """The batches of ``count`` rows: slices in order, else ``take`` of ``order``."""
    xp = namespace_of(arrays[0])
    moved = None if order is None else from_host(order, backend_of(arrays[0]))
    for start in range(0, count - count % size if drop_last else count, size):
        stop = min(start + size, count)  # the standard leaves a stop past the end unspecified
        if moved is None:
            yield tuple(a[(slice(None),) * axis + (slice(start, stop), ...)]
                        for a, axis in zip(arrays, axes, strict=True))
        else:
            rows = moved[start:stop]
            yield tuple(xp.take(a, rows, axis=axis) for a, axis in zip(arrays, axes, strict=True))
