"""RecurrentNetwork: recurrent and feed-forward layers over sequences, with backprop through time.

Sequences are ``(T, batch, features)`` (or ``(T, features)`` for one example). The state is a
list with one array per recurrent layer. Feed-forward layers see all ``T·batch`` rows at once.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable
from typing import Any, cast

import numpy as np

from .backend import device_context_of, out_module
from .checkpointing import (
    CheckpointedTape,
    segment_length,
    sequence_backward,
    sequence_forward,
)
from .layers.base import Array, Layer, RecurrentLayer
from .layers.edges import check_not_empty, check_size, prepare_like, read_only, restore
from .network import Chain
from .stack import RecurrentNetworkTape
from .switches import held

PREDICT_CHUNK = 512
"""The time steps ``predict_sequence`` runs at a time by default."""


class RecurrentNetwork(Chain):
    """A chain of recurrent (``LSTM``, ``StandardLSTM``, ``GRU``, ``BasicRecurrent``, in any
    mix) and feed-forward layers, e.g. Grenade's ``[LSTM(40, 80), LSTM(80, 40),
    FullyConnected(40, 40), Logit()]``."""

    def __init__(self, layers: Iterable[Layer]) -> None:
        layers = list(layers)
        for k, layer in enumerate(layers):
            if getattr(layer, "composite", False) or isinstance(layer, list | tuple) or \
                    callable(getattr(layer, "as_layer", None)):
                raise TypeError(f"RecurrentNetwork: layer {k} {layer!r} is not a recurrent or "
                                "feed-forward layer of features (composite layers, networks "
                                "and lists chain in a Network)")
            if getattr(layer, "spatial", False):
                raise TypeError(f"RecurrentNetwork: layer {k} {layer!r} works on images; a "
                                "RecurrentNetwork chains layers of features (use a Network)")
        super().__init__(layers)

    @property
    def recurrent_layers(self) -> list[RecurrentLayer]:
        """The recurrent layers in order, read from ``layers`` (so a layer put in or taken out
        after construction counts: one state each)."""
        return [cast(RecurrentLayer, layer) for layer in self.layers if layer.recurrent]

    def initial_state(self, batch: int | None = None) -> list[Array]:
        """Zero states, one per recurrent layer: ``(batch, o)``, or ``(o,)`` when batch is None."""
        return [layer.initial_state(batch) for layer in self.recurrent_layers]

    def _check_states(self, state: Any, batch: int, copy: bool = False) -> list[Array]:
        """One checked state per recurrent layer; ``state`` None, or an entry None, is zeros."""
        layers = self.recurrent_layers  # read from ``layers`` once
        count = len(layers)
        if state is None:
            state = [None] * count
        if not isinstance(state, list | tuple) or len(state) != count:
            got = f"a {type(state).__name__}"
            if isinstance(state, list | tuple):
                got += f" of {len(state)}"
            raise ValueError(
                f"RecurrentNetwork: state must be a list of {count} arrays (one per recurrent "
                f"layer, as initial_state() gives), got {got}"
            )
        return [layer._check_state(s, batch, copy)
                for layer, s in zip(layers, state, strict=True)]

    @held
    def forward_sequence(
        self, state: Any, xs: Any, *, tape: str | int = "full"
    ) -> tuple[RecurrentNetworkTape | CheckpointedTape, list, Array]:
        """``(tape, state_T, ys)`` for ``xs`` ``(T, batch, n_in)`` or ``(T, n_in)``, from
        ``state``: a list like ``initial_state``'s, one per recurrent layer, or None for zeros
        (as is an entry None).

        ``tape`` is the tape policy: ``"full"`` keeps every layer's tape of every step;
        ``"sqrt"`` or an integer k keeps a ``CheckpointedTape`` (the states every ⌈√T⌉ or k
        steps, and the inputs), from which ``backward_sequence`` recomputes one segment at a
        time: about one more forward pass, for memory that grows with T/k + k instead of T.
        The gradients equal the full tape's to float rounding (each segment's weight gradients
        are their own products, summed)."""
        xp, xs, single = self._prepare_sequence(  # a checkpointed tape keeps the inputs
            xs, copy=self.layers[0].keeps_input or tape != "full")
        every = segment_length(tape, xs.shape[0])
        states = self._check_states(state, xs.shape[1], copy=True)
        kept, states, ys = self._forward_sequence(xp, states, xs, every)
        return kept, [read_only(restore(s, single)) for s in states], read_only(restore(ys, single))

    @held
    def backward_sequence(
        self, tape: RecurrentNetworkTape, dstate_T: Any, dys: Any
    ) -> tuple[list[dict[str, Array]], list[Array], Array]:
        """``(grads, dstate_0, dxs)`` by backprop through time.

        ``dstate_T`` is None (zeros) or a list of state gradients like ``initial_state``'s, one
        per recurrent layer (an entry None: zeros); ``dys`` ``(T, batch, n_out)`` or
        ``(T, n_out)``. The order is the recurrent layers' ``backward_sequence(tape, dstate_T,
        dys)``; an array as ``dstate_T`` (the other order) raises ``ValueError``.
        """
        if not isinstance(tape, RecurrentNetworkTape | CheckpointedTape):
            raise ValueError(
                f"RecurrentNetwork: expected the tape forward_sequence returned, got a "
                f"{type(tape).__name__}"
            )
        if dstate_T is not None and not isinstance(dstate_T, list | tuple):
            raise ValueError(
                "RecurrentNetwork: backward_sequence takes (tape, dstate_T, dys), dstate_T None "
                f"or a list of {len(self.recurrent_layers)} arrays (one per recurrent layer); got "
                f"a {type(dstate_T).__name__} of shape {tuple(np.shape(dstate_T))} as dstate_T: "
                "dys in its place?"
            )
        if isinstance(tape, RecurrentNetworkTape):
            self._check_tapes(tape.tapes)
            reference = self._gradient_reference(tape.tapes[0])
        else:
            reference = self._input_reference(tape.xs)
        width = self.n_out if self.n_out is not None else reference.shape[-1]
        shape = (tape.steps, tape.batch, width)
        xp, dys, single = prepare_like(dys, shape, reference, "RecurrentNetwork", "dys")
        dstates = None
        if dstate_T is not None:
            dstates = self._check_states(dstate_T, tape.batch)
        grads, dstates, dxs = self._backward_sequence(xp, tape, dstates, dys)
        return (grads, [restore(d, single) for d in dstates],
                None if dxs is None else restore(dxs, single))

    def step(self, state: Any, x: Any) -> tuple[list[Array], Array]:
        """``predict_step``'s former name, kept working (``step`` also names an optimizer's
        update)."""
        return self.predict_step(state, x)

    def predict_step(self, state: Any, x: Any) -> tuple[list[Array], Array]:
        """One time step through the whole stack without a tape, for generation (one step of
        ``predict_sequence``): ``(state_next, y)``; ``state`` as in ``forward_sequence``
        (None: zeros)."""
        xp, x, single = self._prepare(x)
        states = self._check_states(state, x.shape[0])
        _, states, ys = self._forward_sequence(xp, states, x[None, ...])
        return [restore(s, single) for s in states], restore(ys[0, ...], single)

    def predict_sequence(
        self, state: Any, xs: Any, *, outputs: str = "all", chunk: int = PREDICT_CHUNK
    ) -> tuple[list[Array], Array]:
        """``(state_T, ys)`` for ``xs`` ``(T, batch, n_in)`` or ``(T, n_in)`` without a tape,
        for inference over long sequences: the steps run ``chunk`` at a time and each chunk's
        tape is dropped before the next, so the memory besides the outputs does not grow with
        T. ``outputs="all"`` returns every step's output (as ``forward_sequence``, to float
        rounding: each chunk projects its own inputs), ``"last"`` only the last step's,
        ``(batch, n_out)`` or ``(n_out,)``: then the memory is constant in T. ``state`` as in
        ``forward_sequence``; ``Dropout`` follows ``set_training`` as everywhere (switch it
        off for inference)."""
        if outputs not in ("all", "last"):
            raise ValueError(f"RecurrentNetwork: outputs must be 'all' or 'last', got "
                             f"{outputs!r}")
        chunk = check_size("RecurrentNetwork", "chunk", chunk)
        xp, xs, single = self._prepare_sequence(xs)
        states = self._check_states(state, xs.shape[1])
        pieces: list[Array] = []  # every chunk's outputs, or only the last chunk's
        steps = xs.shape[0]
        for start in range(0, steps, chunk):
            stop = min(start + chunk, steps)  # the array API leaves stops past the end open
            _, states, ys = self._forward_sequence(xp, states, xs[start:stop, ...])
            if outputs == "last":
                pieces.clear()  # what an earlier chunk's output holds goes with it
            pieces.append(ys)
        ys = pieces[0] if len(pieces) == 1 else xp.concat(pieces, axis=0)
        if outputs == "last":
            ys = ys[-1, ...]
        return ([read_only(restore(s, single)) for s in states],
                read_only(restore(ys, single)))

    def _prepare_sequence(self, xs: Any, copy: bool = False) -> tuple[Any, Array, bool]:
        xp, xs, single = self._prepare(
            xs, leading=("time", "batch"), what="input sequence", copy=copy
        )
        check_not_empty(xs, "RecurrentNetwork")
        return xp, xs, single

    def _forward_sequence(
        self, xp: Any, states: list[Array], xs: Array, every: int | None = None
    ) -> tuple[RecurrentNetworkTape | CheckpointedTape, list[Array], Array]:
        """``checkpointing.sequence_forward`` of the layers: the full tape, or with ``every``
        a checkpointed one."""
        return sequence_forward(self.layers, xp, states, xs, every)

    def _backward_sequence(
        self, xp: Any, tape: RecurrentNetworkTape | CheckpointedTape,
        dstates: list[Array | None] | None, dys: Array, need_dxs: bool = True,
        grads_out: list[dict[str, Array] | None] | None = None, need_dstates: bool = True,
    ) -> tuple[list[dict[str, Array]], list[Array | None], Array | None]:
        """``checkpointing.sequence_backward`` of the layers, from either kind of tape."""
        return sequence_backward(self.layers, xp, tape, dstates, dys, need_dxs, grads_out,
                                 need_dstates)


_GRADIENT_BUFFERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def gradient_buffers(rnet: RecurrentNetwork) -> list[dict[str, Array] | None]:
    """Per layer, arrays shaped like the numpy or CuPy parameters of a layer that fills them
    (``Layer.fills_gradient_buffers``: ``LSTM``, ``StandardLSTM``, ``GRU`` and
    ``FullyConnected``), for training code to receive its gradients in (None for the other
    layers), kept between calls while the parameters keep their shapes and place and every
    numpy one takes writes. Only for gradients that are used up at once (handed to
    ``optimizer.step``): the next call overwrites them, unless one of them was made read-only
    (``a.flags.writeable = False``: a way to keep a call's gradients), when all are new."""
    cached = _GRADIENT_BUFFERS.get(rnet)
    if cached is not None and _fit(cached, _buffer_targets(rnet)):
        return cached
    buffers = [None if params is None else {k: _empty_like(p) for k, p in params.items()}
               for params in _buffer_targets(rnet)]
    _GRADIENT_BUFFERS[rnet] = buffers
    return buffers


def kept_gradient_buffers(rnet: RecurrentNetwork) -> list[dict[str, Array] | None] | None:
    """The arrays ``gradient_buffers`` keeps for ``rnet`` now (None: none), unchecked: a
    caller that checked them once sees that they are still the ones kept."""
    return _GRADIENT_BUFFERS.get(rnet)


def _fit(buffers: list[dict[str, Array] | None], targets: list[dict[str, Array] | None]
         ) -> bool:
    """Whether ``buffers`` are shaped and placed like ``targets`` and take writes (loops, not
    generators: a training call asks this once)."""
    if len(buffers) != len(targets):
        return False
    for b, fresh in zip(buffers, targets, strict=True):
        if (b is None) != (fresh is None):
            return False
        for k, p in (fresh or {}).items():
            a = b[k]  # type: ignore[index]
            if type(a) is not type(p) or a.shape != p.shape or a.dtype != p.dtype or (
                    a.device != p.device) or (type(a) is np.ndarray and not a.flags.writeable):
                return False
    return True


def _buffer_targets(rnet: RecurrentNetwork) -> list[dict[str, Array] | None]:
    return [layer.params if layer.fills_gradient_buffers and all(
        out_module(p) is not None for p in layer.params.values()) else None
        for layer in rnet.layers]


def _empty_like(p: Array) -> Array:
    with device_context_of(p):
        return out_module(p).empty_like(p)
