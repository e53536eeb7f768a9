"""The checks at a layer's public edge: inputs, gradients and states checked once, sizes and
settings read, a single example given a batch axis and back.

The shapes and aliasing rules these enforce are the layer contract's (``base``'s docstring);
every message names the layer (``owner``) and the argument.
"""

from __future__ import annotations

import numbers
import operator
from typing import Any, cast

import numpy as np

from ..backend import backend_of, check_same_place, dtype_name, from_host, namespace_of

Array = Any


def shape_text(dims: tuple) -> str:
    """``(batch, 40)`` style text of a shape whose entries are names or sizes."""
    return "(" + ", ".join(str(d) for d in dims) + ("," if len(dims) == 1 else "") + ")"


def host_array(x: Any, owner: str, what: str) -> np.ndarray:
    """``np.asarray(x)`` of a Python list or number; a ragged list (rows of unequal lengths)
    raises ``ValueError`` naming ``owner`` and ``what``."""
    try:
        return np.asarray(x)
    except ValueError as exc:
        raise ValueError(f"{owner}: {what} must be a rectangular array, got a list whose rows "
                         f"differ in length ({exc})") from None


def prepare_input(
    x: Any,
    *,
    n_features: int | tuple | None,
    dtype: str | None,
    reference: Array | None,
    owner: str,
    leading: tuple[str, ...] = ("batch",),
    what: str = "input",
    single_form: bool = True,
    copy: bool = False,
) -> tuple[Any, Array, bool]:
    """Check an input at the public edge; return ``(xp, x, single)``.

    ``x`` must have shape ``leading + (n_features,)`` or the same without its last leading
    axis (a single example, ``single=True``, given a batch axis of 1 here). ``n_features``
    may also be an example's shape pattern (``Layer.input_shape``: sizes, and names of
    free axes), for examples of more than one axis. Python lists are
    converted onto ``reference``'s backend; arrays must live where ``reference`` does.
    Floating input is cast to ``dtype``; integer or boolean input raises ``TypeError``.
    ``single_form=False`` leaves the single-example form out of the error message (for a
    caller that accepts it only when the batch is 1 and checks that itself). ``copy=True``
    returns an array that shares no memory with ``x`` (copied only if no conversion did).
    """
    fresh = isinstance(x, list | tuple | float | int | np.number)
    if fresh:
        x = from_host(host_array(x, owner, what),
                      backend_of(reference) if reference is not None else None)
    try:
        xp = namespace_of(x)
    except TypeError:
        raise TypeError(f"{owner}: {what} must be an array, got {type(x).__name__}") from None
    if reference is not None:
        check_same_place(x, reference, what, owner)
    try:
        given = dtype_name(x.dtype)
    except ValueError:  # not float32/float64: other floats are cast, the rest rejected
        given = None
    if given is None and not xp.isdtype(x.dtype, "real floating"):
        raise TypeError(
            f"{owner}: {what} must be floating point, got {x.dtype}; integer and boolean "
            f"arrays are rejected, not cast: convert with x.astype(...) or "
            f"dualtape.asarray(x, dtype={dtype or 'float32'!r})"
        )
    example = pattern_of(n_features)
    full = leading + example
    if x.ndim not in (len(full), len(full) - 1) or not fits(tuple(x.shape[-len(example):]),
                                                            example):
        alternative = f" or {shape_text(leading[:-1] + example)}" if single_form else ""
        raise ValueError(
            f"{owner}: {what} must have shape {shape_text(full)}{alternative}, "
            f"got {tuple(x.shape)}"
        )
    if dtype is not None and given != dtype:
        x, fresh = xp.astype(x, getattr(xp, dtype)), True
    if copy and not fresh:  # ndarray.copy is four times quicker than the compat asarray
        x = x.copy() if isinstance(x, np.ndarray) else xp.asarray(x, copy=True)
    single = x.ndim == len(full) - 1
    if single:
        x = xp.expand_dims(x, axis=len(leading) - 1 if leading else -2)
    return xp, x, single


def holds_integers(x: Any) -> bool:
    """Whether ``x`` is an array (of any backend) of integers, booleans not counted."""
    if type(x) is np.ndarray:
        return x.dtype.kind in "iu"
    if getattr(x, "dtype", None) is None or isinstance(x, np.generic):
        return isinstance(x, np.integer)
    try:
        return bool(namespace_of(x).isdtype(x.dtype, "integral"))
    except TypeError:
        return False


def prepare_ids(
    ids: Any,
    *,
    vocab: int,
    reference: Array,
    owner: str,
    taker: str,
    leading: tuple[str, ...] = ("batch",),
    what: str = "input",
    copy: bool = False,
) -> tuple[Any, Array, bool]:
    """Check integer ids at the public edge of ``taker`` (the layer that looks them up, an
    ``Embedding``, named in messages with ``owner``); return ``(xp, ids, single)``.

    ``ids`` must have shape ``leading`` (``(batch,)``, or ``(time, batch)`` in a sequence) or
    the same without its last axis (a single example, given an axis of 1 here), hold integers
    (not booleans: ``TypeError``) in ``[0, vocab)`` (``ValueError``, which costs one read
    from the device) and live where ``reference`` does. They come back as int64 (what every
    backend's gathers and scatters take); ``copy=True`` as for ``prepare_input``."""
    fresh = isinstance(ids, list | tuple | int | np.integer)
    if fresh:
        ids = from_host(host_array(ids, owner, what), backend_of(reference))
    try:
        xp = namespace_of(ids)
    except TypeError:
        raise TypeError(f"{owner}: {what} must be an array of integer ids for {taker}, got "
                        f"{type(ids).__name__}") from None
    check_same_place(ids, reference, what, owner)
    if not xp.isdtype(ids.dtype, "integral"):
        raise TypeError(
            f"{owner}: {what} must hold integer ids for {taker}, got {ids.dtype}; convert "
            "with ids.astype(int) (booleans and floats are not ids)"
        )
    if ids.ndim not in (len(leading), len(leading) - 1):
        raise ValueError(
            f"{owner}: {what} must be integer ids of shape {shape_text(leading)} or "
            f"{shape_text(leading[:-1])} for {taker}, got {tuple(ids.shape)}"
        )
    if ids.dtype != xp.int64:  # before the range check: uint64 past int64 turns negative
        ids, fresh = xp.astype(ids, xp.int64), True
    if bool(xp.any((ids < 0) | (ids >= vocab))):
        raise ValueError(
            f"{owner}: {what} holds ids from {int(xp.min(ids))} to {int(xp.max(ids))}, but "
            f"{taker} takes ids in [0, {vocab})"
        )
    if not fresh and copy:  # (the cast and the conversion above made copies)
        ids = ids.copy() if isinstance(ids, np.ndarray) else xp.asarray(ids, copy=True)
    single = ids.ndim == len(leading) - 1
    if single:
        ids = xp.expand_dims(ids, axis=len(leading) - 1)
    return xp, ids, single


def pattern_of(n_features: int | tuple | None) -> tuple:
    """An example's shape pattern: ``n_features`` as a tuple, ``("features",)`` for None."""
    if n_features is None:
        return ("features",)
    return n_features if isinstance(n_features, tuple) else (n_features,)


def fits(shape: tuple, pattern: tuple) -> bool:
    """Whether ``shape`` (sizes, or names of free axes) can be an example of ``pattern``: the
    same number of axes, and the same size wherever both give one."""
    return len(shape) == len(pattern) and all(isinstance(a, str) or isinstance(b, str) or a == b
                                              for a, b in zip(shape, pattern, strict=False))


def restore(y: Array, single: bool, batch_axis: int = -2) -> Array:
    """Undo the batch axis ``prepare_input`` added to a single example: ``batch_axis`` is the
    batch's axis (0 for a batch of examples of any shape, -2 for features in a sequence)."""
    if not single:
        return y
    return y[0, ...] if batch_axis == 0 else y[..., 0, :]


def read_only(a: Array) -> Array:
    """``a`` as a public call hands it out: a read-only view on numpy (no copy); a copy on
    backends without read-only arrays (CuPy, torch, array-api-strict). Either way writing to
    the result cannot change a tape that holds ``a``."""
    if isinstance(a, np.ndarray):
        view = a.view()
        view.flags.writeable = False
        return view
    return namespace_of(a).asarray(a, copy=True)


def check_dtype(owner: str, dtype: Any) -> str:
    """``"float32"`` or ``"float64"`` for a layer's ``dtype`` argument; else ``ValueError``."""
    try:
        return dtype_name(dtype)
    except ValueError:
        raise ValueError(f"{owner}: dtype must be 'float32' or 'float64', got {dtype!r}") from None


def prepare_like(
    a: Any, shape: tuple[int, ...], reference: Array, owner: str, what: str, copy: bool = False,
    batch_axis: int = -2,
) -> tuple[Any, Array, bool]:
    """Check a gradient or state of exactly ``shape`` (or without its batch axis
    ``batch_axis`` when the batch is 1) against the place and dtype of ``reference``; return
    ``(xp, a, single)``."""
    if type(a) is np.ndarray and type(reference) is np.ndarray and not copy and (
            a.dtype == reference.dtype and a.shape == tuple(shape)):
        return namespace_of(a), a, False  # what the checks below give it, 4x quicker
    axis = batch_axis % len(shape) if len(shape) > 1 else 0
    xp, a, single = prepare_input(
        a,
        n_features=tuple(shape[axis + 1:]) if len(shape) > 1 else shape[-1],
        dtype=dtype_name(reference.dtype),
        reference=reference,
        owner=owner,
        leading=tuple(str(n) for n in shape[:axis + 1]) if len(shape) > 1 else (),
        what=what,
        single_form=len(shape) < 2 or shape[axis] == 1,
        copy=copy,
    )
    if tuple(a.shape) != tuple(shape):
        got = a.shape[:axis] + a.shape[axis + 1:] if single else a.shape
        raise ValueError(f"{owner}: {what} must have shape {tuple(shape)}, got {tuple(got)}")
    return xp, a, single


def as_int(value: Any) -> int | None:
    """``value`` as a plain ``int`` if ``operator.index`` takes it (Python or numpy integers),
    bools excluded; else ``None``."""
    if isinstance(value, bool | np.bool_):
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None


def check_size(owner: str, name: str, n: Any) -> int:
    """``n`` as a plain ``int`` if it is a positive integer (numpy's too), else a
    ``ValueError`` naming the layer and argument."""
    size = as_int(n)
    if size is None or size < 1:
        raise ValueError(f"{owner}: {name} must be a positive integer, got {n!r}")
    return size


def check_real(owner: str, name: str, value: Any, interval: str) -> float:
    """``value`` as a float if it is a real number (numpy's too; bools and NaN are not) in
    ``interval``, written as in mathematics (``"[0, 1)"``, ``"(0, inf]"``); else a
    ``ValueError`` naming the owner, the argument and the interval."""
    low, high = (float(end) for end in interval[1:-1].split(","))
    real = cast(float, value)  # typeshed's numbers.Real declares no comparison with a float
    inside = isinstance(value, numbers.Real) and not isinstance(value, bool | np.bool_) and (
        (low <= real if interval[0] == "[" else low < real)
        and (real <= high if interval[-1] == "]" else real < high))
    if not inside:
        raise ValueError(f"{owner}: {name} must be a real number in {interval}, got {value!r}")
    return float(value)


def checked_sizes(owner: str, config: dict[str, Any]) -> tuple[int, int]:
    """``(n_in, n_out)`` from a layer's ``config``, each a positive integer."""
    return check_size(owner, "n_in", config["n_in"]), check_size(owner, "n_out", config["n_out"])


def check_not_empty(xs: Array, owner: str) -> None:
    """Raise ``ValueError`` for a sequence of no time steps."""
    if xs.shape[0] == 0:
        raise ValueError(f"{owner}: the input sequence is empty (T = 0); give at least one step")


def check_sequence_gradients_order(owner: str, dstate_T: Any, dys: Any) -> None:
    """Raise ``ValueError`` when ``backward_sequence(tape, dstate_T, dys)`` was given its
    gradients the other way round: a state gradient is ``(batch, s)`` or ``(s,)``, never 3-D,
    and ``dys`` always has a time axis, so it is never 1-D. (Only at T = batch = 1 with both
    given 2-D can the two not be told apart.)"""
    if (dstate_T is not None and np.ndim(dstate_T) == 3) or np.ndim(dys) == 1:
        raise ValueError(
            f"{owner}: backward_sequence takes (tape, dstate_T, dys), got dstate_T of shape "
            f"{None if dstate_T is None else tuple(np.shape(dstate_T))} and dys of shape "
            f"{tuple(np.shape(dys))}: the two look swapped"
        )
