"""check_gradients: a layer's or network's ``backward`` against float64 central differences.

The objective is a random projection of the output, ``sum(y * r)`` with ``r`` drawn from a
seeded generator (and for sequences ``+ sum(state_T * q)`` over the final states), so one
backward pass with ``dy = r`` gives every gradient at once; each is compared, entry by entry,
with central differences of the objective ``(f(v + eps) - f(v - eps)) / 2 eps``: for the
input, the initial states (recurrent models) and every parameter of every layer.
Chainer's ``gradient_check.check_backward`` and ``torch.autograd.gradcheck`` are the models.
Perturbed values are made on the host in float64 and put on the model's backend for each
forward pass, so the check runs wherever the model lives; every parameter is put back (the
same array object) afterwards.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .backend import Backend, backend_of, from_host, get_backend, to_numpy
from .layers.base import Layer
from .layers.edges import holds_integers
from .network import Network
from .recurrent import RecurrentNetwork

Array = Any


class GradientCheckError(AssertionError):
    """A gradient of ``backward`` differs from central differences beyond the tolerance: the
    first line of the message names the worst array and the index of its worst entry (the
    arrays that fail follow, one a line); ``errors`` holds every array's relative error."""

    def __init__(self, message: str, errors: dict[str, float]) -> None:
        super().__init__(message)
        self.errors = errors


def numeric_gradient(f: Callable[[np.ndarray], float], x: np.ndarray,
                     eps: float = 1e-6) -> np.ndarray:
    """Central finite differences of the scalar function ``f`` at the host array ``x``
    (float64): entry by entry, ``(f(x + eps) - f(x - eps)) / (2 eps)``. ``x`` is perturbed in
    place and each entry put back before the next."""
    grad = np.zeros(x.shape, dtype=np.float64)
    for i in np.ndindex(x.shape):
        old = x[i]
        x[i] = old + eps
        up = f(x)
        x[i] = old - eps
        down = f(x)
        x[i] = old
        grad[i] = (up - down) / (2 * eps)
    return grad


def relative_errors(found: np.ndarray, expected: np.ndarray, rtol: float,
                    atol: float) -> np.ndarray:
    """``|found - expected| / (|expected| + atol / rtol)``, entry by entry: an entry exceeds
    the tolerance (``|found - expected| > atol + rtol |expected|``) exactly where this is
    above ``rtol``."""
    return np.abs(found - expected) / (np.abs(expected) + atol / rtol)


def worst_entry(found: np.ndarray, expected: np.ndarray, rtol: float,
                atol: float) -> tuple[float, tuple[int, ...]]:
    """The largest of ``relative_errors`` and the index of its entry (a NaN or inf in
    ``found`` counts as an infinite error); ``(0.0, ())`` for empty arrays."""
    ratio = relative_errors(found, expected, rtol, atol)
    ratio = np.where(np.isfinite(ratio), ratio, np.inf)
    if ratio.size == 0:
        return 0.0, ()
    flat = int(np.argmax(ratio))
    index = tuple(int(i) for i in np.unravel_index(flat, ratio.shape))
    return float(ratio[index]), index


def check_gradients(model: Any, x: Any, *, state: Any = None, rtol: float = 1e-6,
                    atol: float = 1e-8, eps: float = 1e-6, seed: int = 0,
                    tape: str | int = "full") -> dict[str, float]:
    """Check ``model``'s backward pass against float64 central differences; returns the worst
    relative error per array (``relative_errors``), name -> error.

    ``model`` is a layer (composite ones included), a ``Network``, a recurrent layer or a
    ``RecurrentNetwork``, with float64 parameters (float32 is refused: finite differences
    need float64; build it with ``dtype="float64"``). ``x`` is its input, a batch
    ``(batch,) + example`` for feed-forward models and a sequence ``(T, batch, n_in)`` for
    recurrent ones, which run through ``forward_sequence``/``backward_sequence`` with
    ``tape`` (``"full"``, ``"sqrt"`` or k) from ``state`` (None: a seeded random state; for a
    network a list, one per recurrent layer) and a random projection of the final states in
    the objective too. Integer ids (an ``Embedding`` first, or a recurrent layer first in a
    ``RecurrentNetwork``) have no gradient: only the parameters are checked. Names:
    ``"input"``, ``"initial state"``, ``"parameter W"`` for a layer,
    ``"layer 1 (LSTM) parameter U"`` and ``"layer 0 (LSTM) initial state"`` in a network,
    ``"part 0 (FullyConnected) parameter W"`` inside a composite layer.

    Raises ``GradientCheckError`` (an ``AssertionError``) when an entry differs by more than
    ``atol + rtol * |expected|``, naming the array and its worst entry's index; ``ValueError``
    or ``TypeError`` for a model or input it cannot check, a model whose two forward passes
    on one input differ included (``Dropout`` while training). ``eps`` is the difference
    step.
    """
    sequence = isinstance(model, RecurrentNetwork) or (
        isinstance(model, Layer) and model.recurrent)
    if not isinstance(model, Layer | Network | RecurrentNetwork):
        raise TypeError(f"check_gradients: expected a layer, Network or RecurrentNetwork, got a "
                        f"{type(model).__name__}")
    for what, value in (("rtol", rtol), ("eps", eps)):
        if not isinstance(value, int | float) or not value > 0 or not np.isfinite(value):
            raise ValueError(f"check_gradients: {what} must be a finite number > 0, got {value!r}")
    if not isinstance(atol, int | float) or not atol >= 0 or not np.isfinite(atol):
        raise ValueError(f"check_gradients: atol must be a finite number >= 0, got {atol!r}")
    dtypes = {str(leaf.dtype) for leaf in model.leaves() if leaf.dtype not in (None, "float64")}
    if dtypes:
        raise ValueError(f"check_gradients: {model!r} holds {', '.join(sorted(dtypes))} "
                         "parameters; finite differences need float64: build it with "
                         "dtype='float64'")
    first = _first_layer(model)
    takes_ids = first.takes_ids or (isinstance(model, RecurrentNetwork) and holds_integers(x)
                                    and getattr(first, "takes_one_hot_ids", False))
    host = _host_input(model, x, takes_ids, sequence)
    place = _place(model)
    rng = np.random.default_rng(seed)
    groups = _named_groups(model)
    if sequence:
        arrays, objective, found = _sequence_case(model, host, state, place, rng, tape,
                                                  takes_ids)
    else:
        arrays, objective, found = _batch_case(model, host, place, rng, takes_ids)
    grad_groups = found.pop("params")
    if len(grad_groups) != len(groups):
        raise GradientCheckError(f"check_gradients: {model!r}: backward gave {len(grad_groups)} "
                                 f"gradient dicts for {len(groups)} parameter dicts", {})
    errors: dict[str, float] = {}
    failures: list[tuple[float, str]] = []

    def compare(name: str, got: Any, expected: np.ndarray) -> None:
        if got is None or tuple(got.shape) != expected.shape:
            shape = None if got is None else tuple(got.shape)
            raise GradientCheckError(f"check_gradients: {_owner(model)}{name}: backward gave "
                                     f"shape {shape}, expected {expected.shape}", errors)
        got_host = _host64(got)
        worst, index = worst_entry(got_host, expected, rtol, atol)
        errors[name] = worst
        if not worst <= rtol:
            failures.append((worst, f"{name}: worst at index {index}: backward "
                             f"{float(got_host[index])!r}, central differences "
                             f"{float(expected[index])!r} (relative error {worst:.3g} > "
                             f"rtol {rtol:g})"))

    fixed = found.pop("at")  # every varied array at its given value
    for name in arrays:
        def of_array(value: np.ndarray, name: str = name) -> float:
            return objective({**fixed, name: value})
        compare(name, found[name], numeric_gradient(of_array, fixed[name].copy(), eps))
    for (prefix, params), grads in zip(groups, grad_groups, strict=True):
        if set(grads) != set(params):
            raise GradientCheckError(f"check_gradients: {_owner(model)}{prefix}gradients "
                                     f"have keys {sorted(grads)}, the parameters "
                                     f"{sorted(params)}", errors)
        for key, original in list(params.items()):
            def of_param(value: np.ndarray, params: Any = params, key: str = key) -> float:
                params[key] = from_host(value, place)
                return objective(fixed)
            try:
                expected = numeric_gradient(of_param, _host64(original), eps)
            finally:
                params[key] = original
            compare(f"{prefix}parameter {key}", grads[key], expected)
    if failures:
        failures.sort(key=lambda f: -f[0])
        lines = [f"check_gradients: {_owner(model)}{failures[0][1]}"]
        lines += [f"  also {line}" for _, line in failures[1:]]
        raise GradientCheckError("\n".join(lines), errors)
    return errors


def _first_layer(model: Any) -> Any:
    return model.layers[0] if isinstance(model, Network | RecurrentNetwork) else model


def _owner(model: Any) -> str:
    return f"{model!r}: " if isinstance(model, Layer) else f"{type(model).__name__}: "


def _host64(a: Array) -> np.ndarray:
    return np.array(to_numpy(a), dtype=np.float64)


def _host_input(model: Any, x: Any, takes_ids: bool, sequence: bool) -> np.ndarray:
    """``x`` as a host array: int64 ids, or float64 values, checked for what the model takes."""
    try:
        host = np.asarray(to_numpy(x))
    except TypeError:
        host = np.asarray(x)
    ndim = (2 if takes_ids else 3) if sequence else None
    if ndim is not None and host.ndim != ndim:
        shape = "(T, batch) ids" if takes_ids else "(T, batch, n_in)"
        raise ValueError(f"check_gradients: {model!r} takes a sequence of shape {shape}, got "
                         f"an array of shape {host.shape}")
    if host.size == 0:
        raise ValueError(f"check_gradients: the input is empty (shape {host.shape})")
    if takes_ids:
        if host.dtype.kind not in "iu":
            raise TypeError(f"check_gradients: {model!r} takes integer ids, got {host.dtype}")
        return host.astype(np.int64)
    if host.dtype.kind != "f":
        raise TypeError(f"check_gradients: the input must be floating point, got {host.dtype}")
    if not np.isfinite(host).all():
        raise ValueError("check_gradients: the input holds NaN or inf")
    return host.astype(np.float64)


def _place(model: Any) -> Backend:
    """Where the model's parameters live (the current backend for a model without any)."""
    layers = model.leaves()
    first = next((p for layer in layers for p in layer.params.values()), None)
    return get_backend() if first is None else backend_of(first)


def _named_groups(model: Any) -> list[tuple[str, Any]]:
    """``(prefix, params)`` for every parameter dict, in the order of ``backward``'s
    gradients: ``"layer 1 (LSTM) "`` in a network, ``"part 0 (FullyConnected) "`` inside a
    composite layer, ``""`` for a plain layer's own."""
    def of_layer(layer: Any, prefix: str) -> list[tuple[str, Any]]:
        leaves = layer.leaves()
        if leaves == [layer]:
            return [(prefix, layer.params)]
        return [(f"{prefix}part {j} ({leaf.kind}) ", leaf.params)
                for j, leaf in enumerate(leaves)]

    if isinstance(model, Layer):
        return of_layer(model, "")
    return [group for i, layer in enumerate(model.layers)
            for group in of_layer(layer, f"layer {i} ({layer.kind}) ")]


def _check_repeatable(model: Any, first: list[Array], again: list[Array]) -> None:
    """``ValueError`` unless two forward passes on the same input gave the same outputs
    (``first``, ``again``): differences of a model that draws at random each pass (``Dropout``
    while training) are noise, not its derivative."""
    if all(np.array_equal(_host64(a), _host64(b)) for a, b in zip(first, again, strict=True)):
        return
    drawing = [repr(leaf) for leaf in model.leaves() if getattr(leaf, "training", False)]
    hint = (f"{', '.join(drawing)} draws a new mask each pass while training: check with "
            "training off (net.set_training(False), or layer.training = False)" if drawing else
            "a layer draws at random each pass: fix its draws to check it")
    raise ValueError(f"check_gradients: {_owner(model)}two forward passes on the same input "
                     f"gave different outputs, so finite differences cannot check them; {hint}")


Case = tuple[list[str], Callable[[dict[str, np.ndarray]], float], dict[str, Any]]
"""The names of the arrays whose gradient is checked, the objective of every array's value
(by name), and backward's gradients by name, with ``"params"`` (the gradient dicts) and
``"at"`` (every array's value: the point checked)."""


def _batch_case(model: Any, host: np.ndarray, place: Backend, rng: np.random.Generator,
                takes_ids: bool) -> Case:
    """The arrays to vary, the objective and backward's gradients of a feed-forward model."""
    tape, y = model.forward(from_host(host, place))
    _check_repeatable(model, [y], [model.forward(from_host(host, place))[1]])
    r = rng.standard_normal(size=tuple(y.shape))

    def objective(values: dict[str, np.ndarray]) -> float:
        _, y = model.forward(from_host(values["input"], place))
        return float(np.sum(_host64(y) * r))

    grads, dx = model.backward(tape, from_host(r, place))
    grad_groups = grads if isinstance(grads, list) else [grads]
    if takes_ids:
        if dx is not None:
            raise GradientCheckError(f"check_gradients: {model!r}: backward gave an input "
                                     "gradient for integer ids (expected None)", {})
        return [], objective, {"params": grad_groups, "at": {"input": host}}
    return ["input"], objective, {"input": dx, "params": grad_groups, "at": {"input": host}}


def _sequence_case(model: Any, host: np.ndarray, state: Any, place: Backend,
                   rng: np.random.Generator, tape_policy: str | int, takes_ids: bool) -> Case:
    """The same for a recurrent layer or network over ``forward_sequence``: the inputs, each
    recurrent layer's initial state and the parameters, with the final states projected
    too."""
    network = isinstance(model, RecurrentNetwork)
    recurrent = model.recurrent_layers if network else [model]
    batch = host.shape[1]
    if state is None:
        states = [0.5 * rng.standard_normal(size=(batch, layer.state_size))
                  for layer in recurrent]
    else:
        given = list(state) if network else [state]
        if len(given) != len(recurrent):
            raise ValueError(f"check_gradients: state must be a list of {len(recurrent)} "
                             f"arrays, one per recurrent layer, got {len(given)}")
        states = [np.zeros((batch, layer.state_size)) if s is None else
                  np.array(np.broadcast_to(_host64(s), (batch, layer.state_size)))
                  for s, layer in zip(given, recurrent, strict=True)]
    names = (["initial state"] if not network else
             [f"layer {model.layers.index(layer)} ({layer.kind}) initial state"
              for layer in recurrent])

    def run(values: dict[str, np.ndarray]) -> tuple[Any, list[Array], Array]:
        on = [from_host(values[name], place) for name in names]
        tape, final, ys = model.forward_sequence(on if network else on[0],
                                                 from_host(values["input"], place),
                                                 tape=tape_policy)
        return tape, final if network else [final], ys

    start = {"input": host, **dict(zip(names, states, strict=True))}
    tape, final, ys = run(start)
    _, final_again, ys_again = run(start)
    _check_repeatable(model, [ys, *final], [ys_again, *final_again])
    r = rng.standard_normal(size=tuple(ys.shape))
    qs = [rng.standard_normal(size=tuple(s.shape)) for s in final]

    def objective(values: dict[str, np.ndarray]) -> float:
        _, final, ys = run(values)
        return float(np.sum(_host64(ys) * r)
                     + sum(np.sum(_host64(s) * q) for s, q in zip(final, qs, strict=True)))

    dfinal = [from_host(q, place) for q in qs]
    grads, dstate_0, dxs = model.backward_sequence(tape, dfinal if network else dfinal[0],
                                                   from_host(r, place))
    found = {"params": grads if network else [grads],
             **dict(zip(names, dstate_0 if network else [dstate_0], strict=True))}

    found["at"] = start
    arrays = list(names)
    if takes_ids:
        if dxs is not None:
            raise GradientCheckError(f"check_gradients: {model!r}: backward_sequence gave an "
                                     "input gradient for integer ids (expected None)", {})
    else:
        arrays = ["input", *arrays]
        found["input"] = dxs
    return arrays, objective, found


__all__ = ["GradientCheckError", "check_gradients", "numeric_gradient", "relative_errors",
           "worst_entry"]
