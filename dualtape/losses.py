"""Losses: each is ``loss(xp, y, target, weights=None) -> (value, dy)``, ``value`` a 0-d array
(left on the device), ``dy`` its gradient with respect to ``y`` (``y``'s shape). ``xp`` is
``y``'s namespace. They are the names ``train``/``train_recurrent`` take as ``loss=``; any
callable of this signature may be given there or to ``backpropagate``/``backpropagate_sequence``
instead (``weights`` is passed only with a mask), and a custom loop may call them itself:
``value, dys = squared_error(xp, ys, targets)``.

Grenade's three sum over examples and time steps (those an optional 0/1 ``weights`` array of
shape ``y.shape[:-1]`` keeps) and divide by the batch size ``y.shape[-2]``:

- ``squared_error``: ½·Σ(y − t)² per example, so at batch 1 ``dy`` is Grenade's ``y − t``.
- ``softmax_cross_entropy``: −Σ t·log softmax(y) on logits ``y``, stable; ``dy = softmax(y) − t``.
- ``cross_entropy``: −Σ t·log y on probabilities (a network ending in ``Softmax``).

torch's (``mean_losses``: ``mean_squared_error``, ``mean_absolute_error``, ``huber``,
``smooth_l1``, ``binary_cross_entropy_with_logits``) average over the elements that count.
``loss=`` takes each by its name here or by an alias in ``ALIASES`` (``"mse"``, ``"l1"``...).

Targets have ``y``'s shape; the cross entropies also take integer class labels of shape
``y.shape[:-1]`` (on the network's backend, like any target; Python lists go there), with no
one-hot target built (the value is read at the labels, the gradient's 1 subtracted there); other
non-float labels (boolean, complex, strings) raise ``TypeError``, as do integer targets for
``squared_error`` and float targets shaped like labels (each saying what to do instead).
``check_loss_for`` refuses, before training, a loss that cannot fit the network's output.
On numpy, ``softmax_cross_entropy`` at labels without ``weights`` runs compiled where the CPU
loops are (``kernels.numba_softmax_cross_entropy``: the same value and gradient up to rounding).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .backend import backend_of, check_same_place, from_host, namespace_of
from .kernels import loss_loops
from .layers.base import Array
from .layers.edges import prepare_like
from .loss_targets import dense_target, on_device, weighted
from .mean_losses import (
    binary_cross_entropy_with_logits,
    huber,
    mean_absolute_error,
    mean_squared_error,
    smooth_l1,
)

Loss = Callable[..., tuple[Array, Array]]


def _class_target(xp: Any, y: Array, target: Any) -> tuple[Array, bool]:
    """``target`` checked against ``y`` for a cross entropy: ``(labels, True)`` for integer
    class labels (of shape ``y.shape[:-1]``, each in ``[0, n)``), else ``(t, False)`` for a
    dense target of ``y``'s shape."""
    if _numpy_labels(y, target):  # labels on numpy, as given: the checks in short
        _check_range(target, y.shape[-1])
        return target, True
    target = on_device(y, target)
    if _is_label_array(target):
        return _checked_labels(xp, y, target), True
    shape = tuple(np.shape(target))
    if y.shape[-1] > 1 and shape == tuple(y.shape[:-1]):
        raise TypeError(
            f"loss: a target of shape {shape} holds class labels, which must be integers: "
            f"convert them (t.astype(int)), or give targets of shape {tuple(y.shape)}"
        )
    return prepare_like(target, tuple(y.shape), y, "loss", "target")[1], False


def _check_range(labels: np.ndarray, n: int) -> None:
    """``_outside`` unless every one of the numpy ``labels`` is in ``[0, n)``."""
    if labels.size and (labels.min() < 0 or labels.max() >= n):
        raise _outside(n)


def _numpy_labels(y: Array, target: Any) -> bool:
    """Whether ``target`` is a numpy array of integer labels for numpy logits ``y`` as given
    (shape ``y.shape[:-1]``), their range not yet checked."""
    return type(target) is np.ndarray and type(y) is np.ndarray and (
        target.dtype.kind in "iu") and target.shape == y.shape[:-1]


def _is_label_array(target: Any) -> bool:
    """True for an array meant as class labels (not real floating); only integers are valid."""
    try:
        txp = namespace_of(target)
    except TypeError:
        return False
    if txp.isdtype(target.dtype, "real floating"):
        return False
    if not txp.isdtype(target.dtype, "integral"):
        raise TypeError(
            f"loss: class labels must be integers, got {target.dtype}; dense targets must be "
            "real floating point"
        )
    return True


def _checked_labels(xp: Any, y: Array, labels: Array) -> Array:
    """Class labels of ``y``'s shape less its class axis (a trailing axis of 1 there taken
    too), each in ``[0, n)``; the range check reads one value from the device."""
    check_same_place(labels, y, "target", "the network output")
    n, shape = y.shape[-1], tuple(y.shape[:-1])
    allowed = [shape] + ([shape[:-1]] if shape[-1] == 1 else [])
    if tuple(labels.shape) not in allowed:
        raise ValueError(f"loss: integer labels must have shape {shape}, got {tuple(labels.shape)}")
    labels = xp.reshape(labels, shape)
    if bool(xp.any((labels < 0) | (labels >= n))):
        raise _outside(n)
    return labels


def _outside(n: int) -> ValueError:
    return ValueError(f"loss: class labels must lie in [0, {n}), got one outside")


def _at_labels(xp: Any, a: Array, labels: Array) -> Array:
    """``a[..., labels]``: each row's entry at its label, shape ``labels.shape``."""
    return xp.take_along_axis(a, xp.astype(labels, xp.int64)[..., None], axis=-1)[..., 0]


def _hits(xp: Any, y: Array, labels: Array) -> Array:
    """Booleans of ``y``'s shape, True at each row's label."""
    return labels[..., None] == xp.arange(y.shape[-1], device=y.device)


def squared_error(xp: Any, y: Array, target: Any, weights: Array | None = None):
    """½·Σ(y − t)² per example, averaged over the batch."""
    diff = y - dense_target(y, target, "squared_error")
    per_example, diff = weighted(xp, 0.5 * xp.sum(diff * diff, axis=-1), diff, weights)
    batch = y.shape[-2]
    return xp.sum(per_example) / batch, diff / batch


def softmax_cross_entropy(xp: Any, y: Array, target: Any, weights: Array | None = None):
    """Cross entropy of softmax(y) against ``target``, averaged over the batch. With class
    labels, ``−log_p`` at each label and ``softmax(y)`` less 1 there: no one-hot target."""
    as_given = weights is None and _numpy_labels(y, target)  # range checked below
    t, labelled = (target, True) if as_given else _class_target(xp, y, target)
    if labelled and weights is None:
        compiled = _compiled_at_labels(y, t)  # the labels' range checked in its pass
        if compiled is not None:
            return compiled
        if as_given:
            _check_range(t, y.shape[-1])
    return _softmax_cross_entropy(xp, y, t, labelled, weights)


def _softmax_cross_entropy(xp: Any, y: Array, t: Array, labelled: bool,
                           weights: Array | None) -> tuple[Array, Array]:
    """``softmax_cross_entropy``'s generic code, its target checked: labels if ``labelled``."""
    z = y - xp.max(y, axis=-1, keepdims=True)
    log_p = z - xp.log(xp.sum(xp.exp(z), axis=-1, keepdims=True))
    p = xp.exp(log_p)
    if labelled:
        per_example, diff = -_at_labels(xp, log_p, t), xp.where(_hits(xp, y, t), p - 1, p)
    else:
        per_example, diff = -xp.sum(t * log_p, axis=-1), p - t
    per_example, diff = weighted(xp, per_example, diff, weights)
    batch = y.shape[-2]
    return xp.sum(per_example) / batch, diff / batch


def _compiled_at_labels(y: Array, labels: Array) -> tuple[Array, Array] | None:
    """``softmax_cross_entropy`` of logits ``y`` at integer ``labels`` of shape
    ``y.shape[:-1]`` by the compiled loops (``kernels.numba_softmax_cross_entropy``) on numpy,
    or None where they do not run; a label outside ``[0, n)`` raises ``_outside``."""
    if type(y) is not np.ndarray or y.ndim < 2 or y.size == 0:
        return None
    loops = loss_loops(y, _check_compiled)
    if loops is None:
        return None
    n = y.shape[-1]
    if labels.dtype != np.int64:
        labels = labels.astype(np.int64)  # an unsigned one past int64 wraps: outside
    try:
        value, dy = loops.softmax_cross_entropy(
            (y if y.flags.c_contiguous else np.ascontiguousarray(y)).reshape(-1, n),
            labels.reshape(-1), 1.0 / y.shape[-2])
    except loops.LabelsOutside:
        raise _outside(n) from None
    return y.dtype.type(value), dy.reshape(y.shape)


def _check_compiled(loops: Any, like: Array) -> str | None:
    """How the compiled ``loops`` disagree with the generic ``softmax_cross_entropy`` at labels
    on logits of ``like``'s dtype (rows of large and tiny spread, a row whose label's
    probability underflows), beyond rounding, or None."""
    rng = np.random.default_rng(0)
    y = (rng.standard_normal((3, 4, 9)) * np.array([1e-3, 1, 30])[:, None, None]).astype(
        like.dtype)
    y[2, 0, 0] = -200  # the label's probability is 0 in any float: the loss stays finite
    labels = rng.integers(0, 9, (3, 4))
    labels[2, 0] = 0
    want = _softmax_cross_entropy(np, y, labels, True, None)
    got = loops.softmax_cross_entropy(y.reshape(-1, 9), labels.reshape(-1), 1 / 4)
    tol = 64 * float(np.finfo(like.dtype).eps)
    if not np.allclose(got[1].reshape(y.shape), want[1], rtol=tol, atol=tol / 4) or (
            not np.isclose(got[0], want[0], rtol=tol, atol=0)):
        return "the softmax cross entropy at labels differs from the generic code beyond rounding"
    return None


def cross_entropy(xp: Any, y: Array, target: Any, weights: Array | None = None):
    """−Σ t·log y for probabilities ``y``, averaged over the batch; ``dy = −t / y``. With
    class labels, ``−log y`` at each label and ``−1 / y`` there, 0 elsewhere."""
    t, labelled = _class_target(xp, y, target)
    if labelled:
        hits = _hits(xp, y, t)
        safe = xp.where(hits, y, xp.ones_like(y))
        per_example = -xp.log(_at_labels(xp, y, t))
        grad = xp.where(hits, -1 / safe, xp.zeros_like(y))
    else:
        safe = xp.where(t > 0, y, xp.ones_like(y))
        per_example, grad = -xp.sum(t * xp.log(safe), axis=-1), -t / safe
    per_example, grad = weighted(xp, per_example, grad, weights)
    batch = y.shape[-2]
    return xp.sum(per_example) / batch, grad / batch


LOSSES: dict[str, Loss] = {
    "squared_error": squared_error,
    "softmax_cross_entropy": softmax_cross_entropy,
    "cross_entropy": cross_entropy,
    "mean_squared_error": mean_squared_error,
    "mean_absolute_error": mean_absolute_error,
    "huber": huber,
    "smooth_l1": smooth_l1,
    "binary_cross_entropy_with_logits": binary_cross_entropy_with_logits,
}
"""The losses by name, each a function of this module."""
ALIASES = {
    "mse": "mean_squared_error", "mae": "mean_absolute_error", "l1": "mean_absolute_error",
    "bce_with_logits": "binary_cross_entropy_with_logits",
    "cross_entropy_with_logits": "softmax_cross_entropy",
    "categorical_crossentropy": "cross_entropy",
}
"""The other names ``loss=`` takes: torch's and Keras's for the same loss."""


def loss_function(name: str) -> Loss:
    """The loss called ``name`` (or an alias of it); an unknown name raises ``ValueError``
    listing the known ones."""
    try:
        return LOSSES[ALIASES.get(name, name)]
    except (KeyError, TypeError):
        raise ValueError(
            f"unknown loss {name!r}; known losses: {', '.join(LOSSES)}; aliases: "
            + ", ".join(f"{alias} ({known})" for alias, known in ALIASES.items())) from None


def takes_labels(name: str) -> bool:
    """Whether the loss called ``name`` (a known one) takes integer class labels: the two
    cross entropies."""
    return loss_function(name) in (softmax_cross_entropy, cross_entropy)


def check_loss_for(name: str, last: Any, n_out: int | None, where: str) -> None:
    """Raise ``ValueError`` when the loss ``name`` cannot fit a network whose last layer is
    ``last`` with ``n_out`` outputs: ``softmax_cross_entropy`` takes logits, so not the
    probabilities of a final ``Softmax`` (a softmax of a softmax trains, but towards the
    wrong loss), nor does ``binary_cross_entropy_with_logits`` after a ``Softmax`` or
    ``Logit``; ``cross_entropy`` takes probabilities, so needs that ``Softmax`` (on other
    outputs its log is of numbers that need not lie in (0, 1]); neither cross entropy takes
    one output, whose softmax is 1 whatever the input."""
    objective, ends = loss_function(name), getattr(last, "kind", None)
    if objective is softmax_cross_entropy and ends == "Softmax":
        raise ValueError(
            f"{where}: loss={name!r} takes logits, but the network ends in "
            "Softmax, so it would take the softmax of probabilities: use loss='cross_entropy', "
            "or drop the final Softmax"
        )
    if objective is binary_cross_entropy_with_logits and ends in ("Softmax", "Logit"):
        raise ValueError(
            f"{where}: loss={name!r} takes logits, but the network ends in {ends}, so it "
            f"would take the sigmoid of probabilities: drop the final {ends}"
        )
    if objective is cross_entropy and ends != "Softmax":
        raise ValueError(
            f"{where}: loss={name!r} takes the probabilities of a final Softmax, but the "
            f"network ends in {last!r}: use loss='softmax_cross_entropy' (its outputs as "
            "logits, torch's cross_entropy), or add a Softmax"
        )
    if takes_labels(name) and n_out == 1:
        raise ValueError(
            f"{where}: loss={name!r} over one output is a softmax over one class, 1 whatever "
            "the input: give the network one output per class (2 for two classes), or use "
            "loss='binary_cross_entropy_with_logits' on its one output"
        )


def mask_weights(mask: Any, steps: int, batch: int, reference: Array) -> Array:
    """``(T, batch)`` 0/1 weights in ``reference``'s dtype from a mask ``(T,)`` or ``(T, batch)``:
    boolean, or real numbers that are all 0 or 1 (1 = the step has a target). Any other dtype
    raises ``TypeError``, other values (NaN, 2, -1) ``ValueError``."""
    if isinstance(mask, list | tuple):
        host = np.asarray(mask)
        if host.dtype.kind not in "biuf":
            raise TypeError(f"train_recurrent: mask must be boolean or real 0/1, got {host.dtype}")
        mask = from_host(host, backend_of(reference))
    try:
        xp = namespace_of(mask)
    except TypeError:
        raise TypeError(f"train_recurrent: mask must be an array, got {type(mask).__name__}") \
            from None
    check_same_place(mask, reference, "mask", "the network")
    if not xp.isdtype(mask.dtype, ("bool", "integral", "real floating")):
        raise TypeError(f"train_recurrent: mask must be boolean or real 0/1, got {mask.dtype}")
    if tuple(mask.shape) == (steps,):
        mask = xp.broadcast_to(mask[:, None], (steps, batch))
    elif tuple(mask.shape) != (steps, batch):
        raise ValueError(
            f"train_recurrent: mask must have shape ({steps},) or ({steps}, {batch}), "
            f"got {tuple(mask.shape)}"
        )
    if mask.dtype == xp.bool:
        return xp.astype(mask, reference.dtype)
    if not bool(xp.all((mask == 0) | (mask == 1))):
        raise ValueError("train_recurrent: a real mask must hold only 0 and 1 (no NaN)")
    return xp.astype(mask, reference.dtype)
