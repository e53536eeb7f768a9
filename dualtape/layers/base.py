"""The layer contract, Grenade style: a forward pass that returns a tape, a backward pass that
reads it.

``forward(x) -> (tape, y)`` and ``backward(tape, dy) -> (grads, dx)``; ``grads`` has the keys and
shapes of ``params``. A tape is a small named tuple of arrays holding what the derivative needs.
Public methods check their input once (``edges.prepare_input``) and call the private
``_forward`` / ``_backward``, which take the array namespace ``xp`` explicitly and work on 2-D
arrays.

Shapes, decided here for every layer: arrays are ``(batch,) + example`` inside layers. For the
feature layers an example is ``(features,)`` and ``n_in``/``n_out`` are ints (or None: any
size); the spatial layers (``Convolution``, ``Pooling``, ``Pad``, ``Crop``, ``Reshape``) work
on images ``(channels, height, width)``, so a batch is ``(batch, channels, height, width)``,
torch's layout. A layer states what it takes and gives per example: ``input_shape``, a tuple
whose entries are sizes or names of free axes (``(3, "height", "width")``), or None for any
shape (the elementwise layers, ``Dropout``, ``Trivial``: inside a ``Network`` they take any
trailing shape), and ``output_shape(shape)``, what it gives for an example of ``shape``
(raising ``ValueError`` when it cannot take it, e.g. an image smaller than a kernel). A
``Network`` chains these at construction, so a wrong channel count or a ``Reshape`` of the
wrong size fails there; sizes left free (an image's height and width before a ``Reshape``
fixes them) are checked by each layer when the data comes. The feature layers derive both
from ``n_in``/``n_out``, so their behaviour and messages are unchanged. A single example
(``(features,)``, or ``(channels, height, width)``) is accepted at the public edge and
returned in the same form.

Composite layers (``Sequential``, ``Merge``, ``Concat``; ``composite.py``) run other layers:
they have no parameters of their own, ``param_groups`` lists their leaves' dicts depth first,
and their ``backward`` returns a list of gradient dicts in that order (a plain layer's one
dict is its ``[params]`` group); a ``Network``'s ``params`` and gradients are the flat list
over its layers' groups.

Aliasing, decided here at the public edge for every layer: an input a tape keeps is copied
unless checking it already made a copy (a cast), states are copied, and every array a public
``forward`` returns is ``read_only``: a read-only view on numpy (free), a copy on backends
without read-only arrays. Writing to an input or an output afterwards never changes a tape.
A layer's tape class is named after its kind (``FullyConnectedTape``, ``LSTMSequenceTape``);
for layers with a fixed ``n_in`` its first field is the input.

A tape does not pin the weights: the tapes of layers with parameters end in the ``version``
of the ``ParamDict`` their forward pass saw (its docstring: when a stamp changes), and every
backward pass refuses a tape whose ``version`` is not the layer's (``_check_version``). The
rule, and what it does not see: docs/contract.md, "Tape versions".
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

from ..backend import dtype_name, zeros_like_place
from ..checkpointing import (
    CheckpointedTape,
    segment_length,
    sequence_backward,
    sequence_forward,
)
from ..stack import RecurrentNetworkTape
from .edges import (
    check_dtype,
    check_not_empty,
    check_sequence_gradients_order,
    check_size,
    holds_integers,
    prepare_input,
    prepare_like,
    read_only,
    restore,
)
from .params import ParamDict

Array = Any


if TYPE_CHECKING:

    class _ParamsAttribute:
        """What ``Layer.__setattr__`` makes of ``params``, told to the type checker: it reads
        as a ``ParamDict`` and takes any dict of arrays (wrapped into one)."""

        def __get__(self, layer: object, owner: type | None = None) -> ParamDict: ...

        def __set__(self, layer: object, value: dict[str, Array]) -> None: ...


class MissingKind:
    """``Layer.kind`` until a class sets its own: reading it raises an ``AttributeError`` that
    tells the class's author what to add."""

    def __get__(self, layer: object, owner: type) -> str:
        name = owner.__name__
        raise AttributeError(f"{name} has no kind: give the class one (kind = {name!r}), the "
                             "name its tape classes begin with and files store")


class Layer:
    """A feed-forward layer. Subclasses set ``kind`` and implement ``_forward``/``_backward``.

    ``n_in``/``n_out`` are the feature sizes, or ``None`` for layers that keep any size.
    """

    if TYPE_CHECKING:
        kind: ClassVar[str]
    else:
        kind = MissingKind()  # a class's own kind hides it
    recurrent: ClassVar[bool] = False
    keeps_input: bool = True  # the tape holds the input: forward copies it (a composite sets
    # its own, from its layers')
    fills_gradient_buffers: ClassVar[bool] = False
    """Whether ``_backward_sequence`` (a recurrent layer's) or ``_backward`` (keyword
    ``grads_out``) writes into the ``grads_out`` arrays it is given (a fast path that does;
    ``gradient_buffers`` makes them only for such layers)."""
    n_in: int | None = None
    n_out: int | None = None
    spatial: ClassVar[bool] = False
    """Whether the layer works on images ``(channels, height, width)`` (or turns features
    into them): such layers chain in a ``Network``, not in a ``RecurrentNetwork``."""
    takes_ids: ClassVar[bool] = False
    """Whether the layer's input is integer ids, an example one id (``Embedding``): it goes
    first in a ``Network`` or ``RecurrentNetwork``, whose input is then ids too."""
    composite: ClassVar[bool] = False
    """Whether the layer runs other layers (``Sequential``, ``Merge``, ``Concat``): it has no
    parameters of its own, its layers' are in ``param_groups``."""

    if TYPE_CHECKING:
        params = _ParamsAttribute()
    else:
        params: ParamDict
    """The parameter arrays by name. Assigning a dict stores it as a ``ParamDict`` (a plain
    dict is copied into one, holding the same arrays, with a new ``version``), so earlier
    tapes are stale."""

    def __init__(self) -> None:
        self.params = {}

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "params":  # an attribute, not a property: read in every call, set rarely
            if not isinstance(value, ParamDict):
                value = ParamDict(value)
            value.layer_name = type(self).__name__
        super().__setattr__(name, value)

    def _check_version(self, tape: Any) -> None:
        """Raise ``RuntimeError`` unless ``tape`` was made with the parameters as they are
        (its ``version`` is that of ``params``): an integer comparison per backward pass."""
        if tape.version != self.params.version:
            raise RuntimeError(
                f"{self!r}: this tape was made with other parameters (another network's, or "
                "these before an optimizer step, params[...] = ..., update or net.to(...)), so "
                "backward would mix its activations with these weights; pass the tape this "
                "layer's forward returned, run forward again, or take the gradients before "
                "updating"
            )

    def _checked_dtype(self, dtype: Any) -> str:
        """A constructor's ``dtype`` argument as ``"float32"``/``"float64"``, else ValueError
        naming the layer: the one dtype check every layer constructor calls."""
        return check_dtype(self.kind, dtype)

    @property
    def dtype(self) -> str | None:
        """The parameters' dtype name, or ``None`` for a layer without parameters."""
        first = next(iter(self.params.values()), None)
        return None if first is None else dtype_name(first.dtype)

    def config(self) -> dict[str, Any]:
        """The constructor arguments that rebuild this layer's shape (for ``dualtape.save``)."""
        return {}

    @classmethod
    def from_config(cls, config: dict[str, Any], dtype: str) -> Layer:
        """A new layer of the shape ``config`` describes, with parameters in ``dtype``
        (passed to the constructor where it takes ``dtype``: a layer without parameters need
        not)."""
        if takes_keyword(cls, "dtype"):
            return cls(**config, dtype=dtype)  # type: ignore[call-arg]
        return cls(**config)

    @classmethod
    def param_shapes(cls, config: dict[str, Any]) -> dict[str, tuple[int, ...]]:
        """The parameter shapes of a layer built from ``config``, without building it."""
        return {}

    def __repr__(self) -> str:
        return f"{self.kind}({', '.join(str(v) for v in self.config().values())})"

    def _reference(self) -> Array | None:
        return next(iter(self.params.values()), None)

    def leaves(self) -> list[Layer]:
        """The layers that hold this layer's parameters, in order: ``[self]``; a composite
        layer's are its layers' leaves."""
        return [self]

    @property
    def param_groups(self) -> list[ParamDict]:
        """The parameter dicts an optimizer steps for this layer (``[params]``; a composite
        layer's, one per leaf), in the order of the gradient list of ``_backward_groups``."""
        return [leaf.params for leaf in self.leaves()]

    def _backward_groups(self, xp: Any, tape: Any, dy: Array) -> tuple[list[dict], Array]:
        """``_backward`` with the gradients as a list aligned with ``param_groups``."""
        grads, dx = self._backward(xp, tape, dy)
        return [grads], dx

    @property
    def input_shape(self) -> tuple | None:
        """What one example must look like: a tuple of sizes and names of free axes
        (``(n_in,)``, ``(3, "height", "width")``), or None for any shape."""
        return None if self.n_in is None else (self.n_in,)

    def output_shape(self, shape: tuple | None) -> tuple | None:
        """What the layer gives for an example of ``shape`` (sizes and names of free axes;
        None: not known), which ``input_shape`` fits; ``ValueError`` when it cannot take it."""
        return shape if self.n_out is None else (self.n_out,)

    def forward(self, x: Any) -> tuple[Any, Array]:
        """``(tape, y)`` for ``x`` of shape ``(batch,) + input_shape`` or one example
        ``input_shape`` (``(batch, n_in)`` or ``(n_in,)`` for the feature layers)."""
        xp, x, single = prepare_input(
            x, n_features=self.input_shape, dtype=self.dtype, reference=self._reference(),
            owner=repr(self), copy=self.keeps_input,
        )
        tape, y = self._forward(xp, x)
        return tape, read_only(restore(y, single, batch_axis=0))

    def backward(self, tape: Any, dy: Any) -> tuple[dict[str, Array], Array]:
        """``(grads, dx)`` from a tape of ``forward`` and the gradient ``dy`` of its output."""
        self._check_tape(tape, repr(self))
        xp, dy, single = prepare_like(dy, self._output_shape(tape), tape_array(tape),
                                      repr(self), "dy", batch_axis=0)
        grads, dx = self._backward(xp, tape, dy)
        return grads, restore(dx, single, batch_axis=0)

    def _output_shape(self, tape: Any) -> tuple[int, ...]:
        """The shape of the output the tape belongs to (for checking ``dy``): by default
        that of the tape's last array (an activation's output; a ``version`` after it is no
        array)."""
        for field in reversed(tape):
            if hasattr(field, "shape"):
                return tuple(field.shape)
        raise TypeError(f"{self!r}: its tape, a {type(tape).__name__}, holds no array; define "
                        "_output_shape(tape), the shape dy must have")

    def _check_tape(self, tape: Any, owner: str, k: int | None = None) -> None:
        """Raise ``ValueError`` unless ``tape`` can be this layer's (layer ``k`` of ``owner``,
        or the layer itself when ``k`` is None): its class is named after the layer's kind
        (or that of a class the layer's class inherits from: its forward pass may be reused),
        and its input has ``n_in`` features (or is ids, where the layer takes them)."""
        name = type(tape).__name__
        if (
            not isinstance(tape, tuple)
            or not (name.startswith(self.kind) or name.startswith(inherited_kinds(type(self))))
            or (self.n_in is not None and tape[0].shape[-1] != self.n_in
                and not (getattr(self, "takes_one_hot_ids", False) and holds_integers(tape[0])))
        ):
            rule = f"its tape classes are named after its kind, as {self.kind}Tape"
            if k is None:
                raise ValueError(
                    f"{owner}: the tape is a {name}, not one of this layer ({rule}); pass the "
                    "tape its forward returned"
                )
            raise ValueError(
                f"{owner}: tape {k} is a {name}, not one of layer {k} {self!r} ({rule}); pass "
                "the tapes this network's forward returned"
            )

    def _forward(self, xp: Any, x: Array) -> tuple[Any, Array]:
        raise NotImplementedError

    def _backward(self, xp: Any, tape: Any, dy: Array) -> tuple[dict[str, Array], Array]:
        raise NotImplementedError


def inherited_kinds(cls: type) -> tuple[str, ...]:
    """The kinds the classes ``cls`` inherits from define (a tape class named after one of
    them is one of ``cls``'s layers' tapes too)."""
    kinds = (base.__dict__.get("kind") for base in cls.__mro__[1:])
    return tuple(kind for kind in kinds if isinstance(kind, str))


def takes_keyword(cls: type, name: str) -> bool:
    """Whether ``cls``'s constructor takes the keyword argument ``name``."""
    parameters = inspect.signature(cls).parameters.values()
    return any((p.name == name and p.kind != p.POSITIONAL_ONLY) or p.kind == p.VAR_KEYWORD
               for p in parameters)


def tape_array(tape: tuple) -> Array:
    """The first array of a tape (the one ``dy`` is checked against for place and dtype),
    looking inside the tapes a composite layer's tape holds."""
    first = tape[0]
    return tape_array(first) if isinstance(first, tuple) else first


class OutputTape(NamedTuple):
    """The tape of an activation whose derivative needs only its output ``y``."""

    y: Array


class Activation(Layer):
    """An elementwise or row-wise layer without parameters that keeps only its output, in a
    tape class of its own (``TanhTape``, a subclass of ``OutputTape``)."""

    keeps_input = False
    tape_class: ClassVar[type[OutputTape]] = OutputTape

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.tape_class = type(f"{cls.kind}Tape", (OutputTape,), {"__slots__": ()})

    @classmethod
    def from_config(cls, config: dict[str, Any], dtype: str) -> Layer:
        return cls(**config)

    def _forward(self, xp: Any, x: Array) -> tuple[OutputTape, Array]:
        y = self.activate(xp, x)
        return self.tape_class(y), y

    def _backward(self, xp: Any, tape: OutputTape, dy: Array) -> tuple[dict[str, Array], Array]:
        return {}, self.derivative(xp, tape.y, dy)

    def activate(self, xp: Any, x: Array) -> Array:
        """The layer's function."""
        raise NotImplementedError

    def derivative(self, xp: Any, y: Array, dy: Array) -> Array:
        """The gradient of the input from the output ``y`` and its gradient ``dy``."""
        raise NotImplementedError


class RecurrentLayer(Layer):
    """A layer with a recurrent state, Grenade's recurrent-layer contract.

    Step: ``forward(state, x) -> (tape, state_next, y)`` and
    ``backward(tape, dstate_next, dy) -> (grads, dstate, dx)``.
    Sequence: ``forward_sequence(state, xs) -> (tape, state_T, ys)`` and
    ``backward_sequence(tape, dstate_T, dys) -> (grads, dstate_0, dxs)`` over ``(T, batch, ·)``.
    Subclasses implement ``_forward_step``, ``_backward_step``, ``_forward_sequence`` and
    ``_backward_sequence`` on 2-D (step) and 3-D (sequence) arrays.
    """

    recurrent = True
    takes_one_hot_ids: ClassVar[bool] = False
    """Whether a sequence may be ids ``(T, batch)`` in ``[0, n_in)``, each standing for its
    one-hot row (``linear_algebra`` says how; no input gradient): first in a
    ``RecurrentNetwork``, the layer then takes integer ids as the network's input."""
    state_size: int
    n_in: int
    n_out: int

    def initial_state(self, batch: int | None = None) -> Array:
        """Zeros of shape ``(batch, state_size)``, or ``(state_size,)`` when ``batch`` is None."""
        if batch is None:
            return zeros_like_place((self.state_size,), self._reference())
        return zeros_like_place(
            (check_size(repr(self), "batch", batch), self.state_size), self._reference()
        )

    def _check_state(self, state: Any, batch: int, copy: bool) -> Array:
        """The state checked for ``batch`` (None: zeros; ``(state_size,)`` at batch 1 taken as
        one row); ``copy=True`` for one a tape may keep."""
        if state is None:
            return zeros_like_place((batch, self.state_size), self._reference())
        return prepare_like(
            state, (batch, self.state_size), self._reference(), repr(self), "state", copy=copy
        )[1]

    def forward(self, state: Any, x: Any) -> tuple[Any, Array, Array]:  # type: ignore[override]
        """One step: ``(tape, state_next, y)`` for ``x`` ``(batch, n_in)`` or ``(n_in,)``;
        ``state`` None starts from zeros."""
        xp, x, single = prepare_input(
            x, n_features=self.n_in, dtype=self.dtype, reference=self._reference(),
            owner=repr(self), copy=True,
        )
        state = self._check_state(state, x.shape[0], copy=True)
        tape, state_next, y = self._forward_step(xp, state, x)
        return tape, read_only(restore(state_next, single)), read_only(restore(y, single))

    def backward(  # type: ignore[override]
        self, tape: Any, dstate_next: Any, dy: Any
    ) -> tuple[dict[str, Array], Array, Array]:
        """One step back: ``(grads, dstate, dx)``; ``dstate_next`` may be None (zeros)."""
        self._check_tape_kind(tape, "SequenceTape", "backward", "forward", "backward_sequence")
        self._check_tape(tape, repr(self))
        batch = tape[0].shape[0]
        xp, dy, single = prepare_like(dy, (batch, self.n_out), tape[0], repr(self), "dy")
        dstate_next = self._state_gradient(dstate_next, batch, "dstate_next")
        grads, dstate, dx = self._backward_step(xp, tape, dstate_next, dy)
        return grads, restore(dstate, single), restore(dx, single)

    def forward_sequence(
        self, state: Any, xs: Any, *, tape: str | int = "full"
    ) -> tuple[Any, Array, Array]:
        """A sequence: ``(tape, state_T, ys)`` for ``xs`` ``(T, batch, n_in)`` or ``(T, n_in)``,
        from ``state`` ``(batch, state_size)`` or ``(state_size,)``, or None for zeros.
        ``tape`` as in ``RecurrentNetwork.forward_sequence``: ``"full"`` (every step's tape),
        ``"sqrt"`` or k (a ``CheckpointedTape`` of the states every ⌈√T⌉ or k steps, each
        segment recomputed in ``backward_sequence``)."""
        xp, xs, single = prepare_input(
            xs,
            n_features=self.n_in,
            dtype=self.dtype,
            reference=self._reference(),
            owner=repr(self),
            leading=("time", "batch"),
            what="input sequence",
            copy=True,
        )
        check_not_empty(xs, repr(self))
        every = segment_length(tape, xs.shape[0])
        state = self._check_state(state, xs.shape[1], copy=True)
        kept, states, ys = sequence_forward([self], xp, [state], xs, every)
        if isinstance(kept, RecurrentNetworkTape):  # a stack of one: the layer's own tape
            kept = kept.tapes[0]
        return kept, read_only(restore(states[0], single)), read_only(restore(ys, single))

    def _check_tape_kind(self, tape: Any, wrong: str, verb: str, made_by: str,
                         instead: str) -> None:
        """``ValueError`` where ``tape`` is of the other kind (its class's name ends in
        ``wrong``: a step's tape given for a sequence's, or the other way): named, before its
        arrays' shapes would blame the gradient."""
        name = type(tape).__name__
        if name.endswith(wrong) or (wrong == "SequenceTape" and isinstance(tape, CheckpointedTape)):
            raise ValueError(f"{self!r}: {verb} takes the tape {made_by} returned, got a {name} "
                             f"(use {instead} for it)")

    def backward_sequence(
        self, tape: Any, dstate_T: Any, dys: Any
    ) -> tuple[dict[str, Array], Array, Array]:
        """Backprop through time: ``(grads, dstate_0, dxs)``.

        ``dstate_T`` ``(batch, state_size)`` or ``(state_size,)`` is the gradient of the last
        state (None: zeros), ``dys`` ``(T, batch, n_out)`` or ``(T, n_out)`` that of the outputs;
        the order of ``backward(tape, dstate_next, dy)`` and ``RecurrentNetwork``'s. Arguments
        in the other order raise ``ValueError`` (a state gradient has no time axis).
        """
        checkpointed = isinstance(tape, CheckpointedTape)
        if not checkpointed:
            self._check_tape_kind(tape, "StepTape", "backward_sequence", "forward_sequence",
                                  "backward")
            self._check_tape(tape, repr(self))
        check_sequence_gradients_order(repr(self), dstate_T, dys)
        steps, batch = tape[0].shape[:2]
        xp, dys, single = prepare_like(
            dys, (steps, batch, self.n_out), tape[0], repr(self), "dys"
        )
        dstate_T = self._state_gradient(dstate_T, batch, "dstate_T")
        stacked = tape if checkpointed else RecurrentNetworkTape([tape], steps, batch)
        grads, dstates, dxs = sequence_backward([self], xp, stacked, [dstate_T], dys)
        return grads[0], restore(dstates[0], single), restore(dxs, single)

    def _forward_step(self, xp: Any, state: Array, x: Array) -> tuple[Any, Array, Array]:
        raise NotImplementedError

    def _backward_step(
        self, xp: Any, tape: Any, dstate_next: Array, dy: Array
    ) -> tuple[dict[str, Array], Array, Array]:
        raise NotImplementedError

    def _state_gradient(self, dstate: Any, batch: int, what: str) -> Array:
        reference = self._reference()
        if dstate is None:
            return zeros_like_place((batch, self.state_size), reference)
        _, dstate, _ = prepare_like(dstate, (batch, self.state_size), reference, repr(self), what)
        return dstate

    def predict_step(self, state: Any, x: Any) -> tuple[Array, Array]:
        """``(state_next, y)`` without a tape, for generation (one step of
        ``predict_sequence``)."""
        _, state_next, y = self.forward(state, x)
        return state_next, y

    def step(self, state: Any, x: Any) -> tuple[Array, Array]:
        """``predict_step``'s former name, kept working (``step`` also names an optimizer's
        update)."""
        return self.predict_step(state, x)


