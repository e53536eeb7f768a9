"""check_no_recompute: a layer's backward pass evaluates none of the transcendental functions its
forward pass evaluated; what the derivative needs of them is on the tape.

The layer's own ``_forward`` and ``_backward`` (a recurrent layer's ``_forward_step`` and
``_backward_step``) run on a namespace that counts the calls to ``WATCHED``, so nothing needs
declaring: the forward pass shows which it evaluates. It checks the generic code, the reference
every fast path is tested against (the counting namespace is no backend's own, so no fast path
is taken).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .backend import backend_of, from_host, zeros_like_place
from .layers.base import Layer, RecurrentLayer
from .layers.edges import prepare_ids, prepare_input
from .layers.embedding import Embedding

WATCHED = ("exp", "expm1", "log", "log1p", "tanh", "sqrt")
"""The functions counted: what a tape keeps the results of (σ in its tanh form, softmax's exp,
a norm's square root)."""


class RecomputeError(AssertionError):
    """A backward pass evaluated a function its forward pass had evaluated."""


class CountingNamespace:
    """An array namespace that counts the calls to the functions ``watched`` (``WATCHED``)
    in ``calls`` and passes everything through."""

    def __init__(self, xp: Any, watched: tuple[str, ...] = WATCHED) -> None:
        self._xp = xp
        self.calls = dict.fromkeys(watched, 0)

    def __getattr__(self, name: str) -> Any:
        function = getattr(self._xp, name)
        if name not in self.calls:
            return function

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            return function(*args, **kwargs)

        return counted

    @property
    def total(self) -> int:
        """Calls counted, all functions together."""
        return sum(self.calls.values())


def check_no_recompute(layer: Layer, x: Any) -> dict[str, tuple[int, int]]:
    """``{function: (calls in forward, calls in backward)}`` for each of ``WATCHED`` the forward
    pass of ``layer`` on ``x`` (a batch of its inputs, as ``forward`` takes, on its backend or
    as a host numpy array: integer ids for an ``Embedding``; one step of a recurrent layer,
    from a zero state) evaluated;
    ``RecomputeError`` naming the layer and the functions when backward evaluates any of them
    again. A composite layer is refused
    (``ValueError``: check its parts), as is anything that is not a layer (``TypeError``)."""
    if not isinstance(layer, Layer):
        raise TypeError(f"check_no_recompute: takes a layer, got {type(layer).__name__}")
    if layer.composite:
        raise ValueError(f"check_no_recompute: {layer!r} is a composite; check its parts")
    reference = layer._reference()
    if isinstance(x, np.ndarray) and reference is not None:  # host input: to the layer
        x = from_host(x, backend_of(reference))
    owner = f"check_no_recompute: {layer!r}"
    if isinstance(layer, Embedding):  # its input: integer ids, as its forward takes them
        xp, x, _ = prepare_ids(x, vocab=layer.vocab, reference=reference, owner=owner,
                               taker=repr(layer))
    else:
        xp, x, _ = prepare_input(x, n_features=layer.input_shape, dtype=layer.dtype,
                                 reference=reference, owner=owner)
    forward, backward = CountingNamespace(xp), CountingNamespace(xp)
    if isinstance(layer, RecurrentLayer):
        state = zeros_like_place((x.shape[0], layer.state_size), x)
        tape, next_state, y = layer._forward_step(forward, state, x)
        layer._backward_step(backward, tape, xp.ones_like(next_state), xp.ones_like(y))
    else:
        tape, y = layer._forward(forward, x)
        layer._backward(backward, tape, xp.ones_like(y))
    found = {name: (n, backward.calls[name]) for name, n in forward.calls.items() if n}
    again = {name: calls for name, (_, calls) in found.items() if calls}
    if again:
        words = ", ".join(f"{name} {n} time{'s' * (n > 1)}" for name, n in again.items())
        raise RecomputeError(f"check_no_recompute: {layer!r}: backward evaluates {words}, "
                             "which the forward pass evaluated: keep what the derivative needs "
                             "of it on the tape")
    return found

