"""The losses users know, by ``torch.nn.functional``'s definitions at ``reduction='mean'``:
an elementwise term of the output ``y`` and the target ``t`` (``y``'s shape, real), averaged
over every element of ``y``, time steps, batch and features alike. Under a mask (``weights``,
0/1 of shape ``y.shape[:-1]``) the mean is over the elements of the examples that count, as a
torch user averages over them (``mse_loss(y[mask], t[mask])``): a masked example adds
nothing, its target is ignored (NaN too), and when none counts the loss and gradient are 0.
So a last-step target is torch's loss on the last output. Each returns ``(value, dy)`` as the
other losses do (``losses``), ``value`` a 0-d array, ``dy`` its gradient of ``y``'s shape.
"""

from __future__ import annotations

import math
from numbers import Real
from typing import Any

from .layers.base import Array
from .loss_targets import dense_target, weighted


def mean_squared_error(xp: Any, y: Array, target: Any, weights: Array | None = None):
    """torch's ``mse_loss``: the mean of ``(y − t)²`` over the elements; ``dy = 2(y − t)/n``.
    Not ``squared_error`` (½·Σ per example, averaged over the batch)."""
    r = y - dense_target(y, target, "mean_squared_error")
    return _mean(xp, y, r * r, 2 * r, weights)


def mean_absolute_error(xp: Any, y: Array, target: Any, weights: Array | None = None):
    """torch's ``l1_loss``: the mean of ``|y − t|`` over the elements; ``dy = sign(y − t)/n``,
    0 where ``y = t`` (as torch's)."""
    r = y - dense_target(y, target, "mean_absolute_error")
    return _mean(xp, y, xp.abs(r), xp.sign(r), weights)


def huber(xp: Any, y: Array, target: Any, weights: Array | None = None, *,
          delta: float = 1.0):
    """torch's ``huber_loss``: the mean over the elements of ``½r²`` where ``|r| < delta``,
    else ``delta·(|r| − ½delta)`` (``r = y − t``); ``dy = clip(r, −delta, delta)/n``. ``delta``
    finite and > 0; ``loss="huber"`` takes 1.0, ``functools.partial(huber, delta=0.5)``
    another."""
    delta = _checked("huber", "delta", delta, False)
    r = y - dense_target(y, target, "huber")
    return _mean(xp, y, *_huber_terms(xp, r, delta), weights)


def smooth_l1(xp: Any, y: Array, target: Any, weights: Array | None = None, *,
              beta: float = 1.0):
    """torch's ``smooth_l1_loss``: ``huber`` with ``delta = beta``, divided by ``beta``
    (``½r²/beta`` where ``|r| < beta``, else ``|r| − ½beta``); ``beta`` finite and ≥ 0, 0 giving
    ``mean_absolute_error`` (as torch's); ``functools.partial(smooth_l1, beta=0.5)`` another."""
    beta = _checked("smooth_l1", "beta", beta, True)
    if beta == 0:
        return mean_absolute_error(xp, y, target, weights)
    r = y - dense_target(y, target, "smooth_l1")
    value, grad = _huber_terms(xp, r, beta)
    return _mean(xp, y, value / beta, grad / beta, weights)


def binary_cross_entropy_with_logits(xp: Any, y: Array, target: Any,
                                     weights: Array | None = None):
    """torch's ``binary_cross_entropy_with_logits``: the mean over the elements of
    ``−t·log σ(y) − (1 − t)·log(1 − σ(y))`` on logits ``y``, as ``max(y, 0) − y·t +
    log1p(exp(−|y|))`` (finite at any logit); ``dy = (σ(y) − t)/n``. Targets are probabilities
    in [0, 1] (soft ones too); one outside raises ``ValueError`` (torch takes it), which reads
    one value from the device."""
    t = dense_target(y, target, "binary_cross_entropy_with_logits")
    outside = (t < 0) | (t > 1)
    if weights is not None:
        outside = outside & (weights > 0)[..., None]
    if bool(xp.any(outside)):
        raise ValueError("binary_cross_entropy_with_logits: target must hold probabilities in "
                         "[0, 1], got one outside")
    e = xp.exp(-xp.abs(y))
    sigmoid = xp.where(y >= 0, 1 / (1 + e), e / (1 + e))
    value = xp.where(y > 0, y, xp.zeros_like(y)) - y * t + xp.log1p(e)
    return _mean(xp, y, value, sigmoid - t, weights)


def _huber_terms(xp: Any, r: Array, delta: float) -> tuple[Array, Array]:
    """Huber's elementwise term of the residuals ``r`` and its derivative."""
    size = xp.abs(r)
    small = size < delta
    return (xp.where(small, 0.5 * r * r, delta * (size - 0.5 * delta)),
            xp.where(small, r, delta * xp.sign(r)))


def _mean(xp: Any, y: Array, terms: Array, grad: Array, weights: Array | None):
    """``(value, dy)``: the mean of the elementwise ``terms`` over the elements that count
    (``weights``), and ``grad``, their derivatives, divided by that count."""
    per_example, grad = weighted(xp, xp.sum(terms, axis=-1), grad, weights)
    if weights is None:
        count = max(math.prod(y.shape), 1)
    else:
        kept = xp.sum(xp.astype(weights > 0, y.dtype)) * y.shape[-1]
        count = xp.where(kept > 0, kept, xp.ones_like(kept))
    return xp.sum(per_example) / count, grad / count


def _checked(name: str, what: str, value: Any, zero_ok: bool) -> float:
    """``value`` as a float if it is a finite real number > 0 (≥ 0 if ``zero_ok``); else
    ``TypeError`` or ``ValueError`` in one line naming it."""
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"{name}: {what} must be a real number, got {type(value).__name__}")
    value = float(value)
    if not (math.isfinite(value) and (value >= 0 if zero_ok else value > 0)):
        raise ValueError(f"{name}: {what} must be finite and {'>=' if zero_ok else '>'} 0, "
                         f"got {value!r}")
    return value
