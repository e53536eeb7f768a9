"""Network: a checked chain of feed-forward layers, forward and backward over their tapes."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .backend import (
    Backend,
    backend_of,
    dtype_name,
    move,
    resolve_backend,
)
from .layers.base import Array, Layer, tape_array
from .layers.chain import (  # noqa: F401  (check_chain and feature_count: imported from here)
    backward_chain,
    check_chain,
    check_distinct,
    check_same_params,
    feature_count,
    forward_chain,
)
from .layers.edges import (
    holds_integers,
    prepare_ids,
    prepare_input,
    prepare_like,
    read_only,
    restore,
)
from .layers.embedding import Embedding
from .layers.sequential import Sequential, as_layers
from .switches import held


class Chain:
    """What every network shares: the layer list, size checks, parameters and moving them.

    ``input_shape`` and ``output_shape()`` are what one example looks like going in and coming
    out, spelled as a layer's (``Layer.input_shape``; None: any shape); ``in_shape`` and
    ``out_shape`` are their former names, kept working; ``n_in``/``n_out`` their feature
    counts, or None for any size or for images."""

    def __init__(self, layers: Iterable[Layer]) -> None:
        name = type(self).__name__
        self.layers = as_layers(layers, name, "layer")
        if not self.layers:
            raise ValueError(f"{name} needs at least one layer, got an empty list")
        self.in_shape, self.out_shape = check_chain(self.layers, name)
        self.n_in, self.n_out = (feature_count(s) for s in (self.in_shape, self.out_shape))
        check_same_params(self.leaves(), name)
        check_distinct(self.leaves(), name)

    def __repr__(self) -> str:
        return f"{type(self).__name__}([{', '.join(map(repr, self.layers))}])"

    @property
    def input_shape(self) -> tuple | None:
        """What one example looks like going in, as ``Layer.input_shape`` (``in_shape``)."""
        return self.in_shape

    def output_shape(self, shape: tuple | None = None) -> tuple | None:
        """What one example of ``shape`` looks like coming out, as ``Layer.output_shape``
        (None: the shape the layers declare, ``out_shape``); ``ValueError`` when ``shape``
        does not fit."""
        if shape is None:
            return self.out_shape
        return check_chain(self.layers, type(self).__name__, shape)[1]

    def leaves(self) -> list[Layer]:
        """The layers that hold parameters, in order: the layers themselves, a composite
        layer's (``Sequential``, ``Merge``, ``Concat``) its own leaves, depth first."""
        return [leaf for layer in self.layers for leaf in layer.leaves()]

    @property
    def params(self) -> list[dict[str, Array]]:
        """Each leaf layer's parameter dict, in order (the dicts themselves, for optimizers):
        one per layer, a composite layer's one per layer inside it."""
        return [leaf.params for leaf in self.leaves()]

    @property
    def dtype(self) -> str | None:
        """The dtype of the parameters, or None when no layer has any."""
        return next((layer.dtype for layer in self.leaves() if layer.dtype), None)

    @property
    def backend(self) -> Backend | None:
        """Where the parameters live, or None when no layer has any."""
        reference = self._reference()
        return None if reference is None else backend_of(reference)

    def _reference(self) -> Array | None:
        return next((p for layer in self.leaves() for p in layer.params.values()), None)

    def set_training(self, training: bool = True) -> Chain:
        """Switch the layers that behave differently in training (``Dropout``) into training
        (``True``, how layers are built) or evaluation (``False``: for validation and
        generation); returns ``self``."""
        if not isinstance(training, bool):
            raise TypeError(f"set_training takes True or False, got {training!r}")
        for layer in self.leaves():
            if hasattr(layer, "training"):
                layer.training = training
        return self

    def to(self, backend: str | Backend, device: Any = None) -> Chain:
        """Move every parameter to ``backend`` (and ``device``); returns ``self``. Tapes made
        before a move that changed any array of a layer are stale (backward raises)."""
        target = backend if isinstance(backend, Backend) else resolve_backend(backend, device)
        for layer in self.leaves():
            moved = {k: move(v, target) for k, v in layer.params.items()}
            if any(moved[k] is not v for k, v in layer.params.items()):
                layer.params.update(moved)
        return self

    def _prepare(
        self, x: Any, leading: tuple[str, ...] = ("batch",), what: str = "input", copy: bool = False
    ):
        first, reference = self.layers[0], self._reference()
        if isinstance(first, Embedding) or (
                getattr(first, "takes_one_hot_ids", False) and holds_integers(x)):
            vocab = first.vocab if isinstance(first, Embedding) else first.n_in
            assert vocab is not None  # a recurrent layer has its n_in
            return prepare_ids(x, vocab=vocab, reference=reference, owner=type(self).__name__,
                               taker=f"layer 0 {first!r}", leading=leading, what=what,
                               copy=copy)
        return prepare_input(
            x,
            n_features=self.in_shape,
            dtype=None if reference is None else dtype_name(reference.dtype),  # self.dtype
            reference=reference,
            owner=type(self).__name__,
            leading=leading,
            what=what,
            copy=copy,
        )

    def _gradient_reference(self, first_tape: Any) -> Array:
        """What an output gradient must match in place and dtype: the first layer's tape's
        first array (``_input_reference``)."""
        return self._input_reference(tape_array(first_tape))

    def _input_reference(self, inputs: Array) -> Array:
        """``inputs`` as kept on a tape, or the parameters when they are ids (an
        ``Embedding`` first, or a recurrent layer fed ids)."""
        return self._reference() if holds_integers(inputs) else inputs

    def _check_tapes(self, tapes: Any) -> None:
        """Raise ``ValueError`` unless ``tapes`` has one tape per layer, each of its layer."""
        owner = type(self).__name__
        if not isinstance(tapes, list | tuple) or len(tapes) != len(self.layers):
            got = len(tapes) if isinstance(tapes, list | tuple) else type(tapes).__name__
            raise ValueError(f"{owner}: expected {len(self.layers)} tapes, got {got}")
        for k, (layer, tape) in enumerate(zip(self.layers, tapes, strict=True)):
            layer._check_tape(tape, owner, k)


class Network(Chain):
    """A chain of feed-forward layers whose sizes are checked at construction. A layer may
    be a composite (``Sequential``, ``Merge``, ``Concat``); a ``Network`` (or a list of
    layers) in the list runs as one layer, a ``Sequential`` of its layer objects (so the two
    networks share those layers and their parameters)."""

    def __init__(self, layers: Iterable[Layer]) -> None:
        super().__init__(layers)
        for k, layer in enumerate(self.layers):
            if layer.recurrent:
                raise TypeError(f"Network: layer {k} {layer!r} is recurrent; use RecurrentNetwork")

    @held
    def forward(self, x: Any) -> tuple[list[Any], Array]:
        """``(tapes, y)`` for ``x`` of shape ``(batch,) + in_shape`` or one example
        ``in_shape`` (``(batch, n_in)`` or ``(n_in,)`` for a network of features)."""
        xp, x, single = self._prepare(x, copy=self.layers[0].keeps_input)
        tapes, y = self._forward(xp, x)
        return tapes, read_only(restore(y, single, batch_axis=0))

    @held
    def backward(self, tapes: list[Any], dy: Any) -> tuple[list[dict[str, Array]], Array | None]:
        """``(grads, dx)``: one gradient dict per parameter group (aligned with ``params``:
        one per layer, a composite layer's one per layer inside it), and the input's
        gradient (None when the input is ids: an ``Embedding`` first)."""
        self._check_tapes(tapes)
        shape = self.layers[-1]._output_shape(tapes[-1])
        xp, dy, single = prepare_like(dy, shape, self._gradient_reference(tapes[0]), "Network",
                                      "dy", batch_axis=0)
        grads, dx = self._backward(xp, tapes, dy)
        return grads, None if dx is None else restore(dx, single, batch_axis=0)

    def predict(self, x: Any) -> Array:
        """The output for ``x``, without keeping tapes."""
        return self.forward(x)[1]

    def as_layer(self) -> Sequential:
        """This network as one layer (inside another network, or as a branch of ``Merge`` or
        ``Concat``): a ``Sequential`` of the same layer objects and parameters."""
        return Sequential(self.layers)

    def _forward(self, xp: Any, x: Array) -> tuple[list[Any], Array]:
        return forward_chain(self.layers, xp, x)

    def _backward(self, xp: Any, tapes: list[Any], dy: Array) -> tuple[list[dict], Array]:
        return backward_chain(self.layers, xp, tapes, dy)
